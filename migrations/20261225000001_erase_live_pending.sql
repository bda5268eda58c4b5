-- Letters an `erase` could not take out of the Redis live layer (it ran
-- without REDIS_URL): the next `erase` that reaches Redis takes them out
-- of its segment sets and latest clicks too, then deletes the rows
-- (src/privacy/erase.rs). Which letters only: no address, no hash.
CREATE TABLE IF NOT EXISTS erase_live_pending (
  mailing_id  VARCHAR(64)     NOT NULL,
  letter_id   BIGINT UNSIGNED NOT NULL,
  recorded_at DATETIME        NOT NULL,
  PRIMARY KEY (mailing_id, letter_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
