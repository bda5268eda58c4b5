-- The settle pass rewrites the verdict of most events of a hot letter
-- (`UPDATE events SET bot = ..., bot_reason = ... WHERE id IN (...)`,
-- store/verdicts.rs). On a ROW_FORMAT=COMPRESSED row a change of the row's
-- length (a VARCHAR reason that grows or shrinks, or NULL becoming a
-- reason) is not an update in place: the record is rewritten in its page
-- and the page recompressed when its modification log fills, several
-- times the cost of an update that keeps the length (docs/benchmarks.md,
-- "The settle pass's verdict update on compressed rows, probed"). A reason
-- of fixed length, ASCII `CHAR(32) NOT NULL` with '' for none, keeps every
-- verdict update in place. Reasons are ASCII codes (`ua:curl`, `walk`,
-- `proxy:gmail`, ...); the one mapping between the stored form and the
-- reason (`''` is none) is `store/bot_reason.rs`. The set stays open: any
-- ASCII reason of up to 32 bytes fits, with no list to extend.
--
-- Existing NULLs become '' as the column turns NOT NULL: that needs a
-- non-strict sql_mode for this one statement (strict mode refuses a NULL
-- it has to convert); the session's mode is put back after it.
--
-- Only on an InnoDB `events` (see 20261207000001): on a Spider cluster's
-- head, `migrate --shards` changes every node's data tables and then
-- redefines the head's Spider table over them (no rows move).
SET @lt_events_engine = (SELECT ENGINE FROM information_schema.TABLES
  WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'events');
SET @lt_events_ddl = IF(@lt_events_engine = 'InnoDB',
  'ALTER TABLE events MODIFY bot_reason CHAR(32) CHARACTER SET ascii COLLATE ascii_general_ci NOT NULL DEFAULT '''' COMMENT ''a bot verdict reason, empty for none (store/bot_reason.rs)''',
  'DO 0');
SET @lt_sql_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = '';
PREPARE lt_events_stmt FROM @lt_events_ddl;
EXECUTE lt_events_stmt;
DEALLOCATE PREPARE lt_events_stmt;
SET SESSION sql_mode = @lt_sql_mode;
