-- Statistics: small rollup tables filled by the rollup worker
-- (`store::stats::rollup`), so a mailing's summary is a handful of
-- primary-key range reads instead of a scan of `events`.
--
-- Exactly once: the worker reads events past a durable watermark
-- (`rollup_state`, per partition day the last rolled `events.id`) and, in ONE
-- transaction, adds them to these tables and advances the watermark. A crash
-- before COMMIT leaves both untouched; a replayed journal entry never becomes
-- a second `events` row (UNIQUE (event_id, inserted)), so nothing is counted
-- twice. The watermark assumes ids become visible in id order, which holds
-- with one event writer.

--
-- With several event writers that assumption fails (a transaction holding
-- id 100 can commit after one holding 101 was rolled), so the worker can be
-- given a settle time: it then rolls only ids up to `safe_id`, the largest
-- id that was visible `settle` ago (`seen_id` observed at `seen_at`). Ids
-- are allocated in increasing order, so every id below an observed one was
-- in flight at that moment, and has committed or rolled back once
-- transactions are shorter than the settle time.
CREATE TABLE IF NOT EXISTS rollup_state (
  day         DATE            NOT NULL COMMENT 'the events partition day',
  last_id     BIGINT UNSIGNED NOT NULL COMMENT 'every event of this day with id <= last_id is rolled up',
  safe_id     BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'with a settle time: roll no id above this',
  seen_id     BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'the largest visible id at seen_at',
  seen_at     DATETIME(3)     NULL,
  updated_at  DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (day)
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin;

-- Events per mailing, hour (UTC), kind and bot flag: the time series, and
-- summed over hours, the totals.
CREATE TABLE IF NOT EXISTS stats_hourly (
  mailing_id  VARCHAR(64)     NOT NULL,
  hour        DATETIME        NOT NULL,
  kind        ENUM('click','open','image','unsubscribe') NOT NULL,
  bot         TINYINT(1)      NOT NULL,
  n           BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (mailing_id, hour, kind, bot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Per mailing, kind and bot flag: total events and unique letters. Read with
-- one primary-key range (at most 8 rows per mailing).
CREATE TABLE IF NOT EXISTS stats_totals (
  mailing_id  VARCHAR(64)     NOT NULL,
  kind        ENUM('click','open','image','unsubscribe') NOT NULL,
  bot         TINYINT(1)      NOT NULL,
  total       BIGINT UNSIGNED NOT NULL DEFAULT 0,
  uniq        BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'letters with at least one such event',
  PRIMARY KEY (mailing_id, kind, bot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Clicks per mailing, link position and bot flag.
CREATE TABLE IF NOT EXISTS stats_links (
  mailing_id  VARCHAR(64)     NOT NULL,
  position    INT UNSIGNED    NOT NULL,
  bot         TINYINT(1)      NOT NULL,
  clicks      BIGINT UNSIGNED NOT NULL DEFAULT 0,
  uniq        BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'letters that clicked this position',
  PRIMARY KEY (mailing_id, position, bot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Bot events per mailing, kind and the server's bot_reason.
CREATE TABLE IF NOT EXISTS stats_bot_reasons (
  mailing_id  VARCHAR(64)     NOT NULL,
  kind        ENUM('click','open','image','unsubscribe') NOT NULL,
  reason      VARCHAR(32)     NOT NULL,
  n           BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (mailing_id, kind, reason)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- The first event per mailing, kind, position (0 = any position), bot flag
-- and letter. Rows are added with INSERT IGNORE, so only the first one
-- sticks; `rolled_by` names the batch that added a row, so the unique
-- counters above grow by exactly the rows a batch really added (one
-- GROUP BY over `rolled_by`, not a round trip per row). Letters, not
-- addresses: erasing an address from `links` and `events` leaves nothing
-- here that names it.
CREATE TABLE IF NOT EXISTS stats_first_seen (
  mailing_id  VARCHAR(64)     NOT NULL,
  kind        ENUM('click','open','image','unsubscribe') NOT NULL,
  position    INT UNSIGNED    NOT NULL,
  bot         TINYINT(1)      NOT NULL,
  letter_id   BIGINT UNSIGNED NOT NULL,
  first_at    DATETIME(3)     NOT NULL,
  rolled_by   BIGINT UNSIGNED NOT NULL COMMENT 'the batch (its last events.id) that added the row',
  PRIMARY KEY (mailing_id, kind, position, bot, letter_id),
  KEY rolled_by (rolled_by)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Letters built per mailing, added by the builder in the same transaction
-- as each batch's link rows (`store::stats::add_letters_built`), so the
-- count is exact and costs one primary-key read. Mailings built before the
-- builder did this fall back to counting the mailing_letter index.
CREATE TABLE IF NOT EXISTS stats_letters (
  mailing_id  VARCHAR(64)     NOT NULL,
  letters     BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (mailing_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Click URLs by position, copied from the mailing's first stored letter the
-- first time a summary asks, so later summaries read one key range instead
-- of probing the mailing_letter index in every `links` partition. (The
-- builder refuses to change a position's URL under the same mailing_id.)
CREATE TABLE IF NOT EXISTS stats_link_urls (
  mailing_id  VARCHAR(64)     NOT NULL,
  position    INT UNSIGNED    NOT NULL,
  url         MEDIUMTEXT      NOT NULL,
  PRIMARY KEY (mailing_id, position)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- The creative of each mailing, saved by the builder, for the click map.
CREATE TABLE IF NOT EXISTS mailings (
  mailing_id  VARCHAR(64)     NOT NULL,
  subject     VARCHAR(998)    NOT NULL,
  html        MEDIUMTEXT      NOT NULL,
  created_at  DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (mailing_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
