//! Benchmark of the statistics side: rollup throughput, and the mailing
//! summary read from the rollup tables against the naive `GROUP BY` over
//! `events` it replaces, measured in the same run.
//!
//! ```sh
//! cargo run --release --example bench_stats                     # 10M events (~35 min on a busy 2-core box)
//! cargo run --release --example bench_stats -- --events 4000000 # ~10 min
//! cargo run --release --example bench_stats -- --reuse lt_bench_stats_XXXXXXXX --reads-only --runs 7   # the page's reads again
//! mysql lt_bench_stats_XXXXXXXX < docs/bench_stats_reroll.sql   # then --reuse: roll the same events again
//! ```
//!
//! The latest figures, with their commands, are in docs/benchmarks.md (the
//! rollup of issue 45: 20 µs of MariaDB CPU per rolled event, 1.55-1.79x
//! the intake, with a 2 GB pool; the page of issue 42 at 10.2M events).
//! The first round, for the record, on the shared 2-core development
//! machine while other engineers' benchmarks ran (load average 3-6), debug
//! build (the time is all in the database), `--events 10000000 --letters
//! 100000`: LOAD DATA 9.4k events/s
//! into the compressed table (18 min), rollup 17.7k events/s (9.4 min, 201
//! batches), summary 5.0 ms median with the builder's letters count (375 ms
//! when counting 100k letters on the index instead), the naive GROUP BY over
//! `events` for the same figures 78 s median: 15,500x. With 4M events: 4.8 ms
//! against 48 s. With 1M events and the URL copy in `stats_link_urls`:
//! 3.8 ms against 5.6 s.
//!
//! 1. Loads `--events` events spread over the last `--span-secs` (two days
//!    by default; `--span-secs 600` is a send's first burst) and
//!    `--mailings` mailings (the first gets half the traffic) with
//!    `LOAD DATA LOCAL INFILE` through the `mysql` client, streamed from
//!    this process (no temp file), plus the link rows of the first
//!    mailing (up to 100,000 letters of 1 pixel + 10 links) so "letters
//!    built" has real index entries to count. `--letters` sets how many
//!    letters the hits fall on: hits per letter is what makes a letter
//!    "hot" for the settle pass (realistic: 1-3 hits; hot: 100+).
//! 2. Intake: `--intake` more events written the way the server's replay
//!    writes them (`store::events::insert_idempotent`, batches of 1,000),
//!    their pace printed beside `LOAD DATA`'s.
//! 3. Runs the rollup as `serve` does, verdicts settled with the default
//!    rules (the settle pass reads each batch's letters' clicks), and
//!    reports events/s, its ratio to the intake pace, and MariaDB's CPU
//!    per rolled event (from /proc, when the server is on this machine).
//!    With `--explain`, the settle pass's context read is EXPLAINed for
//!    the first 1,000 letters.
//! 3. Times, median of `--runs`, the API's summary of the first mailing
//!    (`store::stats::summary`: rollup tables + letters built), the letters
//!    built count alone, and the naive equivalent straight from `events`.
//! 4. Issue 42's reads (`support/stats_page_reads.rs`): what the mailing
//!    page reads (summary with its links, hours, minutes and bounce
//!    figures; the creative; the mailing's breakdowns) and both breakdown
//!    endpoints' reads, each against the brute-force `GROUP BY` over
//!    `events` of the same figures (`--naive-runs`), checked to agree; then
//!    `GET /mailings/bench-0`, `/api/mailings/bench-0/stats`,
//!    `…/breakdowns` and `/api/breakdowns` through the real server (`App`)
//!    on a loopback port. The events carry eight real-shaped user agents,
//!    seven countries (one unknown) and six recipient domains, so every
//!    breakdown has several values; bench-0 gets `--delivered` delivery
//!    rows (1% bounced) and a creative. `--reuse DB --reads-only` measures
//!    these alone on a kept database, on the events its rollup has counted.
//!
//! Needs the `mysql` client and `local_infile=ON`. Uses a fresh
//! `lt_bench_stats_*` database and drops it unless `--keep`.
#![allow(clippy::unwrap_used)] // tests and benchmarks: a failure should stop them loudly

#[path = "support/mysql_client.rs"]
mod mysql_client;
#[path = "support/stats_page_reads.rs"]
mod page_reads;
#[path = "support/process_cpu.rs"]
mod process_cpu;

use chrono::{Days, NaiveDate, Utc};
use clap::Parser;
use linktrack::bots::letter_judgement::VerdictRules;
use linktrack::event::EventRow;
use linktrack::kind::EventKind;
use linktrack::store::{self, partitions, rollup, stats};
use process_cpu::ProcessCpu;
use rand::{Rng, RngExt};
use sqlx::MySqlPool;
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
    /// Letters the hits fall on (each mailing's letter ids are 1..=this).
    #[arg(long, default_value_t = 100_000)]
    letters: u64,
    /// The events happened within this many seconds before now (at most
    /// two days: the partitions the bench makes).
    #[arg(long, default_value_t = 172_000)]
    span_secs: u64,
    /// Events written through the replay's insert to measure the intake.
    #[arg(long, default_value_t = 200_000)]
    intake: u64,
    /// Print EXPLAIN of the settle pass's context read.
    #[arg(long)]
    explain: bool,
    /// Events per rollup transaction.
    #[arg(long, default_value_t = 50_000)]
    batch: u32,
    /// Timed repetitions of each read (the median is reported).
    #[arg(long, default_value_t = 7)]
    runs: usize,
    /// Keep the database afterwards.
    #[arg(long)]
    keep: bool,
    /// Use this database as a kept (`--keep`) or interrupted run left it:
    /// no loading; its events not rolled yet are the ones measured (one
    /// partition's watermark: the bench's events are all of one day).
    #[arg(long, value_name = "DATABASE")]
    reuse: Option<String>,
    /// Set MariaDB's `innodb_buffer_pool_size` to this many MB for the run
    /// (restored after). With the default 128 MB and a million events, the
    /// rollup cost MariaDB about twice the CPU per event it costs with 2 GB
    /// (compressed pages evicted and decompressed again).
    #[arg(long, value_name = "MB")]
    buffer_pool_mb: Option<u64>,
    /// With `--reuse`: no intake and no rollup, only the reads of the
    /// mailing page and of the breakdowns against their brute-force
    /// `GROUP BY`s (a database rolled by an earlier run).
    #[arg(long, requires = "reuse")]
    reads_only: bool,
    /// Timed repetitions of each brute-force read of the page reads.
    #[arg(long, default_value_t = 1)]
    naive_runs: usize,
    /// Letters of bench-0 delivered (the page's bounce figures count
    /// them); default: `--letters`.
    #[arg(long)]
    delivered: Option<u64>,
    /// Redis for the page's live section ("Latest clicks"), e.g.
    /// redis://127.0.0.1:6379; without it, the page has none.
    #[arg(long)]
    redis: Option<String>,
}

const DAYS: u64 = 3;
/// Letters of bench-0 given link rows (the "letters built" count).
const MAX_LINK_LETTERS: u64 = 100_000;
const LINKS_PER_LETTER: u32 = 10;
/// Rows per LOAD DATA statement (one transaction each).
const LOAD_CHUNK: u64 = 1_000_000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let name = args
        .reuse
        .clone()
        .unwrap_or_else(|| format!("lt_bench_stats_{:08x}", rand::random::<u32>()));
    let pool = store::migrate(&format!("{}/{name}", args.server)).await?;
    let today = Utc::now().date_naive();
    let first = today - Days::new(DAYS - 1);
    let policy = partitions::Policy {
        today: first,
        ahead_days: DAYS as u32,
        keep_days: None,
    };
    partitions::run(&pool, &policy, &partitions::RunOptions::default()).await?;
    let pool_before: u64 = sqlx::query_scalar("SELECT CAST(@@innodb_buffer_pool_size AS UNSIGNED)")
        .fetch_one(&pool)
        .await?;
    if let Some(mb) = args.buffer_pool_mb {
        sqlx::query(&format!(
            "SET GLOBAL innodb_buffer_pool_size = {}",
            mb << 20
        ))
        .execute(&pool)
        .await?;
        println!(
            "buffer pool          {mb} MB (was {} MB)",
            pool_before >> 20
        );
    }
    let result = run(&args, &name, &pool, first).await;
    if args.buffer_pool_mb.is_some() {
        sqlx::query(&format!(
            "SET GLOBAL innodb_buffer_pool_size = {pool_before}"
        ))
        .execute(&pool)
        .await?;
    }
    if !args.keep && args.reuse.is_none() {
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
    anyhow::ensure!(
        args.span_secs <= 172_000,
        "--span-secs {} reaches before the bench's partitions (at most 172000)",
        args.span_secs
    );
    anyhow::ensure!(
        args.intake <= 250_000,
        "--intake {} is over 250000 (one a millisecond, settled before the rollup)",
        args.intake
    );
    if args.reads_only {
        return page_reads::measure(args, pool).await;
    }
    if args.reuse.is_some() {
        // Events not rolled yet (reset `rollup_state.last_id` to measure again).
        let (events, end): (i64, Option<chrono::NaiveDateTime>) = sqlx::query_as(
            "SELECT COUNT(*), MAX(occurred_at) FROM events \
             WHERE id > (SELECT COALESCE(MAX(last_id), 0) FROM rollup_state)",
        )
        .fetch_one(pool)
        .await?;
        let end = end.ok_or_else(|| anyhow::anyhow!("{db} has no events"))?;
        println!("reused {db}: {events} events not rolled yet, the last at {end}");
        return measure(args, pool, end, events as u64).await;
    }
    // The loaded events end here and the intake's (one a millisecond)
    // follow, all older than the verdicts' settle time when the rollup runs.
    let end = Utc::now().naive_utc() - chrono::Duration::seconds(300);
    let started = Instant::now();
    load_links(db, args.letters.min(MAX_LINK_LETTERS), first)?;
    println!(
        "load links           {:>8.1} s",
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let mut loaded = 0;
    while loaded < args.events {
        let n = LOAD_CHUNK.min(args.events - loaded);
        load_events(db, args, end, loaded, n)?;
        loaded += n;
    }
    let load = started.elapsed().as_secs_f64();
    println!(
        "load events          {load:>8.1} s  ({:.0} events/s, LOAD DATA)",
        args.events as f64 / load
    );
    measure(args, pool, end, args.events).await
}

/// The intake, the rollup of `loaded` events and the intake's, and the
/// summary's reads against the naive ones.
async fn measure(
    args: &Args,
    pool: &MySqlPool,
    end: chrono::NaiveDateTime,
    loaded: u64,
) -> anyhow::Result<()> {
    let intake = intake(pool, args, end).await?;
    println!(
        "intake (replay)      {:>8.1} s  ({intake:.0} events/s, {} events in batches of 1,000)",
        args.intake as f64 / intake,
        args.intake
    );
    if args.explain {
        explain_settle_read(pool, end).await?;
    }

    let total = loaded + args.intake;
    // serve's defaults: verdicts final 30 s after the hit.
    let options = rollup::RollupOptions {
        limit: args.batch,
        verdicts: std::sync::Arc::new(VerdictRules {
            settle: Duration::from_secs(30),
            ..VerdictRules::default()
        }),
        ..rollup::RollupOptions::default()
    };
    let db_cpu = process_cpu::mariadbd_stat(pool).await;
    let cpu_before = db_cpu.as_deref().map(ProcessCpu::read).transpose()?;
    let own_before = ProcessCpu::this()?;
    let started = Instant::now();
    let report = rollup::rollup_with(pool, &options).await?;
    let rollup = started.elapsed().as_secs_f64();
    let own_after = ProcessCpu::this()?;
    let cpu_after = db_cpu.as_deref().map(ProcessCpu::read).transpose()?;
    anyhow::ensure!(report.events() == total, "rolled {}", report.events());
    let pace = total as f64 / rollup;
    println!(
        "rollup               {rollup:>8.1} s  ({pace:.0} events/s, {} batches of <= {}, verdicts settled)",
        report.batches.len(),
        args.batch
    );
    println!(
        "ratio rollup/intake  {:>8.2}   (aim >= 1: the rollup keeps up with what is recorded)",
        pace / intake
    );
    if let (Some(before), Some(after)) = (cpu_before, cpu_after) {
        println!(
            "MariaDB CPU          {:>8.1} us per rolled event",
            (after.own - before.own) / total as f64 * 1e6
        );
    }
    // The rollup's own work (the settle pass's judgement, the counting):
    // in `serve` it shares the cores with the intake.
    println!(
        "rollup process CPU   {:>8.1} us per rolled event",
        (own_after.own - own_before.own) / total as f64 * 1e6
    );

    let mailing = "bench-0";
    let mailing_id = linktrack::mailing_id::MailingId::parse(mailing)?;
    let summary = stats::summary(pool, &mailing_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no summary"))?;
    let naive_result = naive(pool, mailing).await?;
    check_agree(&summary, &naive_result)?;
    println!("summary agrees with the naive GROUP BY (totals and unique letters)");

    // Before the builder keeps a count: the index fallback.
    let counted = median(args.runs, || async {
        stats::count_letters(pool, &mailing_id).await.map(|_| ())
    })
    .await?;
    let fallback = median(args.runs, || async {
        stats::summary(pool, &mailing_id).await.map(|_| ())
    })
    .await?;
    // What the builder does per batch, here once for the whole mailing.
    let mut conn = pool.acquire().await?;
    stats::add_letters_built(&mut conn, mailing, args.letters).await?;
    drop(conn);
    let fast = median(args.runs, || async {
        stats::summary(pool, &mailing_id).await.map(|_| ())
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
    page_reads::measure(args, pool).await
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
type Naive = Vec<(String, i64, i64, i64)>;

async fn naive(pool: &MySqlPool, mailing: &str) -> Result<Naive, store::StoreError> {
    let totals: Naive = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), CAST(bot <> 0 AND kind <> 'unsubscribe' AS SIGNED), COUNT(*), \
           COUNT(DISTINCT letter_id) FROM events \
         WHERE mailing_id = ? GROUP BY 1, 2 ORDER BY 1, 2",
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

/// Real-shaped user agents (mail clients, image proxies, webmail
/// browsers), so the breakdowns have several groups per dimension.
const AGENTS: [&str; 8] = [
    "Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)",
    "Mozilla/5.0",
    "Microsoft Office/16.0 (Windows NT 10.0; Microsoft Outlook 16.0.17231; Pro)",
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Thunderbird/128.3.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 GmailApp/6.0.240310",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36",
];

/// Countries of the loaded events; empty: unknown (no `--geoip`).
const COUNTRIES: [&str; 7] = ["US", "DE", "FR", "GB", "BR", "JP", ""];

/// Recipient domains by letter: the mailbox providers' and others.
const DOMAINS: [&str; 6] = [
    "gmail.com",
    "outlook.com",
    "yahoo.com",
    "icloud.com",
    "example.com",
    "web.de",
];

/// Letter `letter`'s address (the same in `links` and `events`).
fn address(letter: u64) -> String {
    format!(
        "u{letter}@{}",
        DOMAINS[(letter % DOMAINS.len() as u64) as usize]
    )
}

fn hex16(rng: &mut impl Rng) -> String {
    format!("{:032x}", rng.random::<u128>())
}

fn load_links(db: &str, letters: u64, day: NaiveDate) -> anyhow::Result<()> {
    let sql = "LOAD DATA LOCAL INFILE '/dev/stdin' INTO TABLE links \
               (@uuid, inserted, kind, mailing_id, letter_id, email, position, url) \
               SET uuid = UNHEX(@uuid)";
    mysql_client::load_stdin(db, sql, |out| {
        let mut rng = rand::rng();
        for letter in 1..=letters {
            writeln!(
                out,
                "{}\t{day}\tpixel\tbench-0\t{letter}\t{}\t0\t",
                hex16(&mut rng),
                address(letter)
            )?;
            for p in 1..=LINKS_PER_LETTER {
                writeln!(
                    out,
                    "{}\t{day}\tclick\tbench-0\t{letter}\t{}\t{p}\thttps://example.com/article/{p}",
                    hex16(&mut rng),
                    address(letter)
                )?;
            }
        }
        Ok(())
    })
}

/// Where event `i` of `total` happened: spread evenly over the `span`
/// seconds before now, in order (ids grow with time, as the writer produces
/// them).
fn occurred(i: u64, total: u64, span: u64, now: chrono::NaiveDateTime) -> chrono::NaiveDateTime {
    let back = span as f64 * (1.0 - i as f64 / total.max(1) as f64);
    now - chrono::Duration::milliseconds((back * 1000.0) as i64)
}

/// `--intake` events through the replay's insert, after the loaded ones;
/// returns events per second.
async fn intake(
    pool: &MySqlPool,
    args: &Args,
    after: chrono::NaiveDateTime,
) -> anyhow::Result<f64> {
    let mut rng = rand::rng();
    let rows: Vec<EventRow> = (0..args.intake)
        .map(|i| {
            let letter = rng.random_range(1..=args.letters);
            EventRow {
                event_id: rng.random(),
                occurred_at: (after + chrono::Duration::milliseconds(i as i64 + 1)).and_utc(),
                kind: EventKind::Click,
                token: rng.random(),
                link_id: Some(rng.random_range(1..1_000_000)),
                mailing_id: Some("bench-0".to_owned()),
                letter_id: Some(letter),
                email: Some(address(letter)),
                position: Some(rng.random_range(1..=LINKS_PER_LETTER)),
                ip: Some("192.0.2.0".to_owned()),
                user_agent: Some("Mozilla/5.0".to_owned()),
                country: None,
                bot: false,
                bot_reason: None,
            }
        })
        .collect();
    let started = Instant::now();
    for batch in rows.chunks(1_000) {
        store::events::insert_idempotent(pool, batch).await?;
    }
    Ok(args.intake as f64 / started.elapsed().as_secs_f64())
}

/// EXPLAIN of the settle pass's context read (store/verdicts.rs) for the
/// first letters of bench-0 (one statement's worth), within a 70 s window
/// before `end`.
async fn explain_settle_read(pool: &MySqlPool, end: chrono::NaiveDateTime) -> anyhow::Result<()> {
    let from = end - chrono::Duration::seconds(70);
    let letters: Vec<u64> = (1..=store::verdicts::LETTERS_PER_CONTEXT_READ as u64).collect();
    let sql = store::verdicts::context_read_sql("bench-0", from, end, &letters);
    let rows = sqlx::query(&format!("EXPLAIN {sql}"))
        .fetch_all(pool)
        .await?;
    for row in rows {
        use sqlx::Row;
        let column = |n: &str| -> String {
            row.try_get::<Option<String>, _>(n)
                .ok()
                .flatten()
                .unwrap_or_default()
        };
        println!(
            "EXPLAIN settle read  type={} key={} rows={} extra={}",
            column("type"),
            column("key"),
            row.try_get::<Option<u64>, _>("rows")
                .ok()
                .flatten()
                .unwrap_or(0),
            column("Extra")
        );
    }
    Ok(())
}

/// Events `from..from + n`: spread over the last `--span-secs` in order,
/// half for mailing bench-0.
fn load_events(
    db: &str,
    args: &Args,
    end: chrono::NaiveDateTime,
    from: u64,
    n: u64,
) -> anyhow::Result<()> {
    let sql = "LOAD DATA LOCAL INFILE '/dev/stdin' INTO TABLE events \
               (inserted, @eid, occurred_at, kind, @uuid, link_id, mailing_id, letter_id, email, \
                position, ip, user_agent, bot, @reason, @country) \
               SET event_id = UNHEX(@eid), uuid = UNHEX(@uuid), bot_reason = @reason, \
                 country = NULLIF(@country, '')";
    mysql_client::load_stdin(db, sql, |out| {
        let mut rng = rand::rng();
        for i in from..from + n {
            let at = occurred(i, args.events, args.span_secs, end);
            let day = at.date();
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
            let agent = AGENTS[rng.random_range(0..AGENTS.len())];
            let country = COUNTRIES[rng.random_range(0..COUNTRIES.len())];
            writeln!(
                out,
                "{day}\t{}\t{}\t{kind}\t{}\t{}\tbench-{mailing}\t{letter}\t{}\t{position}\t192.0.2.0\t{agent}\t{bot}\t{reason}\t{country}",
                hex16(&mut rng),
                at.format("%Y-%m-%d %H:%M:%S%.3f"),
                hex16(&mut rng),
                rng.random_range(1..1_000_000u64),
                address(letter),
            )?;
        }
        Ok(())
    })
}
