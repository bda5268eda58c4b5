-- Events out carry the settled verdict (issue 24): clicks, opens and image
-- loads are queued `held = 1` while their bot verdict may still change
-- (`--verdict-settle-secs`). The rollup's settle pass, in the transaction
-- that writes the final verdicts, renders the held rows of its batch again
-- with them (`"settled": true`), sets `held = 0` and makes them due at once.
--
-- A held row is queued with `next_attempt_at` at its safety net (queued
-- time + settle + grace), so the claim's `due` index and WHERE stay as they
-- were: a held row is simply not due until then, and a server whose rollup
-- never settles it still sends it (with its first verdict) at that time.
--
-- `held_event` serves the settle pass: it joins the batch's events to the
-- held rows by event id (the UNIQUE (endpoint, event_id) key cannot: the
-- endpoint comes first). Valid on MariaDB 10.6+ and MySQL 8.
ALTER TABLE outbox
  ADD COLUMN held TINYINT NOT NULL DEFAULT 0
    COMMENT '1: waits for its settled verdict (the rollup releases it)',
  ADD KEY held_event (held, event_id);
