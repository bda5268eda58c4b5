-- Late events (issue 27): hits on a token whose link row is gone
-- (`events.link_id` = 0, no letter, no address), answered from its link
-- template. The rollup counts them here, per mailing, position, kind and
-- bot flag, and never in stats_totals / stats_links / stats_hourly, so a
-- mailing's regular figures do not change months after it was sent.
CREATE TABLE IF NOT EXISTS stats_late (
  mailing_id  VARCHAR(64)     NOT NULL,
  position    INT UNSIGNED    NOT NULL COMMENT '0 for kinds without a position (images)',
  kind        ENUM('click','open','image','unsubscribe') NOT NULL,
  bot         TINYINT(1)      NOT NULL,
  n           BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (mailing_id, position, kind, bot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
