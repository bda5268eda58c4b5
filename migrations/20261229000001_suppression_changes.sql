-- What a relay's in-memory suppression list follows, as `privacy_changes`
-- is for the opt-outs and erasures: one row per address put on the
-- suppression list (`suppress`, in clear or as its keyed hash) or taken
-- off it (`unsuppress`), appended in the writer's transaction, as the
-- address's keyed hash. A table of its own so that servers which follow
-- `privacy_changes` neither read these rows nor meet a kind they do not
-- know. Rows older than a week are deleted by the relays (one away longer
-- loads the list whole).
CREATE TABLE IF NOT EXISTS suppression_changes (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  email_hmac  BINARY(32)      NOT NULL,
  change_kind ENUM('suppress','unsuppress') NOT NULL,
  at          DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  KEY at (at)
) ENGINE=InnoDB;
