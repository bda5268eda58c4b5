-- Every decision linktrack took on mail that came back (issue 40,
-- docs/bounces.md): one row per (bounce or complaint message, recipient),
-- so an operator can audit and undo it (`suppressions remove`), and a
-- second delivery of the same message (a retried pipe) finds its row and
-- changes nothing. `email` is the letter's recipient, normalised, compared
-- byte for byte as in `suppressions`.
CREATE TABLE IF NOT EXISTS bounces (
  id                BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  source_key        BINARY(32)      NOT NULL COMMENT 'SHA-256 of the message''s Message-ID, or of its bytes when it has none',
  source_message_id VARCHAR(255)    NOT NULL DEFAULT '',
  email             VARCHAR(320)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  mailing_id        VARCHAR(64)     NOT NULL,
  letter_id         BIGINT UNSIGNED NOT NULL,
  kind              ENUM('hard','soft','policy','complaint') NOT NULL,
  status            VARCHAR(16)     NOT NULL DEFAULT '' COMMENT 'enhanced status code (5.1.1) or the complaint''s feedback type',
  diagnostic        VARCHAR(1000)   NOT NULL DEFAULT '' COMMENT 'the remote MTA''s words',
  action            ENUM('suppressed','counted','reported','listed') NOT NULL COMMENT 'suppressed: put on the list by this row; counted: a soft bounce under the limit; reported: not the address''s fault; listed: on the list already',
  received_at       DATETIME        NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY bounces_source (source_key, email),
  KEY bounces_email (email, kind, received_at),
  KEY bounces_mailing (mailing_id, kind)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
