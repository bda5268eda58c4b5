-- Opens and clicks per mailing and minute (UTC), for the dashboard's chart
-- in the first hours after a send, when the hourly series is one or two
-- points. The rollup writes it like stats_hourly and keeps three days.
CREATE TABLE IF NOT EXISTS stats_minutes (
  mailing_id  VARCHAR(64)     NOT NULL,
  minute      DATETIME        NOT NULL,
  kind        ENUM('click','open','image','unsubscribe') NOT NULL,
  bot         TINYINT(1)      NOT NULL,
  n           BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (mailing_id, minute, kind, bot),
  KEY by_minute (minute)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
