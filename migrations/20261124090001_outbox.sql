-- Events out (webhooks, AMQP): a transactional outbox per endpoint.
--
-- The journal replay inserts, in the same pass that inserts the events, one
-- row per (endpoint, event) whose filter matches: idempotent on
-- UNIQUE (endpoint, event_id), so a segment replayed twice enqueues nothing
-- twice. A sender per endpoint claims due rows (a lease: `claim` and a
-- `next_attempt_at` pushed past the attempt's timeout, so a crashed sender's
-- rows come back by themselves), deletes them once acknowledged, or pushes
-- `next_attempt_at` back with exponential backoff. Rows older than the
-- give-up age, or refused for good (a 4xx other than 408/429), move to
-- `outbox_dead`, from which `linktrack webhooks replay` puts them back.
--
-- The payload is rendered once, at enqueue time, so every retry sends the
-- same bytes (and the same webhook-id). Not partitioned: rows live minutes
-- (hours while a receiver is down), and the table stays small.
CREATE TABLE IF NOT EXISTS outbox (
  id              BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  endpoint        VARCHAR(64)     NOT NULL,
  event_id        BINARY(16)      NOT NULL,
  event_type      VARCHAR(32)     NOT NULL COMMENT 'email.clicked, email.opened, ...',
  letter_id       BIGINT UNSIGNED NULL,
  occurred_at     DATETIME(3)     NOT NULL,
  payload         MEDIUMTEXT      NOT NULL COMMENT 'the JSON body, byte for byte as sent',
  attempts        INT UNSIGNED    NOT NULL DEFAULT 0,
  enqueued_at     DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  next_attempt_at DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  claim           BIGINT UNSIGNED NULL COMMENT 'the sender round that holds the row until next_attempt_at',
  last_error      VARCHAR(255)    NULL,
  PRIMARY KEY (id),
  UNIQUE KEY endpoint_event (endpoint, event_id),
  KEY due (endpoint, next_attempt_at, id),
  KEY oldest (endpoint, occurred_at),
  KEY claim (claim)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Deliveries given up on, kept whole for `linktrack webhooks replay`.
CREATE TABLE IF NOT EXISTS outbox_dead (
  id              BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  endpoint        VARCHAR(64)     NOT NULL,
  event_id        BINARY(16)      NOT NULL,
  event_type      VARCHAR(32)     NOT NULL,
  letter_id       BIGINT UNSIGNED NULL,
  occurred_at     DATETIME(3)     NOT NULL,
  payload         MEDIUMTEXT      NOT NULL,
  attempts        INT UNSIGNED    NOT NULL,
  enqueued_at     DATETIME(3)     NOT NULL,
  dead_at         DATETIME(3)     NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  reason          VARCHAR(255)    NOT NULL COMMENT 'the last error: status and body, or transport error',
  PRIMARY KEY (id),
  UNIQUE KEY endpoint_event (endpoint, event_id),
  KEY endpoint_occurred (endpoint, occurred_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
