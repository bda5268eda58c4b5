-- When each periodic maintenance task last succeeded (issue 25): `partitions
-- rotate` writes its row after a successful run, and `serve` exports it as
-- linktrack_partitions_rotate_last_success_timestamp_seconds, so an alert
-- can say "rotate has not run in 26 hours" wherever the cron or timer runs.
-- One row per task; tiny.
CREATE TABLE IF NOT EXISTS maintenance_runs (
  task         VARCHAR(64) NOT NULL,
  last_success DATETIME(6) NOT NULL COMMENT 'UTC',
  PRIMARY KEY (task)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
