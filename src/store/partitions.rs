//! Daily RANGE partitions of `links` and `events`: list, plan, ensure, rotate.
//!
//! A partition named `pYYYYMMDD` holds the rows of that UTC day and is
//! declared `VALUES LESS THAN ('YYYY-MM-DD' + 1 day)`. Planning is pure (see
//! [`plan`]) so it is tested without a database; applying a plan runs one
//! `ALTER TABLE` per table and kind of change, under a `GET_LOCK` so only one
//! runner alters the tables at a time.

use super::cluster::{self, by_node, placements, NodeAddress, NodeFailure};
use super::StoreError;
use chrono::{Days, NaiveDate};
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, MySqlPool};
use std::fmt;
use std::time::Duration;

/// How many days of links and events are kept. Shared by `rotate` (what to
/// drop) and the server (which tokens are expired without a database read).
pub const DEFAULT_KEEP_DAYS: u32 = 90;

/// How many days ahead partitions are made.
pub const DEFAULT_AHEAD_DAYS: u32 = 7;

/// The tables partitioned by day.
pub const PARTITIONED_TABLES: [&str; 2] = ["links", "events"];

/// MySQL's lock wait timeout error (ER_LOCK_WAIT_TIMEOUT).
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;

/// One existing partition, as `information_schema.PARTITIONS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    /// The exclusive upper bound: rows with `inserted < upper` (and not in an
    /// earlier partition) live here.
    pub upper: NaiveDate,
    /// InnoDB's estimate; exact counts would need a scan.
    pub approx_rows: u64,
}

impl Partition {
    /// The last day this partition can hold.
    pub fn last_day(&self) -> NaiveDate {
        self.upper.pred_opt().unwrap_or(self.upper)
    }
}

/// The name of the partition holding `day`.
pub fn partition_name(day: NaiveDate) -> String {
    format!("p{}", day.format("%Y%m%d"))
}

/// What a run would change in one table, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TablePlan {
    /// `links`, `events`, or on a cluster's data node `links_03`, ….
    pub table: String,
    /// Partitions to drop: every day they hold is older than the cutoff.
    pub drop: Vec<Partition>,
    /// Days to add a partition for, ascending.
    pub add: Vec<NaiveDate>,
}

impl TablePlan {
    pub fn is_empty(&self) -> bool {
        self.drop.is_empty() && self.add.is_empty()
    }

    /// The DDL that carries the plan out, at most one statement per kind of change.
    pub fn ddl(&self) -> Vec<String> {
        let mut statements = Vec::new();
        if !self.drop.is_empty() {
            let names: Vec<&str> = self.drop.iter().map(|p| p.name.as_str()).collect();
            statements.push(format!(
                "ALTER TABLE {} DROP PARTITION {}",
                self.table,
                names.join(", ")
            ));
        }
        if !self.add.is_empty() {
            let parts: Vec<String> = self
                .add
                .iter()
                .map(|day| {
                    let upper = day.checked_add_days(Days::new(1)).unwrap_or(*day);
                    format!(
                        "PARTITION {} VALUES LESS THAN ('{}')",
                        partition_name(*day),
                        upper
                    )
                })
                .collect();
            statements.push(format!(
                "ALTER TABLE {} ADD PARTITION ({})",
                self.table,
                parts.join(", ")
            ));
        }
        statements
    }
}

/// Retention and look-ahead for one run.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub today: NaiveDate,
    /// Create partitions through `today + ahead_days`.
    pub ahead_days: u32,
    /// Drop partitions whose every day is before `today - keep_days`; `None`
    /// drops nothing (plain `ensure`).
    pub keep_days: Option<u32>,
}

impl Policy {
    /// The first day that is kept; older days may be dropped.
    pub fn cutoff(&self) -> Option<NaiveDate> {
        self.keep_days
            .and_then(|keep| self.today.checked_sub_days(Days::new(u64::from(keep))))
    }
}

/// Work out what to drop and add, given a table's partitions in ascending order.
///
/// Guarantees, whatever the input: today and future days are never dropped,
/// the newest partition is never dropped (MySQL refuses to drop them all),
/// and a day already covered by an existing partition is never added.
pub fn plan(table: &str, existing: &[Partition], policy: &Policy) -> TablePlan {
    let mut drop = Vec::new();
    if let Some(cutoff) = policy.cutoff() {
        let cutoff = cutoff.min(policy.today);
        let droppable = existing.len().saturating_sub(1);
        drop = existing
            .iter()
            .take(droppable)
            .take_while(|p| p.upper <= cutoff)
            .cloned()
            .collect();
    }

    // Everything below the newest upper bound is already covered.
    let covered_until = existing.iter().map(|p| p.upper).max();
    let mut add = Vec::new();
    for offset in 0..=policy.ahead_days {
        let Some(day) = policy.today.checked_add_days(Days::new(u64::from(offset))) else {
            break;
        };
        if covered_until.is_none_or(|upper| day >= upper) {
            add.push(day);
        }
    }
    TablePlan {
        table: table.to_owned(),
        drop,
        add,
    }
}

/// The partitions of `table` in the current database, ascending.
/// On a Spider head: the days of the table's first data table (every data
/// table has the same days).
pub async fn list(pool: &MySqlPool, table: &'static str) -> Result<Vec<Partition>, StoreError> {
    let mut conn = pool.acquire().await?;
    if cluster::is_head(&mut conn).await? {
        return list_days(&mut conn, table).await;
    }
    list_on(&mut conn, table).await
}

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

/// What a run did (or, with `dry_run`, would do) to one table.
#[derive(Debug, Clone)]
pub struct TableReport {
    /// The data node (its Spider server name) on a cluster.
    pub node: Option<String>,
    pub plan: TablePlan,
    pub statements: Vec<String>,
    pub applied: bool,
    /// Why the plan's drops were held back (more than `--max-drop`
    /// without `--force`): the days ahead were added all the same.
    pub refused: Option<String>,
}

/// The refusals among `reports`, as one error naming the tables, or
/// `None` when nothing was refused. What `partitions rotate` exits with
/// after printing the reports.
pub fn refusals(reports: &[TableReport]) -> Option<StoreError> {
    let tables: Vec<String> = reports
        .iter()
        .filter(|r| r.refused.is_some())
        .map(|r| match &r.node {
            Some(node) => format!("{node} {}", r.plan.table),
            None => r.plan.table.clone(),
        })
        .collect();
    (!tables.is_empty()).then(|| {
        StoreError::Refused(format!(
            "refused to drop partitions of {} (more than --max-drop, see above); \
             the days ahead were created. Check --keep-days, then re-run with --force \
             if this is intended",
            tables.join(", ")
        ))
    })
}

impl fmt::Display for TableReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = match &self.node {
            Some(node) => format!("{node} {}", self.plan.table),
            None => self.plan.table.clone(),
        };
        if let Some(refusal) = &self.refused {
            write!(f, "{table}: {refusal}")?;
            if self.plan.is_empty() {
                return Ok(());
            }
            writeln!(f)?;
        } else if self.plan.is_empty() {
            return write!(f, "{table}: nothing to do: every day in the window has a partition and none has expired");
        }
        let verb = |done: &str, dry: &str| {
            if self.applied {
                done.to_owned()
            } else {
                dry.to_owned()
            }
        };
        let mut lines = Vec::new();
        for p in &self.plan.drop {
            lines.push(format!(
                "{table}: {} partition {} (days through {}, ~{} rows): older than the retention window",
                verb("dropped", "would drop"),
                p.name,
                p.last_day(),
                p.approx_rows
            ));
        }
        for day in &self.plan.add {
            lines.push(format!(
                "{table}: {} partition {} for {day}: inside the look-ahead window",
                verb("added", "would add"),
                partition_name(*day)
            ));
        }
        if !self.applied {
            for statement in &self.statements {
                lines.push(format!("{table}: dry run, not executed: {statement};"));
            }
        }
        write!(f, "{}", lines.join("\n"))
    }
}

/// Make sure partitions exist from today through `today + ahead_days`
/// (UTC), dropping nothing: the one helper the builder, the replay, the demo
/// and `partitions ensure` use.
pub async fn ensure_ahead(
    pool: &MySqlPool,
    ahead_days: u32,
) -> Result<Vec<TableReport>, StoreError> {
    let policy = Policy {
        today: chrono::Utc::now().date_naive(),
        ahead_days,
        keep_days: None,
    };
    run(pool, &policy, &RunOptions::default()).await
}

/// Plan and apply `policy` to every partitioned table, holding the
/// partition lock so that concurrent runners take turns: the second one
/// re-reads the partitions after the first has finished and finds nothing
/// left to do. On a Spider head: every data table of every data node, each
/// node under its own lock ([`cluster`]).
pub async fn run(
    pool: &MySqlPool,
    policy: &Policy,
    options: &RunOptions,
) -> Result<Vec<TableReport>, StoreError> {
    let mut conn = pool.acquire().await?.detach();
    let result = if cluster::is_head(&mut conn).await? {
        run_partitions(&mut conn, policy, options).await
    } else {
        let tables = PARTITIONED_TABLES.map(str::to_owned);
        run_on(&mut conn, &tables, policy, options).await
    };
    let _ = conn.close().await;
    result
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
    super::mysql_error_number(err) == Some(ER_LOCK_WAIT_TIMEOUT)
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

// ---- Every node of a Spider cluster -------------------------------------
// A head holds no partitions of its own: the day partitions live on the
// data nodes' tables, which `cluster` names; the DDL per node is `run_on`.

/// Apply `policy` to every data table of every node. Each node is locked
/// with `GET_LOCK` on that node (a lock is per server, so runners from
/// several heads or machines still take turns per node). A node that fails
/// does not stop the others: the result names it after they are done.
pub(crate) async fn run_partitions(
    head: &mut MySqlConnection,
    policy: &Policy,
    options: &RunOptions,
) -> Result<Vec<TableReport>, StoreError> {
    let placements = placements(head).await?;
    // The nodes work at the same time: the DDL of one is independent of
    // the others', and a cluster's run then takes as long as one node's.
    let runs: Vec<_> = by_node(&placements)
        .into_iter()
        .map(|(node, server, tables)| {
            let (policy, options) = (*policy, options.clone());
            tokio::spawn(async move {
                let result = run_on_node(&node, &server, &tables, &policy, &options).await;
                (node, server, result)
            })
        })
        .collect();
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for run in runs {
        let (node, server, result) = run
            .await
            .map_err(|e| StoreError::Refused(format!("a partition task failed: {e}")))?;
        match result {
            Ok(reports) => done.extend(reports),
            Err(err) => failed.push(NodeFailure {
                server,
                node,
                error: err.to_string(),
            }),
        }
    }
    if failed.is_empty() {
        Ok(done)
    } else {
        Err(StoreError::NodesFailed { done, failed })
    }
}

async fn run_on_node(
    node: &NodeAddress,
    server: &str,
    tables: &[String],
    policy: &Policy,
    options: &RunOptions,
) -> Result<Vec<TableReport>, StoreError> {
    let mut conn = node.connect().await?;
    let result = run_on(&mut conn, tables, policy, options).await;
    let _ = conn.close().await;
    let mut reports = result?;
    for report in &mut reports {
        report.node = Some(server.to_owned());
    }
    Ok(reports)
}

/// The day partitions of one sharded table, as its first data table has
/// them (`partitions` keeps every data table's days the same).
pub(crate) async fn list_days(
    head: &mut MySqlConnection,
    table: &str,
) -> Result<Vec<Partition>, StoreError> {
    let placements = placements(head).await?;
    let first = placements
        .iter()
        .find(|p| p.table == table)
        .ok_or_else(|| StoreError::Corrupt {
            table: "links",
            detail: format!("the head's `{table}` has no Spider partitions"),
        })?;
    let mut conn = first.node.connect().await.map_err(|err| StoreError::Node {
        node: format!("{} ({})", first.server, first.node),
        source: Box::new(err),
    })?;
    let days = list_on(&mut conn, &first.data_table).await;
    let _ = conn.close().await;
    days
}

/// One data table's partitions, for `partitions list`.
#[derive(Debug, Clone)]
pub struct DataTableDays {
    pub server: String,
    pub data_table: String,
    pub days: Vec<Partition>,
}

/// The partitions of every data table on every node; nodes that cannot be
/// read are returned apart.
pub async fn list_all(
    pool: &MySqlPool,
) -> Result<(Vec<DataTableDays>, Vec<NodeFailure>), StoreError> {
    let mut head = pool.acquire().await?;
    let placements = placements(&mut head).await?;
    let mut listed = Vec::new();
    let mut failed = Vec::new();
    for (node, server, tables) in by_node(&placements) {
        let read = async {
            let mut conn = node.connect().await?;
            let mut out = Vec::new();
            for table in &tables {
                out.push(DataTableDays {
                    server: server.clone(),
                    data_table: table.clone(),
                    days: list_on(&mut conn, table).await?,
                });
            }
            let _ = conn.close().await;
            Ok::<_, StoreError>(out)
        };
        match read.await {
            Ok(tables) => listed.extend(tables),
            Err(err) => failed.push(NodeFailure {
                server,
                node,
                error: err.to_string(),
            }),
        }
    }
    Ok((listed, failed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    fn daily(first: &str, days: u64) -> Vec<Partition> {
        let mut parts = vec![Partition {
            name: "p19700101".into(),
            upper: d("1970-01-02"),
            approx_rows: 0,
        }];
        for i in 0..days {
            let day = d(first).checked_add_days(Days::new(i)).unwrap();
            parts.push(Partition {
                name: partition_name(day),
                upper: day.succ_opt().unwrap(),
                approx_rows: 10,
            });
        }
        parts
    }

    #[test]
    fn ensure_on_a_fresh_table_adds_today_through_ahead() {
        let policy = Policy {
            today: d("2026-11-22"),
            ahead_days: 7,
            keep_days: None,
        };
        let plan = plan("links", &daily("2026-01-01", 0), &policy);
        assert!(plan.drop.is_empty());
        assert_eq!(plan.add.first(), Some(&d("2026-11-22")));
        assert_eq!(plan.add.last(), Some(&d("2026-11-29")));
        assert_eq!(plan.add.len(), 8);
        assert_eq!(
            plan.ddl(),
            vec![format!(
                "ALTER TABLE links ADD PARTITION ({})",
                (22..=29)
                    .map(|n| format!(
                        "PARTITION p202611{n} VALUES LESS THAN ('2026-11-{}')",
                        n + 1
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )]
        );
    }

    #[test]
    fn ensure_adds_only_missing_days() {
        let policy = Policy {
            today: d("2026-11-22"),
            ahead_days: 7,
            keep_days: None,
        };
        let plan = plan("links", &daily("2026-11-20", 5), &policy);
        assert_eq!(
            plan.add,
            (25..=29)
                .map(|n| d(&format!("2026-11-{n}")))
                .collect::<Vec<_>>()
        );
        let again = super::plan("links", &daily("2026-11-20", 10), &policy);
        assert!(again.is_empty());
    }

    #[test]
    fn rotate_drops_exactly_the_days_before_the_cutoff() {
        let policy = Policy {
            today: d("2026-11-22"),
            ahead_days: 2,
            keep_days: Some(3),
        };
        let plan = plan("events", &daily("2026-11-15", 10), &policy);
        // cutoff 2026-11-19: days 15..=18 and the epoch partition go; 19 stays.
        let dropped: Vec<&str> = plan.drop.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            dropped,
            [
                "p19700101",
                "p20261115",
                "p20261116",
                "p20261117",
                "p20261118"
            ]
        );
        assert!(plan.add.is_empty(), "24 is already covered");
    }

    #[test]
    fn rotate_never_drops_today_the_future_or_the_last_partition() {
        let policy = Policy {
            today: d("2026-11-22"),
            ahead_days: 0,
            keep_days: Some(0),
        };
        let plan = plan("links", &daily("2026-11-20", 5), &policy);
        assert!(plan.drop.iter().all(|p| p.last_day() < d("2026-11-22")));
        // A table whose only partitions are long expired keeps its newest.
        let stale = daily("2020-01-01", 3);
        let plan = super::plan("links", &stale, &policy);
        assert_eq!(plan.drop.len(), stale.len() - 1);
        assert_eq!(plan.add, vec![d("2026-11-22")]);
    }

    #[test]
    fn a_multi_day_partition_goes_only_when_all_its_days_are_old() {
        let parts = vec![
            Partition {
                name: "p20261110".into(),
                upper: d("2026-11-11"),
                approx_rows: 0,
            },
            // holds 11..=20 because the cron did not run for a while
            Partition {
                name: "p20261120".into(),
                upper: d("2026-11-21"),
                approx_rows: 0,
            },
            Partition {
                name: "p20261121".into(),
                upper: d("2026-11-22"),
                approx_rows: 0,
            },
        ];
        let policy = Policy {
            today: d("2026-11-22"),
            ahead_days: 0,
            keep_days: Some(5),
        };
        let plan = plan("links", &parts, &policy);
        assert_eq!(plan.drop.len(), 1);
        assert_eq!(plan.drop[0].name, "p20261110");
    }
}
