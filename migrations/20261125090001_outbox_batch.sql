-- Events out in batches (`batch = N` per endpoint, issue 9): a batch that
-- failed keeps its rows together, so every retry carries the same events
-- and therefore the same `webhook-id` (derived from them). `batch` is set
-- only on the rows of a failed batch: the upper 48 bits come from the
-- batch's id, the lower 16 are how many rows it holds (so a claim that got
-- only part of a batch knows it). NULL: not in a batch yet. No index: the
-- claim finds rows by `due`, and the rows of a batch share one
-- `next_attempt_at`, so they are claimed together.
ALTER TABLE outbox ADD COLUMN batch BIGINT UNSIGNED NULL
  COMMENT 'the failed batch the row is retried in (id bits << 16 | rows)';
