-- One row per letter handed to an MTA over SMTP: a re-run of a finished or
-- killed job skips every delivered or rejected letter, so nothing is
-- delivered twice. A row still 'sending' after a crash is a letter whose
-- reply was never recorded: the re-run sends it again and names it (its
-- Message-ID is the same, so a receiver can drop the duplicate).
CREATE TABLE IF NOT EXISTS deliveries (
  mailing_id  VARCHAR(64)     NOT NULL,
  letter_id   BIGINT UNSIGNED NOT NULL,
  status      ENUM('sending','delivered','rejected') NOT NULL COMMENT 'sending: handed over, reply not yet recorded',
  reply       VARCHAR(512)    NOT NULL DEFAULT '' COMMENT 'the MTA''s reply to the message (or its rejection)',
  at          DATETIME        NOT NULL,
  PRIMARY KEY (mailing_id, letter_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
