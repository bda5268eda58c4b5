-- Token version 2 (docs/token.md): tokens seal their kind, link template and
-- a nonce under a key only this installation holds.
--
-- token_format: one row. `sealed_since_ms` is the Unix millisecond from
-- which tokens are sealed: 0 when `links` was empty at this migration (a
-- fresh install), else the migration's moment; older tokens are legacy
-- (plain random bits). `install_key` is this installation's random part of
-- the seal key, mixed with LINKTRACK_SECRET (src/token.rs, TokenSeal).
CREATE TABLE IF NOT EXISTS token_format (
  id              TINYINT UNSIGNED NOT NULL DEFAULT 1,
  sealed_since_ms BIGINT UNSIGNED  NOT NULL,
  install_key     BINARY(32)       NOT NULL,
  PRIMARY KEY (id),
  CONSTRAINT token_format_one_row CHECK (id = 1)
) ENGINE=InnoDB;

INSERT IGNORE INTO token_format (id, sealed_since_ms, install_key)
SELECT 1,
       IF(EXISTS (SELECT 1 FROM links LIMIT 1), FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000), 0),
       RANDOM_BYTES(32);

-- link_templates: what a mailing's link was, kept after its `links` rows are
-- dropped with their partition, so an old letter's link still leads where
-- it did (issue 27). Permanent, never rotated; one row per distinct
-- (mailing, kind, position, URL), never per reader: it holds no address.
-- `url_hash` (SHA-256 of the URL) makes the key unique, as a URL has no
-- length limit. `first_day` is the UTC day its first token was made: a
-- token dated earlier is not one of its tokens.
CREATE TABLE IF NOT EXISTS link_templates (
  id          INT UNSIGNED    NOT NULL AUTO_INCREMENT,
  mailing_id  VARCHAR(64)     NOT NULL,
  kind        ENUM('click','image','pixel','unsubscribe') NOT NULL,
  position    INT UNSIGNED    NOT NULL,
  url_hash    BINARY(32)      NOT NULL,
  url         TEXT            NOT NULL,
  first_day   DATE            NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY link_templates_key (mailing_id, kind, position, url_hash)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Where a mailing's readers manage their subscription (the mailing file's
-- `list_manage_url`): an expired unsubscribe link's page names it.
ALTER TABLE mailings ADD COLUMN list_manage_url VARCHAR(2048) NULL;
