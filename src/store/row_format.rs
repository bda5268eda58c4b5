//! How `links` and `events` are stored on disk: the InnoDB row format and
//! page compression, on MariaDB and on MySQL 8.
//!
//! * `compressed`: `ROW_FORMAT=COMPRESSED` (zlib in 8 KB pages, in the
//!   buffer pool too): smaller on disk than `dynamic`, slower to insert
//!   (docs/benchmarks.md).
//! * `dynamic`: no compression; fastest, largest.
//! * `page-compressed`: `ROW_FORMAT=DYNAMIC` with InnoDB page compression
//!   (MariaDB `PAGE_COMPRESSED=1`, MySQL 8 `COMPRESSION='zlib'`): pages are
//!   compressed only on their way to disk and the file gets holes punched
//!   where the saved bytes were. Less disk than `compressed` at nearly the
//!   insert rate of `dynamic`, if the filesystem punches holes (ext4, XFS):
//!   the allocated size, not the apparent one, is what it saves.
//!
//! Switching a table that holds rows rebuilds every partition; `migrate`
//! does it only with `--rebuild` and says how long it may take.

use super::big_tables::{is_head, PARTITIONED_TABLES};
use super::error::StoreError;
use sqlx::MySqlPool;
use std::str::FromStr;

/// The format `migrate` gives new (empty) tables when `--row-format` is not
/// given: page compression stored the same link rows in 0.52 of
/// `compressed`'s allocated bytes, took `LOAD DATA` 2.2 times as fast and the
/// builder's inserts 1.3 times as fast (docs/design.md "Storage"). A server that
/// cannot punch holes gets `compressed` instead.
pub const DEFAULT_ROW_FORMAT: RowFormat = RowFormat::PageCompressed;

/// The row formats `--row-format` offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowFormat {
    Compressed,
    Dynamic,
    PageCompressed,
}

impl RowFormat {
    /// The names `--row-format` takes.
    pub const NAMES: [&'static str; 3] = ["compressed", "dynamic", "page-compressed"];

    pub fn name(self) -> &'static str {
        match self {
            RowFormat::Compressed => "compressed",
            RowFormat::Dynamic => "dynamic",
            RowFormat::PageCompressed => "page-compressed",
        }
    }
}

impl FromStr for RowFormat {
    type Err = String;
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "compressed" => Ok(RowFormat::Compressed),
            "dynamic" => Ok(RowFormat::Dynamic),
            "page-compressed" => Ok(RowFormat::PageCompressed),
            other => Err(format!(
                "unknown row format {other:?} (expected one of {})",
                RowFormat::NAMES.join(", ")
            )),
        }
    }
}

/// What `migrate --row-format` was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowFormatOptions {
    pub format: RowFormat,
    /// zlib level 1–9 for `page-compressed` (MariaDB); `None`: the server's
    /// `innodb_compression_level`.
    pub level: Option<u8>,
    /// Rebuild tables that already hold rows (otherwise they are left as they
    /// are, with a note).
    pub rebuild: bool,
}

impl RowFormatOptions {
    pub fn new(format: RowFormat) -> Self {
        RowFormatOptions {
            format,
            level: None,
            rebuild: false,
        }
    }
}

/// The server family: the DDL differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    MariaDb,
    MySql,
}

impl Server {
    pub async fn detect(pool: &MySqlPool) -> Result<Server, StoreError> {
        let version: String = sqlx::query_scalar("SELECT VERSION()")
            .fetch_one(pool)
            .await?;
        Ok(if version.to_ascii_lowercase().contains("mariadb") {
            Server::MariaDb
        } else {
            Server::MySql
        })
    }
}

/// The table options that give `format` on `server`.
pub fn table_options(format: RowFormat, server: Server, level: Option<u8>) -> String {
    match (format, server) {
        (RowFormat::Compressed, Server::MariaDb) => {
            "ROW_FORMAT=COMPRESSED PAGE_COMPRESSED=0".to_owned()
        }
        (RowFormat::Compressed, Server::MySql) => {
            "ROW_FORMAT=COMPRESSED COMPRESSION='None'".to_owned()
        }
        (RowFormat::Dynamic, Server::MariaDb) => "ROW_FORMAT=DYNAMIC PAGE_COMPRESSED=0".to_owned(),
        (RowFormat::Dynamic, Server::MySql) => "ROW_FORMAT=DYNAMIC COMPRESSION='None'".to_owned(),
        (RowFormat::PageCompressed, Server::MariaDb) => {
            let mut options = "ROW_FORMAT=DYNAMIC PAGE_COMPRESSED=1".to_owned();
            if let Some(level) = level {
                options.push_str(&format!(" PAGE_COMPRESSION_LEVEL={}", level.clamp(1, 9)));
            }
            options
        }
        // MySQL 8 has no level per table; zlib uses its default level.
        (RowFormat::PageCompressed, Server::MySql) => {
            "ROW_FORMAT=DYNAMIC COMPRESSION='zlib'".to_owned()
        }
    }
}

/// The format a table has now, read from its options.
async fn current_format(pool: &MySqlPool, table: &str) -> Result<Option<RowFormat>, StoreError> {
    let row: Option<(String, String)> = sqlx::query_as(
        "SELECT CAST(ROW_FORMAT AS CHAR), CAST(CREATE_OPTIONS AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(row_format, options)| {
        let options = options.to_ascii_lowercase();
        let page_compressed = options.contains("page_compressed`='1'")
            || options.contains("page_compressed=1")
            || options.contains("compression=\"zlib\"")
            || options.contains("compression=\"lz4\"");
        match (row_format.to_ascii_lowercase().as_str(), page_compressed) {
            ("compressed", _) => RowFormat::Compressed,
            (_, true) => RowFormat::PageCompressed,
            _ => RowFormat::Dynamic,
        }
    }))
}

/// Whether the server can punch holes into its data files: without that,
/// page compression saves nothing on disk. MariaDB says so in a status
/// variable; MySQL does not, and is trusted (check `ALLOCATED_SIZE` in
/// `information_schema.INNODB_TABLESPACES` after loading).
pub async fn can_punch_holes(pool: &MySqlPool, server: Server) -> Result<bool, StoreError> {
    if server == Server::MySql {
        return Ok(true);
    }
    let status: Option<(String, String)> =
        sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Innodb_have_punch_hole'")
            .fetch_optional(pool)
            .await?;
    Ok(status.is_some_and(|(_, value)| value.eq_ignore_ascii_case("ON")))
}

/// Rows in a table, from the statistics (instant; an estimate).
async fn estimated_rows(pool: &MySqlPool, table: &str) -> Result<u64, StoreError> {
    let rows: Option<u64> = sqlx::query_scalar(
        "SELECT TABLE_ROWS FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_optional(pool)
    .await?
    .flatten();
    Ok(rows.unwrap_or(0))
}

async fn has_rows(pool: &MySqlPool, table: &str) -> Result<bool, StoreError> {
    let any: Option<i32> = sqlx::query_scalar(&format!("SELECT 1 FROM {table} LIMIT 1"))
        .fetch_optional(pool)
        .await?;
    Ok(any.is_some())
}

/// A rebuild's pace on a small machine, for the estimate said before a
/// rebuild starts (docs/benchmarks.md).
const REBUILD_ROWS_PER_SECOND: u64 = 50_000;

/// Bring `links` and `events` to the asked format. Empty tables switch at
/// once; tables with rows only with `rebuild`. Returns one line per table
/// saying what happened or what to do.
pub async fn set_row_format(
    pool: &MySqlPool,
    options: &RowFormatOptions,
) -> Result<Vec<String>, StoreError> {
    if is_head(&mut *pool.acquire().await?).await? {
        return Ok(vec![
            "links and events are Spider tables here (a cluster's head): their data tables \
             take the format of each node's templates, set by `migrate` with LINKTRACK_SHARDS"
                .to_owned(),
        ]);
    }
    let server = Server::detect(pool).await?;
    let mut format = options.format;
    let mut said = Vec::new();
    if format == RowFormat::PageCompressed && !can_punch_holes(pool, server).await? {
        said.push(
            "page compression refused: the server reports it cannot punch holes into its \
             files (Innodb_have_punch_hole=OFF; ext4 or XFS needed), so it would save no disk; \
             keeping compressed"
                .to_owned(),
        );
        format = RowFormat::Compressed;
    }
    for table in PARTITIONED_TABLES {
        let current = current_format(pool, table).await?;
        if current == Some(format) && options.level.is_none() {
            said.push(format!("{table}: already {}", format.name()));
            continue;
        }
        if has_rows(pool, table).await? && !options.rebuild {
            let rows = estimated_rows(pool, table).await?;
            said.push(format!(
                "{table}: holds about {rows} rows as {}; switching to {} rebuilds every \
                 partition (about {} s at {REBUILD_ROWS_PER_SECOND} rows/s, the table locked \
                 for writes meanwhile): run again with --rebuild to do it",
                current.map_or("unknown", RowFormat::name),
                format.name(),
                rows / REBUILD_ROWS_PER_SECOND + 1,
            ));
            continue;
        }
        let ddl = format!(
            "ALTER TABLE {table} {}",
            table_options(format, server, options.level)
        );
        sqlx::query(&ddl).execute(pool).await?;
        said.push(format!("{table}: now {} ({ddl})", format.name()));
    }
    if format == RowFormat::PageCompressed && server == Server::MariaDb {
        said.push(algorithm_note(pool).await?);
    }
    Ok(said)
}

/// MariaDB compresses pages with the server-wide `innodb_compression_algorithm`:
/// say which it is and which others are loaded.
async fn algorithm_note(pool: &MySqlPool) -> Result<String, StoreError> {
    let algorithm: String = sqlx::query_scalar("SELECT @@GLOBAL.innodb_compression_algorithm")
        .fetch_one(pool)
        .await?;
    let providers: Vec<String> = sqlx::query_scalar(
        "SELECT SUBSTRING(PLUGIN_NAME, 10) FROM information_schema.PLUGINS \
         WHERE PLUGIN_NAME LIKE 'provider\\_%' AND PLUGIN_STATUS = 'ACTIVE'",
    )
    .fetch_all(pool)
    .await?;
    Ok(format!(
        "pages are compressed with the server's innodb_compression_algorithm = {algorithm} \
         (server-wide; also loaded: {}); see docs/design.md \"Storage: page compression\" for the figures",
        if providers.is_empty() {
            "none".to_owned()
        } else {
            providers.join(", ")
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in RowFormat::NAMES {
            assert_eq!(name.parse::<RowFormat>().map(RowFormat::name), Ok(name));
        }
        assert!("zip".parse::<RowFormat>().is_err());
    }

    #[test]
    fn page_compression_is_spelled_per_server() {
        assert_eq!(
            table_options(RowFormat::PageCompressed, Server::MariaDb, Some(3)),
            "ROW_FORMAT=DYNAMIC PAGE_COMPRESSED=1 PAGE_COMPRESSION_LEVEL=3"
        );
        assert_eq!(
            table_options(RowFormat::PageCompressed, Server::MySql, Some(3)),
            "ROW_FORMAT=DYNAMIC COMPRESSION='zlib'"
        );
        assert_eq!(
            table_options(RowFormat::Compressed, Server::MariaDb, None),
            "ROW_FORMAT=COMPRESSED PAGE_COMPRESSED=0"
        );
    }
}
