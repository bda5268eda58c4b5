//! The rollup's counting: one batch of events read ONCE, counted here, and
//! added to every statistics table with one upsert per table (a few for
//! the tables with a row per letter).
//!
//! Why here and not in `INSERT … SELECT … GROUP BY`: the database did the
//! counting before, one statement per table, and each statement
//! read the batch's 50,000 events again and grouped them in a temporary
//! table: eleven reads of the batch, the user agent hashed once per
//! dimension, `stats_first_seen` grouped through a temporary table per
//! batch. Counting a batch here costs the database one read of it and the
//! writes of the counted rows, half of what the statements cost before
//! (docs/benchmarks.md).
//!
//! Unique letters cost no rows of their own: a letter's first open (first
//! click on a position, …) is a new row of `stats_letter_events`, so the
//! rows an upsert added are the new unique letters. Only "clicked any
//! link" needs a row apart (`stats_first_seen`, position 0). Before, every
//! event also wrote one or two `stats_first_seen` rows and its `rolled_by`
//! index, and the counters were grown by a `GROUP BY` over them.
//!
//! The rows go to the database as one JSON document per statement, read
//! with `JSON_TABLE` (MariaDB 10.6+, MySQL 8.0.4+): one bound parameter
//! whatever the number of rows, and a derived table that `ON DUPLICATE KEY
//! UPDATE` can name on both servers (MariaDB has no `AS new` row alias and
//! MySQL 8 deprecates `VALUES()` there). Numbers travel as JSON strings so
//! a `BIGINT UNSIGNED` never passes through a double.
//!
//! The rules are the ones the statements had: what counts as a bot
//! ([`counted_as_bot`](batch::counted_as_bot)), a mailing's own events against late ones
//! ([`is_regular`](batch::is_regular)), letter 0 (shared rows) never a letter. The tests in
//! `tests/it/stats.rs` and `tests/it/export.rs` check the tables against
//! a brute-force `GROUP BY` over `events`.
//!
//! # Layout
//!
//! The batch's three stages, one file each:
//! * `batch`: reading the batch's events, and the rules of what counts;
//! * `count`: counting them ([`Tally::of`]);
//! * `write`: adding the counts to the statistics tables ([`Tally::write`]),
//!   with the statements.

mod batch;
mod count;
mod write;

pub(crate) use batch::read;
pub(crate) use count::Tally;
