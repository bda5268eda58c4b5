-- The mailing page's bounce figures count distinct letters per kind of a
-- mailing's bounces (store/bounces.rs, mailing_summary): with the letter in
-- the index that count reads the index alone, not each bounce's row
-- (16.6 ms for 12,000 bounces of a million-letter mailing before).
ALTER TABLE bounces DROP INDEX bounces_mailing,
  ADD INDEX bounces_mailing (mailing_id, kind, letter_id);
