//! The `mysql` command-line client, shared by the benchmarks: sqlx does not
//! speak the `LOAD DATA LOCAL INFILE` protocol, and LOAD DATA is both the
//! fastest way to fill a table and the ceiling the insert path is held to.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// `mysql --local-infile=1 -h 127.0.0.1 -u root DATABASE -e SQL`.
pub fn command(database: &str, sql: &str) -> Command {
    let mut command = Command::new("mysql");
    command.args([
        "--local-infile=1",
        "-h",
        "127.0.0.1",
        "-u",
        "root",
        database,
        "-e",
        sql,
    ]);
    command
}

/// LOAD DATA a TSV of `links` rows (uuid in hex) into `table`; seconds taken.
#[allow(dead_code)] // bench_stats loads events, not links
pub fn load_links_tsv(database: &str, tsv: &Path, table: &str) -> anyhow::Result<f64> {
    let sql = format!(
        "LOAD DATA LOCAL INFILE '{}' INTO TABLE {table} \
         (@uuid, inserted, kind, mailing_id, letter_id, email, position, url) SET uuid = UNHEX(@uuid)",
        tsv.display()
    );
    let started = Instant::now();
    let status = command(database, &sql).status().map_err(|e| {
        anyhow::anyhow!("running the mysql client for LOAD DATA (is it installed?): {e}")
    })?;
    anyhow::ensure!(
        status.success(),
        "LOAD DATA into {database}.{table} failed: {status}"
    );
    Ok(started.elapsed().as_secs_f64())
}

/// Stream TSV rows into `LOAD DATA LOCAL INFILE '/dev/stdin'` (`sql`),
/// written by `write` straight into the client's standard input.
#[allow(dead_code)] // not every benchmark streams its rows
pub fn load_stdin(
    db: &str,
    sql: &str,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut child = command(db, sql)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("running the mysql client: {e}"))?;
    {
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdin"))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, stdin);
        write(&mut out)?;
        out.flush()?;
    }
    let status = child.wait()?;
    anyhow::ensure!(status.success(), "LOAD DATA failed: {status}");
    Ok(())
}
