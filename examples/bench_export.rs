//! Benchmark of the recipients export (issue 42): a mailing of `--letters`
//! letters exported through [`linktrack::export::recipients`] (the stream
//! the API and `linktrack export recipients` write), its time per million
//! rows against `SELECT … INTO OUTFILE` of the same rows by the database
//! itself in the same run, and the process's memory along the way.
//!
//! ```sh
//! cargo run --release --example bench_export                       # 1M letters (~5 min on 2 busy cores)
//! cargo run --release --example bench_export -- --letters 100000   # quicker
//! ```
//!
//! 1. Loads `--letters` letters (a pixel and two links each) into `links`,
//!    their engagement into `stats_letter_events` (a third opened, a tenth
//!    clicked, some bots) and their delivery rows (1% refused), with
//!    `LOAD DATA LOCAL INFILE` through the `mysql` client.
//! 2. `SELECT … INTO OUTFILE` of the same rows (one statement: the
//!    letters grouped, joined with their engagement and deliveries), twice,
//!    the faster counted.
//! 3. The export as CSV and as JSON lines into a sink, twice each, the
//!    faster counted; the resident set sampled every 100,000 rows and its
//!    peak (`VmHWM`, reset before each export through `/proc/self/clear_refs`).
//!
//! Needs the `mysql` client, `local_infile=ON` and the FILE privilege with
//! the database on this machine (the outfile goes to /tmp and is removed).
//! Uses a fresh `lt_bench_export_*` database and drops it unless `--keep`.
#![allow(clippy::unwrap_used)] // tests and benchmarks: a failure should stop them loudly

#[path = "support/mysql_client.rs"]
mod mysql_client;

use chrono::{NaiveDate, Utc};
use clap::Parser;
use futures_util::TryStreamExt;
use linktrack::export::{self, Format};
use linktrack::store::{self, partitions};
use rand::RngExt;
use sqlx::MySqlPool;
use std::io::Write;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// MySQL server, without a database.
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    server: String,
    #[arg(long, default_value_t = 1_000_000)]
    letters: u64,
    /// Timed repetitions of each (the fastest is reported).
    #[arg(long, default_value_t = 2)]
    runs: usize,
    /// Keep the database afterwards.
    #[arg(long)]
    keep: bool,
}

const MAILING: &str = "bench-export";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let name = format!("lt_bench_export_{:08x}", rand::random::<u32>());
    let pool = store::migrate(&format!("{}/{name}", args.server)).await?;
    let today = Utc::now().date_naive();
    let policy = partitions::Policy {
        today,
        ahead_days: 1,
        keep_days: None,
    };
    partitions::run(&pool, &policy, &partitions::RunOptions::default()).await?;
    let result = run(&args, &name, &pool, today).await;
    if !args.keep {
        sqlx::query(&format!("DROP DATABASE `{name}`"))
            .execute(&pool)
            .await?;
    }
    result
}

async fn run(args: &Args, db: &str, pool: &MySqlPool, day: NaiveDate) -> anyhow::Result<()> {
    println!(
        "bench_export: {} letters of mailing {MAILING}",
        args.letters
    );
    let started = Instant::now();
    load_letters(db, args.letters, day)?;
    load_engagement(db, args.letters, day)?;
    load_deliveries(db, args.letters)?;
    println!(
        "load                 {:>8.1} s  (links, stats_letter_events, deliveries; LOAD DATA)",
        started.elapsed().as_secs_f64()
    );
    sqlx::query("ANALYZE TABLE links, stats_letter_events, deliveries")
        .execute(pool)
        .await?;

    let mut outfile_best = f64::MAX;
    let mut outfile_rows = 0;
    for run in 0..args.runs.max(1) {
        let (secs, rows) = outfile(pool, db, run).await?;
        outfile_best = outfile_best.min(secs);
        outfile_rows = rows;
    }
    println!(
        "INTO OUTFILE         {outfile_best:>8.2} s  {outfile_rows} rows ({:.2} s per million)",
        per_million(outfile_best, outfile_rows)
    );

    for format in [Format::Csv, Format::Jsonl] {
        let mut best = f64::MAX;
        let mut last = Measured::default();
        for _ in 0..args.runs.max(1) {
            let measured = export_once(pool, format).await?;
            best = best.min(measured.secs);
            last = measured;
        }
        anyhow::ensure!(
            last.rows == outfile_rows,
            "the export wrote {} rows, the outfile {outfile_rows}",
            last.rows
        );
        println!(
            "export {:<6}        {best:>8.2} s  {} rows, {:.1} MB ({:.2} s per million; {:.2}x INTO OUTFILE)",
            format.extension(),
            last.rows,
            last.bytes as f64 / 1e6,
            per_million(best, last.rows),
            best / outfile_best
        );
        let samples: Vec<String> = last
            .rss_samples
            .iter()
            .map(|(rows, kb)| format!("{}k:{:.1}", rows / 1000, *kb as f64 / 1024.0))
            .collect();
        println!(
            "  memory: RSS before {:.1} MB, peak {:.1} MB; RSS (MB) by rows written: {}",
            last.rss_before_kb as f64 / 1024.0,
            last.peak_kb as f64 / 1024.0,
            samples.join(" ")
        );
    }
    Ok(())
}

fn per_million(secs: f64, rows: u64) -> f64 {
    secs * 1e6 / rows.max(1) as f64
}

#[derive(Default)]
struct Measured {
    secs: f64,
    rows: u64,
    bytes: u64,
    rss_before_kb: u64,
    peak_kb: u64,
    rss_samples: Vec<(u64, u64)>,
}

/// One export into a sink, with the memory it took.
async fn export_once(pool: &MySqlPool, format: Format) -> anyhow::Result<Measured> {
    // Resets VmHWM to the current resident set (Linux 4.0 and later).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let mut measured = Measured {
        rss_before_kb: status_kb("VmRSS:"),
        ..Measured::default()
    };
    let started = Instant::now();
    let mut chunks = std::pin::pin!(export::recipients(
        pool.clone(),
        linktrack::mailing_id::MailingId::parse(MAILING)?,
        format
    ));
    let mut sink = std::io::sink();
    let mut next_sample = 100_000;
    while let Some(chunk) = chunks.try_next().await? {
        sink.write_all(&chunk.bytes)?;
        measured.rows += chunk.rows;
        measured.bytes += chunk.bytes.len() as u64;
        if measured.rows >= next_sample {
            measured
                .rss_samples
                .push((measured.rows, status_kb("VmRSS:")));
            next_sample += 100_000;
        }
    }
    measured.secs = started.elapsed().as_secs_f64();
    measured.peak_kb = status_kb("VmHWM:");
    Ok(measured)
}

/// A `kB` line of /proc/self/status.
fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The same rows, written by the database: seconds and rows.
async fn outfile(pool: &MySqlPool, db: &str, run: usize) -> anyhow::Result<(f64, u64)> {
    let path = format!("/tmp/{db}_{run}.csv");
    let sql = format!(
        "SELECT l.letter_id, l.email, e.first_open, COALESCE(e.opens, 0), COALESCE(e.clicks, 0), \
           COALESCE(e.links_clicked, ''), COALESCE(e.bot_opens, 0), COALESCE(e.bot_clicks, 0), \
           COALESCE(e.unsubscribed, 0), d.letter_id IS NOT NULL \
         FROM (SELECT letter_id, MAX(email) AS email FROM links \
               WHERE mailing_id = ? AND letter_id > 0 AND kind IN ('click', 'pixel') \
               GROUP BY letter_id) AS l \
         LEFT JOIN (SELECT letter_id, \
               MIN(IF(kind = 'open' AND bot = 0, first_at, NULL)) AS first_open, \
               SUM(IF(kind = 'open' AND bot = 0, n, 0)) AS opens, \
               SUM(IF(kind = 'click' AND bot = 0, n, 0)) AS clicks, \
               GROUP_CONCAT(IF(kind = 'click' AND bot = 0 AND position > 0, position, NULL) \
                 ORDER BY position SEPARATOR ' ') AS links_clicked, \
               SUM(IF(kind = 'open' AND bot = 1, n, 0)) AS bot_opens, \
               SUM(IF(kind = 'click' AND bot = 1, n, 0)) AS bot_clicks, \
               MAX(kind = 'unsubscribe') AS unsubscribed \
             FROM stats_letter_events WHERE mailing_id = ? GROUP BY letter_id) AS e \
           ON e.letter_id = l.letter_id \
         LEFT JOIN deliveries d ON d.mailing_id = ? AND d.letter_id = l.letter_id \
           AND d.status = 'rejected' \
         ORDER BY l.letter_id \
         INTO OUTFILE '{path}' FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' \
         LINES TERMINATED BY '\\r\\n'"
    );
    let started = Instant::now();
    let done = sqlx::query(&sql)
        .bind(MAILING)
        .bind(MAILING)
        .bind(MAILING)
        .execute(pool)
        .await?;
    let secs = started.elapsed().as_secs_f64();
    let rows = done.rows_affected();
    if let Err(err) = std::fs::remove_file(&path) {
        eprintln!("could not remove {path}: {err}");
    }
    Ok((secs, rows))
}

/// The address of a letter; every thousandth one a spreadsheet would
/// take for a formula.
fn address(letter: u64) -> String {
    if letter.is_multiple_of(1000) {
        format!("=r{letter}@example.com")
    } else {
        format!("reader{letter}@example.com")
    }
}

fn load_letters(db: &str, letters: u64, day: NaiveDate) -> anyhow::Result<()> {
    let sql = "LOAD DATA LOCAL INFILE '/dev/stdin' INTO TABLE links \
               (@uuid, inserted, kind, mailing_id, letter_id, email, position, url) \
               SET uuid = UNHEX(@uuid)";
    mysql_client::load_stdin(db, sql, |out| {
        let mut rng = rand::rng();
        for letter in 1..=letters {
            let email = address(letter);
            writeln!(
                out,
                "{:032x}\t{day}\tpixel\t{MAILING}\t{letter}\t{email}\t0\t",
                rng.random::<u128>()
            )?;
            for p in 1..=2 {
                writeln!(
                    out,
                    "{:032x}\t{day}\tclick\t{MAILING}\t{letter}\t{email}\t{p}\thttps://example.com/{p}",
                    rng.random::<u128>()
                )?;
            }
        }
        Ok(())
    })
}

fn load_engagement(db: &str, letters: u64, day: NaiveDate) -> anyhow::Result<()> {
    let sql = "LOAD DATA LOCAL INFILE '/dev/stdin' INTO TABLE stats_letter_events \
               (mailing_id, letter_id, kind, position, bot, n, first_at)";
    mysql_client::load_stdin(db, sql, |out| {
        for letter in 1..=letters {
            let at = format!("{day} 09:{:02}:{:02}.250", letter % 60, (letter / 60) % 60);
            let mut row = |kind: &str, position: u64, bot: u8, n: u64| {
                writeln!(
                    out,
                    "{MAILING}\t{letter}\t{kind}\t{position}\t{bot}\t{n}\t{at}"
                )
            };
            if letter.is_multiple_of(3) {
                row("open", 0, 0, 1 + letter % 4)?;
            }
            if letter.is_multiple_of(7) {
                row("open", 0, 1, 1)?;
            }
            if letter.is_multiple_of(10) {
                row("click", 1, 0, 1)?;
                row("click", 2, 0, 2)?;
            }
            if letter.is_multiple_of(50) {
                row("click", 2, 1, 1)?;
            }
            if letter.is_multiple_of(500) {
                row("unsubscribe", 0, 0, 1)?;
            }
        }
        Ok(())
    })
}

fn load_deliveries(db: &str, letters: u64) -> anyhow::Result<()> {
    let sql = "LOAD DATA LOCAL INFILE '/dev/stdin' INTO TABLE deliveries \
               (mailing_id, letter_id, status, reply, at)";
    mysql_client::load_stdin(db, sql, |out| {
        for letter in 1..=letters {
            let (status, reply) = if letter.is_multiple_of(100) {
                ("rejected", "550 5.1.1 no such user")
            } else {
                ("delivered", "250 2.0.0 queued")
            };
            writeln!(
                out,
                "{MAILING}\t{letter}\t{status}\t{reply}\t2026-11-27 09:00:00"
            )?;
        }
        Ok(())
    })
}
