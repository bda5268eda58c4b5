-- Breakdowns by mail client, client type, OS, device and mailbox provider
-- (issue 42; docs/operate.md "Breakdowns").
--
-- user_agent_classes: each distinct user agent the rollup has met, keyed
-- by its SHA-256, classified once (src/bots/clients.rs) off the request
-- path. The table is the cache: a user agent is parsed once per
-- installation, whichever rollup worker meets it first. It holds no
-- address; `erase` nulls the events' user agents, not these classes.
CREATE TABLE IF NOT EXISTS user_agent_classes (
  ua_hash     BINARY(32)   NOT NULL COMMENT 'SHA-256 of events.user_agent',
  client      VARCHAR(64)  NOT NULL,
  client_type VARCHAR(16)  NOT NULL COMMENT 'webmail, desktop, mobile, proxy, unknown',
  os          VARCHAR(64)  NOT NULL,
  device      VARCHAR(16)  NOT NULL COMMENT 'desktop, mobile, tablet, unknown',
  PRIMARY KEY (ua_hash)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Opens and clicks per mailing, dimension, value and bot flag, added by
-- the rollup with the other statistics (exactly once). The overall figures
-- are the sums over mailings. Events rolled before this table existed are
-- not in it (their user agents were never classified).
CREATE TABLE IF NOT EXISTS stats_breakdowns (
  mailing_id  VARCHAR(64)  NOT NULL,
  dimension   ENUM('client','client_type','os','device','provider') NOT NULL,
  value       VARCHAR(64)  NOT NULL,
  kind        ENUM('click','open','image','unsubscribe') NOT NULL,
  bot         TINYINT(1)   NOT NULL,
  n           BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (mailing_id, dimension, value, kind, bot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
