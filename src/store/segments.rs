//! Segments: from the letter ids the live layer selects to addresses.

use super::error::StoreError;
use crate::mailing_id::MailingId;
use sqlx::{MySql, MySqlPool, QueryBuilder};

/// Addresses of the given letters of a mailing (from their pixel rows),
/// skipping erased ones and those that withdrew from tracking (a segment
/// is built from their clicks: docs/privacy.md).
pub async fn addresses_of_letters(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    letter_ids: &[u64],
) -> Result<Vec<String>, StoreError> {
    let mut found = Vec::new();
    for chunk in letter_ids.chunks(super::in_list::IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT email FROM links WHERE kind = 'pixel' AND email <> '' AND mailing_id = ",
        );
        query
            .push_bind(mailing_id.as_str())
            .push(" AND letter_id IN ");
        super::in_list::push_in_list(&mut query, chunk.iter().copied());
        let rows: Vec<(String,)> = query.build_query_as().fetch_all(pool).await?;
        found.extend(rows.into_iter().map(|(e,)| e));
    }
    found.sort();
    found.dedup();
    let listed: Vec<&str> = found.iter().map(String::as_str).collect();
    let withheld = super::privacy::withheld_among(pool, &listed).await?;
    found.retain(|email| !withheld.contains(email));
    Ok(found)
}
