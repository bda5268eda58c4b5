-- Empties the rollup tables and watermarks of a kept bench_stats database,
-- so that `bench_stats --reuse` rolls all its events again from scratch (an
-- A/B of two builds on the same events). Never run it on a real database.
TRUNCATE stats_hourly; TRUNCATE stats_minutes; TRUNCATE stats_totals; TRUNCATE stats_links;
TRUNCATE stats_bot_reasons; TRUNCATE stats_late; TRUNCATE stats_letter_events;
TRUNCATE stats_first_seen; TRUNCATE stats_breakdowns; TRUNCATE user_agent_classes;
TRUNCATE rollup_state;
