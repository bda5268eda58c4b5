-- The seal keys this installation has seen (issue 39, docs/token.md
-- "Rotating the secret"): one row per key, named by its fingerprint
-- (HMAC-SHA256 of a label under the key, 64 bits in hex), never the key.
-- `build` and `serve` compare their key with these rows before they seal
-- or open a token, so a builder or server started with another
-- LINKTRACK_SECRET is refused, naming the fix, instead of making tokens
-- no server can open.
--   current_since  when it became the key new tokens are sealed with (the
--                  newest is the current key; a rotate or --new-secret sets it)
--   last_sealed_on the last UTC day a build sealed tokens with it: its
--                  tokens are live until that day + --keep-days
--   how            first (the first key seen), adopted (an install from
--                  before this table, whose key opened its newest tokens),
--                  rotate, new-secret
--   retired_at     `linktrack secrets retire`: its tokens were given up, a
--                  server need not hold it
-- Tiny: one row per rotation.
CREATE TABLE IF NOT EXISTS seal_keys (
  fingerprint    CHAR(16)    NOT NULL,
  current_since  DATETIME(3) NOT NULL COMMENT 'UTC',
  last_sealed_on DATE        NULL     COMMENT 'UTC day',
  how            VARCHAR(16) NOT NULL,
  retired_at     DATETIME(3) NULL     COMMENT 'UTC',
  PRIMARY KEY (fingerprint)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- From when keys are recorded: 0 when `links` was empty at this migration
-- (a fresh install: its first key is recorded as it is), else this
-- moment: the first key an upgraded install meets is recorded only if it
-- opens the tokens stored before it (src/store/seal_keys.rs).
ALTER TABLE token_format ADD COLUMN keys_recorded_since_ms BIGINT UNSIGNED NOT NULL DEFAULT 0;
UPDATE token_format
   SET keys_recorded_since_ms =
       IF(EXISTS (SELECT 1 FROM links LIMIT 1), FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000), 0);
