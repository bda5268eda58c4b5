//! The events one rollup transaction covered, named apart from the rollup
//! so the passes inside its transaction (verdicts settled, held outbox rows
//! released) can take it without importing the rollup that calls them.

use chrono::NaiveDate;

/// The events one rollup transaction covered: partition bounds and id range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolledBatch {
    /// First day of the partition (inclusive).
    pub lower: NaiveDate,
    /// End of the partition (exclusive).
    pub upper: NaiveDate,
    /// Events with `after_id < id <= last_id` were rolled.
    pub after_id: u64,
    pub last_id: u64,
    /// How many events the batch held.
    pub events: u64,
}

impl RolledBatch {
    /// Binds the batch's range to a statement whose first four parameters
    /// are `inserted >= ? AND inserted < ? AND id > ? AND id <= ?` (its
    /// events: one partition, one id range).
    pub(crate) fn bind_range<'q, O>(
        &self,
        query: sqlx::query::QueryAs<'q, sqlx::MySql, O, sqlx::mysql::MySqlArguments>,
    ) -> sqlx::query::QueryAs<'q, sqlx::MySql, O, sqlx::mysql::MySqlArguments> {
        query
            .bind(self.lower)
            .bind(self.upper)
            .bind(self.after_id)
            .bind(self.last_id)
    }
}
