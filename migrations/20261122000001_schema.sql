-- linktrack schema, valid on MariaDB 10.11 and MySQL 8.
--
-- `links` and `events` are RANGE-partitioned by day on `inserted`. MySQL requires
-- the partitioning column in every unique key, hence PRIMARY KEY (id, inserted)
-- and UNIQUE (uuid, inserted). The id is AUTO_INCREMENT so inserts append to
-- the clustered index instead of landing at random leaves (seed 001).
--
-- Text columns use utf8mb4_unicode_ci (valid on MariaDB and MySQL 8): stored
-- bytes are exact whatever the collation, and sqlx 0.8 will not decode
-- `_bin`-collated text as a Rust String (MySQL flags such columns BINARY).
--
-- Migrations are deterministic: the only partition created here holds nothing
-- but the epoch's first day. Daily partitions are created from code by
-- `linktrack partitions ensure` (and `rotate`), and there is deliberately no
-- MAXVALUE catch-all: a row for a day without a partition fails loudly instead
-- of piling up in a partition that can never be dropped cheaply.

CREATE TABLE IF NOT EXISTS links (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  uuid        BINARY(16)      NOT NULL COMMENT 'the token: UUIDv7 layout, its timestamp gives `inserted`',
  inserted    DATE            NOT NULL COMMENT 'UTC day of the token timestamp; the partition key',
  kind        ENUM('click','image','pixel','unsubscribe') NOT NULL,
  mailing_id  VARCHAR(64)     NOT NULL,
  letter_id   BIGINT UNSIGNED NOT NULL,
  email       VARCHAR(320)    NOT NULL,
  position    INT UNSIGNED    NOT NULL COMMENT 'ordinal of the link in the letter, 0 for pixel/unsubscribe',
  url         MEDIUMTEXT      NOT NULL COMMENT 'the URL a browser would follow; no length limit',
  meta        JSON            NULL,
  PRIMARY KEY (id, inserted),
  UNIQUE KEY uuid (uuid, inserted),
  KEY mailing_letter (mailing_id, letter_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci ROW_FORMAT=COMPRESSED
PARTITION BY RANGE COLUMNS(inserted) (
  PARTITION p19700101 VALUES LESS THAN ('1970-01-02')
);

CREATE TABLE IF NOT EXISTS events (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  inserted    DATE            NOT NULL COMMENT 'UTC day of occurred_at; the partition key',
  event_id    BINARY(16)      NOT NULL COMMENT 'idempotency key: a replayed journal entry is not counted twice',
  occurred_at DATETIME(3)     NOT NULL,
  kind        ENUM('click','open','image','unsubscribe') NOT NULL,
  uuid        BINARY(16)      NOT NULL COMMENT 'the token that was hit',
  link_id     BIGINT UNSIGNED NULL,
  mailing_id  VARCHAR(64)     NULL,
  letter_id   BIGINT UNSIGNED NULL,
  email       VARCHAR(320)    NULL,
  position    INT UNSIGNED    NULL,
  ip          VARCHAR(45)     NULL COMMENT 'truncated: /24 for IPv4, /48 for IPv6',
  user_agent  VARCHAR(512)    NULL,
  bot         TINYINT(1)      NOT NULL DEFAULT 0,
  bot_reason  VARCHAR(32)     NULL,
  PRIMARY KEY (id, inserted),
  UNIQUE KEY event_id (event_id, inserted),
  KEY mailing_kind (mailing_id, kind, occurred_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci ROW_FORMAT=COMPRESSED
PARTITION BY RANGE COLUMNS(inserted) (
  PARTITION p19700101 VALUES LESS THAN ('1970-01-02')
);

-- The suppression list (blacklist), by normalised address. The address is
-- compared byte for byte (utf8mb4_bin): an accent-insensitive key would make
-- jose@ and josé@ one address. Read it back with CONVERT(email USING utf8mb4).
CREATE TABLE IF NOT EXISTS suppressions (
  email       VARCHAR(320)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  reason      VARCHAR(64)     NOT NULL DEFAULT 'manual',
  created_at  DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (email)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Named sequences handed out in blocks (seeds 002 and 003): one
-- `UPDATE ... SET id = LAST_INSERT_ID(id + step)` reserves a whole segment.
CREATE TABLE IF NOT EXISTS sequences (
  name        VARCHAR(64)     NOT NULL,
  id          BIGINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin;
