//! `IN (…)` lists: how many values one holds and the one builder of them,
//! shared by every statement of the store that reads or deletes by a list
//! of ids or digests.

use sqlx::MySql;

/// Values per `IN (…)` list: far below the 65,535 placeholders of one
/// statement, and small enough that each statement stays short.
pub(crate) const IN_LIST_CHUNK: usize = 1_000;

/// Push `(?, ?, …)` with one bound value per item: the one builder of every
/// `IN` list (callers chunk their values by [`IN_LIST_CHUNK`]).
pub(crate) fn push_in_list<'q, T>(
    query: &mut sqlx::QueryBuilder<'q, MySql>,
    values: impl IntoIterator<Item = T>,
) where
    T: 'q + sqlx::Encode<'q, MySql> + sqlx::Type<MySql> + Send,
{
    query.push("(");
    let mut list = query.separated(", ");
    for value in values {
        list.push_bind(value);
    }
    query.push(")");
}
