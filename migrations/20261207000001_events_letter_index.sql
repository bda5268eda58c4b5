-- The settle pass reads, for the letters of a batch, their clicks within
-- the verdict windows (store/verdicts.rs, issue 45). On `mailing_kind`
-- (mailing_id, kind, occurred_at) that read walked every click of the
-- mailing in the window and filtered the letters afterwards: on a hot
-- mailing, hundreds of thousands of index entries for a batch of a few
-- thousand events, and 1-3.5 s per statement. Keyed by letter first, it
-- reads only the batch's letters' own clicks. Nothing else reads
-- `mailing_kind`, so it is replaced, not added: inserts keep one secondary
-- index on top of `event_id`.
--
-- Only on an InnoDB `events`: on a Spider cluster's head `events` is a
-- Spider table, which an ALTER would copy through to the data nodes;
-- `migrate --shards` changes the data tables on the nodes instead.
SET @lt_events_engine = (SELECT ENGINE FROM information_schema.TABLES
  WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'events');
SET @lt_events_ddl = IF(@lt_events_engine = 'InnoDB',
  'ALTER TABLE events DROP INDEX mailing_kind, ADD INDEX mailing_letter (mailing_id, letter_id, kind, occurred_at)',
  'DO 0');
PREPARE lt_events_stmt FROM @lt_events_ddl;
EXECUTE lt_events_stmt;
DEALLOCATE PREPARE lt_events_stmt;
