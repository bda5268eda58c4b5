-- Which server sends to which endpoints (issue 9). Each server's journal
-- replay queues its events for the endpoints *it* knows, so every server of
-- a deployment needs the same endpoints. A server registers its endpoints
-- here at start (and refreshes `seen_at` hourly), and warns when another
-- server, seen within a day, has an endpoint it lacks or the same name with
-- another target or filter. One row per (server, endpoint); tiny.
CREATE TABLE IF NOT EXISTS outbound_endpoints (
  server      VARCHAR(255)  NOT NULL COMMENT 'host name and journal directory',
  name        VARCHAR(64)   NOT NULL,
  fingerprint CHAR(64)      NOT NULL COMMENT 'SHA-256 (hex) of the description',
  description VARCHAR(2048) NOT NULL COMMENT 'target and filter, never the secret',
  seen_at     DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (server, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
