//! What a move asks a server about one table: whether it exists, its
//! engine, its `CREATE TABLE`, its row count, and the name a replaced
//! Spider table is retired under.

use crate::store::error::StoreError;
use sqlx::mysql::MySqlConnection;

pub(super) async fn table_exists(
    conn: &mut MySqlConnection,
    table: &str,
) -> Result<bool, StoreError> {
    let found: Option<i32> = sqlx::query_scalar(
        "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(found.is_some())
}

pub(super) async fn engine_of(
    conn: &mut MySqlConnection,
    table: &str,
) -> Result<Option<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT CAST(ENGINE AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_optional(&mut *conn)
    .await?)
}

pub(super) async fn show_create(
    conn: &mut MySqlConnection,
    table: &str,
) -> Result<String, StoreError> {
    let (_, ddl): (String, String) = sqlx::query_as(&format!("SHOW CREATE TABLE `{table}`"))
        .fetch_one(&mut *conn)
        .await?;
    Ok(ddl)
}

pub(super) async fn count_rows(conn: &mut MySqlConnection, table: &str) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM `{table}`"))
        .fetch_one(&mut *conn)
        .await?;
    Ok(n as u64)
}

pub(super) fn retired_name(table: &str) -> String {
    format!("{table}_retired")
}
