//! The two big tables, one row per tracked link (`links`) and one per hit
//! (`events`): the tables partitioned by day, sharded on a Spider cluster
//! and stored in the chosen row format; and whether this server is a
//! cluster's head for them. Below the partitions, the cluster and the row
//! formats, which all ask.

use super::error::StoreError;
use sqlx::mysql::MySqlConnection;

/// The tables with one RANGE partition per day.
pub const PARTITIONED_TABLES: [&str; 2] = ["links", "events"];

/// True when `links` on this server is a Spider table: the server is a head.
pub async fn is_head(conn: &mut MySqlConnection) -> Result<bool, StoreError> {
    let engine: Option<String> = sqlx::query_scalar(
        "SELECT CAST(ENGINE AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'links'",
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(engine.is_some_and(|e| e.eq_ignore_ascii_case("spider")))
}
