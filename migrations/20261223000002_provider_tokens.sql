-- The signature tokens of provider webhook posts acted on (docs/bounces.md,
-- "Provider webhooks"): one row per (provider, token), shared by every
-- server, so a signed post is decided once across all of them. Mailgun's
-- signature covers only its timestamp and token, not the body: the token
-- is bound here to the event it first carried, and the same token with
-- another event is refused as a replay on any server.
--   token_hash  SHA-256 of the token (the token itself is not kept)
--   event_key   SHA-256 of the provider's event id the token carried
-- Rows older than the accepted signature age are pruned by the servers.
CREATE TABLE IF NOT EXISTS provider_tokens (
  provider    VARCHAR(16) NOT NULL,
  token_hash  BINARY(32)  NOT NULL,
  event_key   BINARY(32)  NOT NULL,
  seen_at     DATETIME    NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (provider, token_hash),
  KEY seen_at (seen_at)
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin;
