//! Partitions on one server: its tables' days read from
//! `information_schema`, and a run's plans applied there, one `ALTER TABLE`
//! per table and kind of change, under that server's `GET_LOCK` so that
//! one runner alters the tables at a time.

use super::days::{plan, Partition, Policy, TablePlan};
use super::report::TableReport;
use crate::store::error::StoreError;
use crate::store::mysql_errors::mysql_error_number;
use chrono::NaiveDate;
use sqlx::mysql::MySqlConnection;
use std::time::Duration;

/// MySQL's lock wait timeout error (ER_LOCK_WAIT_TIMEOUT).
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;

/// `links` or `events`: what a (data) table holds, for error messages.
fn kind_of(table: &str) -> &'static str {
    if table.starts_with("events") {
        "events"
    } else {
        "links"
    }
}

pub(crate) async fn list_on(
    conn: &mut MySqlConnection,
    table: &str,
) -> Result<Vec<Partition>, StoreError> {
    let rows: Vec<(String, String, u64)> = sqlx::query_as(
        "SELECT CAST(PARTITION_NAME AS CHAR), CAST(PARTITION_DESCRIPTION AS CHAR), \
                CAST(COALESCE(TABLE_ROWS, 0) AS UNSIGNED) \
         FROM information_schema.PARTITIONS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND PARTITION_NAME IS NOT NULL \
         ORDER BY PARTITION_ORDINAL_POSITION",
    )
    .bind(table)
    .fetch_all(&mut *conn)
    .await?;
    if rows.is_empty() {
        return Err(StoreError::Corrupt {
            table: kind_of(table),
            detail: format!("`{table}` is missing or not partitioned: run `linktrack migrate`"),
        });
    }
    rows.into_iter()
        .map(|(name, description, approx_rows)| {
            // RANGE COLUMNS describes the bound as a quoted literal: '2026-11-23'.
            let bound = description.trim().trim_matches('\'');
            let upper = NaiveDate::parse_from_str(bound, "%Y-%m-%d").map_err(|_| StoreError::Corrupt {
                table: kind_of(table),
                detail: format!("`{table}` partition {name} has bound {description}, expected a date (is there a MAXVALUE partition?)"),
            })?;
            Ok(Partition { name, upper, approx_rows })
        })
        .collect()
}

/// Options for applying plans.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Refuse a plan that drops more than this many partitions of one table…
    pub max_drop: usize,
    /// …unless this is set.
    pub force: bool,
    /// Print, don't change.
    pub dry_run: bool,
    /// How long to wait for another runner's lock before giving up.
    pub lock_wait: Duration,
    /// `lock_wait_timeout` for each ALTER, so a long transaction holding a
    /// metadata lock makes us retry instead of stalling every query behind us.
    pub ddl_lock_timeout: Duration,
    /// Attempts per ALTER when the metadata lock times out.
    pub ddl_attempts: u32,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            max_drop: 7,
            force: false,
            dry_run: false,
            lock_wait: Duration::from_secs(30),
            ddl_lock_timeout: Duration::from_secs(5),
            ddl_attempts: 5,
        }
    }
}

/// Apply `policy` to `tables` of the server `conn` is on, under that
/// server's partition lock.
pub(crate) async fn run_on(
    conn: &mut MySqlConnection,
    tables: &[String],
    policy: &Policy,
    options: &RunOptions,
) -> Result<Vec<TableReport>, StoreError> {
    let lock = lock_name(conn).await?;
    acquire_lock(conn, &lock, options.lock_wait).await?;
    let result = run_locked(conn, tables, policy, options).await;
    // Closing the connection would release the lock too; release it
    // explicitly so the next runner does not wait for the close.
    let released = sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(&lock)
        .execute(&mut *conn)
        .await;
    let reports = result?;
    released?;
    Ok(reports)
}

async fn run_locked(
    conn: &mut MySqlConnection,
    tables: &[String],
    policy: &Policy,
    options: &RunOptions,
) -> Result<Vec<TableReport>, StoreError> {
    // A table whose plan drops too much keeps every partition, but still
    // gets its days ahead: a cron job stuck on the refusal must not run
    // out of partitions while someone looks into it.
    let mut plans = Vec::new();
    for table in tables {
        let existing = list_on(conn, table).await?;
        let mut plan = plan(table, &existing, policy);
        let refused = hold_back_drops(&mut plan, options);
        plans.push((plan, refused));
    }

    if !options.dry_run {
        let seconds = options.ddl_lock_timeout.as_secs().max(1);
        sqlx::query(&format!("SET SESSION lock_wait_timeout = {seconds}"))
            .execute(&mut *conn)
            .await?;
    }
    let mut reports = Vec::new();
    for (plan, refused) in plans {
        let statements = plan.ddl();
        if !options.dry_run {
            for statement in &statements {
                execute_ddl(conn, statement, options.ddl_attempts).await?;
                // The report says what changed; the statement itself is detail.
                tracing::debug!(%statement, "partition DDL applied");
            }
        }
        reports.push(TableReport {
            node: None,
            plan,
            statements,
            applied: !options.dry_run,
            refused,
        });
    }
    Ok(reports)
}

/// Empty `plan.drop` when it holds more than `--max-drop` partitions and
/// `--force` is off, saying why (a mistyped `--keep-days 0` must not empty
/// the table).
fn hold_back_drops(plan: &mut TablePlan, options: &RunOptions) -> Option<String> {
    if plan.drop.len() <= options.max_drop || options.force {
        return None;
    }
    let names = |p: Option<&Partition>| p.map(|p| p.name.clone()).unwrap_or_default();
    let refusal = format!(
        "refused to drop {} {} ({} .. {}), more than --max-drop {}; dropped none \
         (check --keep-days, then re-run with --force if this is intended)",
        plan.drop.len(),
        if plan.drop.len() == 1 {
            "partition"
        } else {
            "partitions"
        },
        names(plan.drop.first()),
        names(plan.drop.last()),
        options.max_drop
    );
    plan.drop.clear();
    Some(refusal)
}

async fn execute_ddl(
    conn: &mut MySqlConnection,
    statement: &str,
    attempts: u32,
) -> Result<(), StoreError> {
    let mut attempt = 1;
    loop {
        match sqlx::query(statement).execute(&mut *conn).await {
            Ok(_) => return Ok(()),
            Err(err) if attempt < attempts && is_lock_wait_timeout(&err) => {
                tracing::warn!(%statement, attempt, "metadata lock wait timed out; retrying");
                tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
                attempt += 1;
            }
            Err(err) => return Err(err.into()),
        }
    }
}

fn is_lock_wait_timeout(err: &sqlx::Error) -> bool {
    mysql_error_number(err) == Some(ER_LOCK_WAIT_TIMEOUT)
}

/// GET_LOCK names are server-wide, so the name carries the database's.
async fn lock_name(conn: &mut MySqlConnection) -> Result<String, StoreError> {
    let database: Option<String> = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(&mut *conn)
        .await?;
    let database = database.unwrap_or_default();
    // MySQL limits lock names to 64 characters.
    let mut name = format!("linktrack.partitions.{database}");
    name.truncate(64);
    Ok(name)
}

async fn acquire_lock(
    conn: &mut MySqlConnection,
    lock: &str,
    wait: Duration,
) -> Result<(), StoreError> {
    let seconds = wait.as_secs_f64();
    let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, ?)")
        .bind(lock)
        .bind(seconds)
        .fetch_one(&mut *conn)
        .await?;
    if got == Some(1) {
        Ok(())
    } else {
        Err(StoreError::LockBusy {
            lock: lock.to_owned(),
            waited: wait,
        })
    }
}
