-- Privacy that holds everywhere (issue 38; docs/privacy.md).
--
-- privacy_key: the installation's key for hashing addresses (HMAC-SHA256,
-- src/address.rs `AddressKey`): 32 random bytes, made once. What the lists
-- keep of an erased address, the erasures and the change log below are
-- keyed hashes under it, never the address. Backups must keep this row:
-- without it, hashed entries can no longer be matched.
CREATE TABLE IF NOT EXISTS privacy_key (
  id         TINYINT UNSIGNED NOT NULL DEFAULT 1,
  hmac_key   BINARY(32)       NOT NULL,
  PRIMARY KEY (id),
  CONSTRAINT privacy_key_one_row CHECK (id = 1)
) ENGINE=InnoDB;

INSERT IGNORE INTO privacy_key (id, hmac_key) VALUES (1, RANDOM_BYTES(32));

-- The suppression and tracking opt-out entries of erased addresses: the
-- entry outlives the readable address (a later build still skips it, or
-- sends it untracked), as a keyed hash of the normalised address.
CREATE TABLE IF NOT EXISTS suppressions_hashed (
  email_hmac  BINARY(32)   NOT NULL,
  reason      VARCHAR(64)  NOT NULL DEFAULT 'manual',
  created_at  DATETIME     NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (email_hmac)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS tracking_optouts_hashed (
  email_hmac  BINARY(32)   NOT NULL,
  source      VARCHAR(64)  NOT NULL DEFAULT 'manual',
  created_at  DATETIME     NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (email_hmac)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Every address `linktrack erase` was given, as its keyed hash, with the
-- time of the first erase: servers treat hits on letters made before it as
-- nobody's, and the journal replay stores them without the address.
CREATE TABLE IF NOT EXISTS erasures (
  email_hmac  BINARY(32)   NOT NULL,
  erased_at   DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (email_hmac)
) ENGINE=InnoDB;

-- What every server's in-memory opt-out and erasure sets follow: one row
-- per opt-out, opt-in (an opt-out removed) and erasure, appended in the
-- statement's transaction. Servers read the rows past the last they saw
-- every few seconds; rows older than a week are deleted by them (a server
-- that was away longer loads the lists whole).
CREATE TABLE IF NOT EXISTS privacy_changes (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  email_hmac  BINARY(32)      NOT NULL,
  change_kind ENUM('optout','optin','erase') NOT NULL,
  at          DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  KEY at (at)
) ENGINE=InnoDB;

-- Which running servers have taken which changes in: a server writes the
-- last change id its journal replay honours (every event it stores from
-- then on), and `erase` waits for every server seen in the last minute to
-- reach its erasure before it scrubs the tables.
CREATE TABLE IF NOT EXISTS privacy_servers (
  server      VARCHAR(255)    NOT NULL COMMENT 'host name and journal directory',
  applied_id  BIGINT UNSIGNED NOT NULL COMMENT 'privacy_changes honoured by every event stored from now on',
  seen_at     DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (server)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- `track: "last_open_day"`: one row per address, the UTC day of its last
-- open, overwritten; nothing else about the open is kept.
CREATE TABLE IF NOT EXISTS last_open_days (
  email       VARCHAR(320)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  day         DATE            NOT NULL,
  PRIMARY KEY (email)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
