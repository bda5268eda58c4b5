-- A seal key retired by force (`secrets retire --force`): how many live
-- links the operator gave up when retiring it, typed back on the command
-- line, kept with the key so the choice is on record beside `retired_at`.
-- NULL: retired without breaking a live link (or not retired).
ALTER TABLE seal_keys ADD COLUMN retired_live_links BIGINT UNSIGNED NULL;
