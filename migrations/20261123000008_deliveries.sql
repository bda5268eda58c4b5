-- One row per letter handed to an MTA over SMTP: a re-run of a finished or
-- killed job skips every letter recorded here, so nothing is delivered
-- twice (except a message whose 250 arrived after the crash and before its
-- row: the Message-ID is the same, so a receiver can drop it).
CREATE TABLE IF NOT EXISTS deliveries (
  mailing_id  VARCHAR(64)     NOT NULL,
  letter_id   BIGINT UNSIGNED NOT NULL,
  status      ENUM('delivered','rejected') NOT NULL,
  reply       VARCHAR(512)    NOT NULL DEFAULT '' COMMENT 'the MTA''s reply to the message (or its rejection)',
  at          DATETIME        NOT NULL,
  PRIMARY KEY (mailing_id, letter_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
