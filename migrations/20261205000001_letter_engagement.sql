-- Engagement per letter (issue 42): what the recipients export reads, one
-- primary-key range per page of letters instead of a scan of `events`.
--
-- One row per mailing, letter, kind, link position (clicks; 0 for the
-- other kinds) and bot flag: how many events and the first one's time.
-- The rollup adds each batch in its transaction (`store::rollup`), so
-- every event is counted exactly once, like the other stats tables.
-- Letters, not addresses: erasing an address leaves nothing here that
-- names it (the export reads the address from `links`, through the
-- privacy checks). Letter 0 (shared rows: images, anonymous letters) and
-- late events are not letters and are not kept here.
CREATE TABLE IF NOT EXISTS stats_letter_events (
  mailing_id  VARCHAR(64)     NOT NULL,
  letter_id   BIGINT UNSIGNED NOT NULL,
  kind        ENUM('click','open','image','unsubscribe') NOT NULL,
  position    INT UNSIGNED    NOT NULL COMMENT 'the clicked link''s position; 0 for other kinds',
  bot         TINYINT(1)      NOT NULL,
  n           BIGINT UNSIGNED NOT NULL,
  first_at    DATETIME(3)     NOT NULL,
  PRIMARY KEY (mailing_id, letter_id, kind, position, bot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- The events rolled before this table existed: exactly those at or below
-- their partition's watermark (`rollup_state`, kept under the partition's
-- last day; daily partitions, so the first watermark day on or after the
-- event's day). Later events are added by the rollup as it reaches them.
-- The expressions are the rollup's (`COUNTED_AS_BOT`, `REGULAR`).
INSERT INTO stats_letter_events (mailing_id, letter_id, kind, position, bot, n, first_at)
SELECT mailing_id, letter_id, kind, p, b, COUNT(*), MIN(occurred_at)
FROM (
  SELECT e.mailing_id, e.letter_id, e.kind,
         IF(e.kind = 'click', COALESCE(e.position, 0), 0) AS p,
         (e.bot <> 0 AND e.kind <> 'unsubscribe') AS b,
         e.occurred_at
  FROM events e
  WHERE e.mailing_id IS NOT NULL AND COALESCE(e.link_id, 1) <> 0 AND e.letter_id > 0
    AND e.id <= COALESCE((SELECT r.last_id FROM rollup_state r
                          WHERE r.day >= e.inserted ORDER BY r.day LIMIT 1), 0)
) AS rolled
GROUP BY mailing_id, letter_id, kind, p, b;
