-- The reader's country (issue 42, breakdowns by country): the ISO 3166
-- code of the client address, looked up by `serve --geoip FILE` before the
-- address is truncated; only the code is kept. NULL without a database, for
-- an address the database does not know, and for events stored for nobody.
--
-- Only on an InnoDB `events` (see 20261207000001): on a Spider cluster's
-- head, `migrate --shards` adds the column to every node's data tables and
-- then redefines the head's Spider table over them (no rows move).
SET @lt_events_engine = (SELECT ENGINE FROM information_schema.TABLES
  WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'events');
SET @lt_events_ddl = IF(@lt_events_engine = 'InnoDB',
  'ALTER TABLE events ADD COLUMN country CHAR(2) NULL COMMENT ''ISO 3166-1 alpha-2 of the client address (serve --geoip)''',
  'DO 0');
PREPARE lt_events_stmt FROM @lt_events_ddl;
EXECUTE lt_events_stmt;
DEALLOCATE PREPARE lt_events_stmt;

-- Country is a breakdown dimension like the others. Events rolled before
-- this release count as 'unknown' only from here on (nothing is re-rolled).
ALTER TABLE stats_breakdowns MODIFY dimension
  ENUM('client','client_type','os','device','provider','country') NOT NULL;
