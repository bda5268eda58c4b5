//! Benchmark of the statistics side: rollup throughput, and the mailing
//! summary read from the rollup tables against the naive `GROUP BY` over
//! `events` it replaces, measured in the same run.
//!
//! ```sh
//! cargo run --release --example bench_stats                     # 10M events (~35 min on a busy 2-core box)
//! cargo run --release --example bench_stats -- --events 4000000 # ~10 min
//! ```
//!
//! Measured on the shared 2-core development machine while other engineers'
//! benchmarks ran (load average 3-6), debug build (the time is all in the
//! database), `--events 10000000 --letters 100000`: LOAD DATA 9.4k events/s
//! into the compressed table (18 min), rollup 17.7k events/s (9.4 min, 201
//! batches), summary 5.0 ms median with the builder's letters count (375 ms
//! when counting 100k letters on the index instead), the naive GROUP BY over
//! `events` for the same figures 78 s median: 15,500x. With 4M events: 4.8 ms
//! against 48 s. With 1M events and the URL copy in `stats_link_urls`:
//! 3.8 ms against 5.6 s.
//!
//! 1. Loads `--events` events over three days and `--mailings` mailings
//!    (the first gets half the traffic) with `LOAD DATA LOCAL INFILE`
//!    through the `mysql` client, streamed from this process (no temp file),
//!    plus the link rows of the first mailing (`--letters` letters of 1
//!    pixel + 10 links) so "letters built" has real index entries to count.
//! 2. Runs the rollup and reports events/s.
//! 3. Times, median of `--runs`, the API's summary of the first mailing
//!    (`store::stats::summary`: rollup tables + letters built), the letters
//!    built count alone, and the naive equivalent straight from `events`.
//!
//! Needs the `mysql` client and `local_infile=ON`. Uses a fresh
//! `lt_bench_stats_*` database and drops it unless `--keep`.
#![allow(clippy::unwrap_used)] // tests and benchmarks: a failure should stop them loudly

#[path = "support/mysql_client.rs"]
mod mysql_client;

use chrono::{Days, NaiveDate, Utc};
use clap::Parser;
use linktrack::store::{self, partitions, rollup, stats};
use rand::{Rng, RngExt};
use sqlx::MySqlPool;
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    /// MySQL server, without a database.
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    server: String,
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    #[arg(long, default_value_t = 5)]
    mailings: u32,
    /// Letters of the measured mailing.
    #[arg(long, default_value_t = 100_000)]
    letters: u64,
    /// Events per rollup transaction.
    #[arg(long, default_value_t = 50_000)]
    batch: u32,
    /// Timed repetitions of each read (the median is reported).
    #[arg(long, default_value_t = 7)]
    runs: usize,
    /// Keep the database afterwards.
    #[arg(long)]
    keep: bool,
}

const DAYS: u64 = 3;
const LINKS_PER_LETTER: u32 = 10;
/// Rows per LOAD DATA statement (one transaction each).
const LOAD_CHUNK: u64 = 1_000_000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let name = format!("lt_bench_stats_{:08x}", rand::random::<u32>());
    let pool = store::migrate(&format!("{}/{name}", args.server)).await?;
    let today = Utc::now().date_naive();
    let first = today - Days::new(DAYS - 1);
    let policy = partitions::Policy {
        today: first,
        ahead_days: DAYS as u32,
        keep_days: None,
    };
    partitions::run(&pool, &policy, &partitions::RunOptions::default()).await?;
    let result = run(&args, &name, &pool, first).await;
    if !args.keep {
        sqlx::query(&format!("DROP DATABASE `{name}`"))
            .execute(&pool)
            .await?;
    }
    result
}

async fn run(args: &Args, db: &str, pool: &MySqlPool, first: NaiveDate) -> anyhow::Result<()> {
    println!(
        "bench_stats: {} events, {} mailings, {} days; {} letters x {} links for mailing bench-0",
        args.events, args.mailings, DAYS, args.letters, LINKS_PER_LETTER
    );
    let started = Instant::now();
    load_links(db, args.letters, first)?;
    println!(
        "load links           {:>8.1} s",
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let mut loaded = 0;
    while loaded < args.events {
        let n = LOAD_CHUNK.min(args.events - loaded);
        load_events(db, args, first, loaded, n)?;
        loaded += n;
    }
    let load = started.elapsed().as_secs_f64();
    println!(
        "load events          {load:>8.1} s  ({:.0} events/s, LOAD DATA)",
        args.events as f64 / load
    );

    let started = Instant::now();
    let report = rollup::rollup(pool, args.batch).await?;
    let rollup = started.elapsed().as_secs_f64();
    anyhow::ensure!(report.events() == args.events, "rolled {}", report.events());
    println!(
        "rollup               {rollup:>8.1} s  ({:.0} events/s, {} batches of <= {})",
        args.events as f64 / rollup,
        report.batches.len(),
        args.batch
    );

    let mailing = "bench-0";
    let summary = stats::summary(pool, mailing)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no summary"))?;
    let naive_result = naive(pool, mailing).await?;
    check_agree(&summary, &naive_result)?;
    println!("summary agrees with the naive GROUP BY (totals and unique letters)");

    // Before the builder keeps a count: the index fallback.
    let counted = median(args.runs, || async {
        stats::count_letters(pool, mailing).await.map(|_| ())
    })
    .await?;
    let fallback = median(args.runs, || async {
        stats::summary(pool, mailing).await.map(|_| ())
    })
    .await?;
    // What the builder does per batch, here once for the whole mailing.
    let mut conn = pool.acquire().await?;
    stats::add_letters_built(&mut conn, mailing, args.letters).await?;
    drop(conn);
    let fast = median(args.runs, || async {
        stats::summary(pool, mailing).await.map(|_| ())
    })
    .await?;
    let slow_runs = args.runs.min(3);
    let slow = median(slow_runs, || async {
        naive(pool, mailing).await.map(|_| ())
    })
    .await?;
    println!(
        "summary (API)        {:>8.2} ms  median of {} (letters built kept by the builder)",
        ms(fast),
        args.runs
    );
    println!(
        "summary, fallback    {:>8.2} ms  (letters built counted on the mailing_letter index: {:.2} ms for {} letters)",
        ms(fallback),
        ms(counted),
        args.letters
    );
    println!(
        "naive GROUP BY       {:>8.2} ms  median of {slow_runs} (same figures from events)",
        ms(slow)
    );
    println!(
        "ratio naive/summary  {:>8.0}x",
        slow.as_secs_f64() / fast.as_secs_f64()
    );
    println!(
        "ratio naive/fallback {:>8.0}x",
        slow.as_secs_f64() / fallback.as_secs_f64()
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn median<F, Fut>(runs: usize, mut f: F) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), store::StoreError>>,
{
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        f().await?;
        times.push(started.elapsed());
    }
    times.sort();
    Ok(times[times.len() / 2])
}

/// The naive summary: what the API would run without rollups.
type Naive = Vec<(String, i8, i64, i64)>;

async fn naive(pool: &MySqlPool, mailing: &str) -> Result<Naive, store::StoreError> {
    let totals: Naive = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), bot, COUNT(*), COUNT(DISTINCT letter_id) FROM events \
         WHERE mailing_id = ? GROUP BY kind, bot ORDER BY 1, 2",
    )
    .bind(mailing)
    .fetch_all(pool)
    .await?;
    let _links: Vec<(u32, i8, i64, i64)> = sqlx::query_as(
        "SELECT position, bot, COUNT(*), COUNT(DISTINCT letter_id) FROM events \
         WHERE mailing_id = ? AND kind = 'click' GROUP BY position, bot",
    )
    .bind(mailing)
    .fetch_all(pool)
    .await?;
    let _hours: Vec<(String, String, i8, i64)> = sqlx::query_as(
        "SELECT DATE_FORMAT(occurred_at, '%Y-%m-%d %H'), CAST(kind AS CHAR), bot, COUNT(*) \
         FROM events WHERE mailing_id = ? AND kind IN ('open', 'click') GROUP BY 1, 2, 3",
    )
    .bind(mailing)
    .fetch_all(pool)
    .await?;
    Ok(totals)
}

fn check_agree(s: &stats::MailingSummary, naive: &Naive) -> anyhow::Result<()> {
    for (kind, bot, total, unique) in naive {
        let split = match kind.as_str() {
            "open" => s.opens,
            "click" => s.clicks,
            "unsubscribe" => s.unsubscribes,
            _ => continue, // image rows are letter 0: no unique count
        };
        let c = if *bot != 0 { split.bot } else { split.human };
        anyhow::ensure!(
            (c.total as i64, c.unique as i64) == (*total, *unique),
            "{kind}/{bot}: summary {c:?}, naive {total}/{unique}"
        );
    }
    Ok(())
}

/// Stream TSV rows into `LOAD DATA LOCAL INFILE '/dev/stdin'`.
fn load(
    db: &str,
    sql: &str,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let mut child = mysql_client::command(db, sql)
        .stdin(Stdio::piped())
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

fn hex16(rng: &mut impl Rng) -> String {
    format!("{:032x}", rng.random::<u128>())
}

fn load_links(db: &str, letters: u64, day: NaiveDate) -> anyhow::Result<()> {
    let sql = "LOAD DATA LOCAL INFILE '/dev/stdin' INTO TABLE links \
               (@uuid, inserted, kind, mailing_id, letter_id, email, position, url) \
               SET uuid = UNHEX(@uuid)";
    load(db, sql, |out| {
        let mut rng = rand::rng();
        for letter in 1..=letters {
            writeln!(
                out,
                "{}\t{day}\tpixel\tbench-0\t{letter}\tu{letter}@example.com\t0\t",
                hex16(&mut rng)
            )?;
            for p in 1..=LINKS_PER_LETTER {
                writeln!(
                    out,
                    "{}\t{day}\tclick\tbench-0\t{letter}\tu{letter}@example.com\t{p}\thttps://example.com/article/{p}",
                    hex16(&mut rng)
                )?;
            }
        }
        Ok(())
    })
}

/// Events `from..from + n`: spread over the days in order (ids grow with
/// time, as the writer produces them), half for mailing bench-0.
fn load_events(db: &str, args: &Args, first: NaiveDate, from: u64, n: u64) -> anyhow::Result<()> {
    let sql = "LOAD DATA LOCAL INFILE '/dev/stdin' INTO TABLE events \
               (inserted, @eid, occurred_at, kind, @uuid, link_id, mailing_id, letter_id, email, \
                position, ip, user_agent, bot, @reason) \
               SET event_id = UNHEX(@eid), uuid = UNHEX(@uuid), bot_reason = NULLIF(@reason, '')";
    let per_day = args.events.div_ceil(DAYS).max(1);
    load(db, sql, |out| {
        let mut rng = rand::rng();
        for i in from..from + n {
            let day = first + Days::new(i / per_day);
            let second = (i % per_day) * 86_400 / per_day;
            let at = day.and_hms_opt(0, 0, 0).unwrap_or_default()
                + chrono::Duration::seconds(second as i64);
            let mailing = if rng.random_bool(0.5) {
                0
            } else {
                rng.random_range(1..args.mailings.max(2))
            };
            let letter = rng.random_range(1..=args.letters);
            let roll: f64 = rng.random();
            let (kind, position) = match roll {
                r if r < 0.70 => ("open", 0),
                r if r < 0.95 => ("click", rng.random_range(1..=LINKS_PER_LETTER)),
                r if r < 0.98 => ("image", 0),
                _ => ("unsubscribe", 0),
            };
            let (bot, reason) = if rng.random_bool(0.1) {
                (1, "scanner")
            } else {
                (0, "")
            };
            writeln!(
                out,
                "{day}\t{}\t{}\t{kind}\t{}\t{}\tbench-{mailing}\t{letter}\tu{letter}@example.com\t{position}\t192.0.2.0\tMozilla/5.0\t{bot}\t{reason}",
                hex16(&mut rng),
                at.format("%Y-%m-%d %H:%M:%S%.3f"),
                hex16(&mut rng),
                rng.random_range(1..1_000_000u64),
            )?;
        }
        Ok(())
    })
}
