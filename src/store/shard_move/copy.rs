//! Step 3 of a move: the rows copied from the old node to the new one in
//! primary-key order, then checked (row count and `CHECKSUM TABLE`).

use super::tables::count_rows;
use crate::store::cluster::NodeAddress;
use crate::store::error::StoreError;
use sqlx::mysql::MySqlConnection;

/// Rows per copy statement: 500 rows of a few hundred bytes each, small
/// enough for the packet limit even with long URLs.
const COPY_CHUNK: usize = 500;

/// Copy every row in primary-key order `(id, inserted)`. Each value goes
/// as its hexadecimal text and comes back through `UNHEX`, so every column
/// type is carried byte for byte without this code knowing the columns.
pub(super) async fn copy_rows(
    source: &mut MySqlConnection,
    target: &mut MySqlConnection,
    table: &str,
) -> Result<u64, StoreError> {
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
    )
    .bind(table)
    .fetch_all(&mut *source)
    .await?;
    let hex: Vec<String> = columns
        .iter()
        .map(|c| format!("HEX(CAST(`{c}` AS BINARY))"))
        .collect();
    let select = format!(
        "SELECT id, CAST(inserted AS CHAR), {} FROM `{table}` \
         WHERE id > ? OR (id = ? AND inserted > ?) ORDER BY id, inserted LIMIT {COPY_CHUNK}",
        hex.join(", ")
    );
    let names: Vec<String> = columns.iter().map(|c| format!("`{c}`")).collect();
    let row_values = format!("({})", vec!["UNHEX(?)"; columns.len()].join(", "));
    let mut after: (u64, String) = (0, "0000-00-00".to_owned());
    let mut copied = 0u64;
    loop {
        let rows: Vec<sqlx::mysql::MySqlRow> = sqlx::query(&select)
            .bind(after.0)
            .bind(after.0)
            .bind(&after.1)
            .fetch_all(&mut *source)
            .await?;
        let Some(last) = rows.last() else {
            return Ok(copied);
        };
        use sqlx::Row;
        after = (last.try_get(0)?, last.try_get(1)?);
        let insert = format!(
            "INSERT INTO `{table}` ({}) VALUES {}",
            names.join(", "),
            vec![row_values.as_str(); rows.len()].join(", ")
        );
        let mut query = sqlx::query(&insert);
        for row in &rows {
            for n in 0..columns.len() {
                query = query.bind(row.try_get::<Option<String>, _>(n + 2)?);
            }
        }
        copied += query.execute(&mut *target).await?.rows_affected();
    }
}

/// The copy must have the old node's row count and `CHECKSUM TABLE`.
pub(super) async fn check_copy(
    source: &mut MySqlConnection,
    target: &mut MySqlConnection,
    table: &str,
    to_server: &str,
    to_node: &NodeAddress,
) -> Result<(), StoreError> {
    let old = (
        count_rows(source, table).await?,
        checksum(source, table).await?,
    );
    let new = (
        count_rows(target, table).await?,
        checksum(target, table).await?,
    );
    if old == new {
        return Ok(());
    }
    Err(StoreError::Refused(format!(
        "the copy of {table} on {to_server} ({to_node}) differs from the original: {} rows, \
         checksum {:?} against {} rows, checksum {:?}. The head still reads the original; \
         drop `{table}` on {to_server} and run the move again",
        new.0, new.1, old.0, old.1
    )))
}

async fn checksum(conn: &mut MySqlConnection, table: &str) -> Result<Option<i64>, StoreError> {
    let (_, sum): (String, Option<i64>) =
        sqlx::query_as(&format!("CHECKSUM TABLE `{table}` EXTENDED"))
            .fetch_one(&mut *conn)
            .await?;
    Ok(sum)
}
