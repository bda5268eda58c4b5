//! Load benchmark of the tracking server against the database's own ceiling.
//!
//! ```sh
//! apt-get install -y wrk sysbench
//! cargo run --release --example bench_serve                  # 3M links in 30 daily partitions
//! cargo run --release --example bench_serve -- --rows 1000000 --seconds 8
//! ```
//!
//! In one run, on loopback, at `--connections` (64) concurrent clients, the
//! measurements take turns round after round (each figure is the median of
//! its rounds, so a burst of load from elsewhere hits all alike):
//!
//! 1. **Ceiling**: the redirect's own lookup (`WHERE uuid = UNHEX(?) AND
//!    inserted = ?`, a prepared statement) issued by sysbench, a C client,
//!    over `--connections` database connections; queries/s and p99.
//! 2. **Redirect**: `GET /c/{token}` through the whole server (parse,
//!    lookup, journal append, 302) with wrk; req/s and p99.
//! 3. **Pixel**: `GET /o/{token}.gif`, which reads nothing on its way.
//! 4. **Healthz**: `GET /healthz`, the server's own ceiling without a
//!    database, asked for as the pixel is (the same wrk script, user agent
//!    and path length: `/healthz?{token}`), so the two differ only in the
//!    server's work.
//! 5. With `--webhooks`: the redirect again with a webhook endpoint on, once
//!    per `--webhook-batches` value (events per request; 1 = one each): every
//!    click is queued in the outbox by the replay and POSTed, signed, to a
//!    receiver in a process of its own (this binary again, at nice 19, as a
//!    receiver on another machine would take none of ours) that counts the
//!    events and answers 204. The ratio to (2) is what events out cost the
//!    redirect (aim >= 0.95); also events sent per second during the load,
//!    the queue when the load ends, and how long the sender takes to drain
//!    it (the server keeps running until the receiver has every event).
//! 6. With `--compare-in-flight M`: the redirect again on a server whose
//!    shared lookups run M statements at once instead of `--in-flight`'s.
//!
//! Each server measurement lasts until its events are replayed into the
//! database (its own journal directory, emptied), so the replay is charged
//! to the load that caused it and the next measurement starts without a
//! backlog; the report says how long that took after the load. Besides
//! req/s and p99 it gives CPU per hit, measured from outside the server:
//! inside MariaDB, the CPU its user's statements took
//! (`USER_STATISTICS.CPU_TIME`; sysbench connects as the same user, so the
//! ceiling is counted alike and other users of the database server are
//! not), and in this process, which is the server (the harness idles while
//! wrk runs). On two shared cores the req/s ratios also measure who got the
//! CPU (wrk, the server and MariaDB compete for it); the CPU ratios are what
//! holds when the database and the server each have machines of their own:
//! redirects against point selects per database CPU second, and opens
//! against `/healthz` per server CPU second.
//!
//! It also counts every process a hit keeps busy on this machine: the load
//! generator (wrk or sysbench, a child this process waits for), the server
//! and the whole `mariadbd` process (found by its pid file; with its
//! background threads, such as page compression and flushing, and with any
//! other client's work, so run it on a quiet database). Where all of them
//! share the cores, as here, the req/s ratios can be no better than the
//! ratios of that CPU per hit, which the report prints with a bound: the
//! redirect's ratio were its HTTP work as cheap as `/healthz`'s.
//!
//! `--buffer-pool-mb MB` resizes MariaDB's buffer pool for the run (and
//! back after it) and reads `links` into it first: without it, 3M links are
//! 1 GB against the default 128 MB pool, and both the ceiling and the
//! redirect read most pages from disk (or the OS cache).
//!
//! With `--hot-letters N` the rounds are replaced by the rollup's pace
//! against a running `linktrack serve`'s click intake on N hot letters
//! (hot.rs says how):
//!
//! ```sh
//! cargo build --release --bin linktrack --example bench_serve
//! target/release/examples/bench_serve --database lt_bench_hot --hot-letters 2000 --connections 32 --seconds 15 --rounds 3
//! target/release/examples/bench_serve --database lt_bench_hot --hot-letters 2000 --connections 32 --seconds 15 --rounds 3 --linktrack /tmp/base-linktrack,target/release/linktrack   # an A/B
//! ```
//!
//! With `--callgrind SECONDS` the rounds are replaced by one load of
//! `--callgrind-route` (redirect, pixel or healthz) while this process runs
//! under `valgrind --tool=callgrind`: the counters are zeroed just before
//! the load, dumped just after it and again once its events are replayed,
//! and the server's own request counter (its `/metrics`) says how many hits
//! that window served, so the figures are instructions per hit, in the load
//! and in its replay, which stay the same however busy the machine is:
//!
//! ```sh
//! cargo build --release --example bench_serve
//! valgrind --tool=callgrind target/release/examples/bench_serve --rows 200000 --days 2 --connections 16 --callgrind 20
//! valgrind --tool=callgrind target/release/examples/bench_serve --reuse --sample 100000 --connections 16 --callgrind 20 --callgrind-route pixel
//! callgrind_annotate --inclusive=yes callgrind.out.PID.1 | head -60   # .1: the load, .2: its replay
//! ```
//!
//! Every measurement gets tokens no earlier one used (the sample is cut into
//! one slice per measurement, each token asked for once), and every server
//! is a new one, so neither the link cache nor MariaDB's buffer pool is warm
//! with the measurement's tokens. The server connects as a MariaDB user of
//! its own, whose statements the server counts (`userstat`): statements per
//! hit include the event's replay.
#![allow(clippy::unwrap_used)] // tests and benchmarks: a failure should stop them loudly

#[path = "../support/mysql_client.rs"]
mod mysql_client;
#[path = "../support/process_cpu.rs"]
mod process_cpu;
use process_cpu::{mariadbd_stat, ProcessCpu};

mod hot;
mod load;
mod report;
mod webhooks;
use load::*;
use report::*;
use webhooks::*;

use chrono::{Days, NaiveTime, Utc};
use clap::Parser;
use linktrack::journal::segments::JournalSettings;
use linktrack::kind::TokenKind;
use linktrack::outbound::signature::Secret;
use linktrack::outbound::{Endpoint, Outbound, RetryPolicy, Target};
use linktrack::server::{App, AppSettings};
use linktrack::store::{self, partitions, PoolSettings, RowFormat};
use linktrack::token::{Opened, Plaintext, Token, TokenSeal};
use rand::seq::SliceRandom;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The binary's allocator (src/main.rs), so the server here allocates as
/// `linktrack serve` does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Clone)]
struct Args {
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    server: String,
    /// The benchmark's database, dropped and loaded anew without
    /// `--reuse`; the server connects as a MariaDB user of the same name,
    /// so its statements are its own. Give concurrent runs their own.
    #[arg(long, default_value = "lt_bench_serve")]
    database: String,
    /// Link rows, spread evenly over `--days` daily partitions.
    #[arg(long, default_value_t = 3_000_000)]
    rows: u64,
    #[arg(long, default_value_t = 30)]
    days: u64,
    /// Concurrent clients: wrk connections and sysbench threads alike.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The server's database connections.
    #[arg(long, default_value_t = 16)]
    pool: u32,
    /// Rounds of (ceiling, redirect, pixel, healthz); figures are medians.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Reuse the database of an earlier run (skip the load).
    #[arg(long)]
    reuse: bool,
    /// With `--reuse`: only this many of its tokens, drawn at random (a
    /// callgrind run needs few, and reads them 50 times slower).
    #[arg(long)]
    sample: Option<u64>,
    /// Row format of the loaded `links` (compressed, dynamic, page-compressed).
    #[arg(long, default_value = "page-compressed")]
    row_format: RowFormat,
    /// Also measure the redirect with a webhook endpoint on, every round.
    #[arg(long)]
    webhooks: bool,
    /// With --webhooks: events per request of each measurement with
    /// webhooks on (1: one request per event; N: type batch).
    #[arg(long, value_delimiter = ',', default_value = "1,100")]
    webhook_batches: Vec<usize>,
    /// The server's link lookups in flight at once (cache misses that
    /// arrive while all are busy share the next statement).
    #[arg(long, default_value_t = linktrack::server::state::ServerSettings::default().lookups_in_flight)]
    in_flight: usize,
    /// Also measure the redirect with this many lookups in flight, every
    /// round, against `--in-flight`.
    #[arg(long)]
    compare_in_flight: Option<usize>,
    /// Set MariaDB's `innodb_buffer_pool_size` to this many MB for the run
    /// (restored at its end) and read all of `links` into it first, as a
    /// server sized for its hot days would hold them. Without it the
    /// lookups of both the ceiling and the redirect read pages from disk.
    #[arg(long, value_name = "MB")]
    buffer_pool_mb: Option<u64>,
    /// Instead of the rounds: one load of `--callgrind-route` of this many
    /// seconds, counted by callgrind (run under `valgrind --tool=callgrind`).
    #[arg(long, value_name = "SECONDS")]
    callgrind: Option<u64>,
    /// With `--callgrind`: the route loaded and counted.
    #[arg(long, value_enum, default_value = "redirect")]
    callgrind_route: Route,
    /// Instead of the rounds: the rollup's pace against the clicks a
    /// `linktrack serve` takes on this many hot letters (hot.rs), each
    /// round on a fresh database.
    #[arg(long, value_name = "LETTERS")]
    hot_letters: Option<u64>,
    /// With `--hot-letters`: links a letter.
    #[arg(long, default_value_t = 10)]
    hot_links: u32,
    /// With `--hot-letters`: serve's `--verdict-settle-secs`.
    #[arg(long, default_value_t = 10)]
    settle_secs: u64,
    /// With `--hot-letters`: seconds to wait after the load for the rollup
    /// to finish; past them its pace is what it rolled by then.
    #[arg(long, default_value_t = 300)]
    hot_wait: u64,
    /// With `--hot-letters`: the `linktrack` binaries served, in turn each
    /// round (default: target/release/linktrack beside this example).
    #[arg(long, value_delimiter = ',')]
    linktrack: Vec<PathBuf>,
}

/// The installation's seal, read at the start (pixel tokens are sealed).
static SEAL: std::sync::OnceLock<TokenSeal> = std::sync::OnceLock::new();

/// The server routes a measurement loads (the rounds' and `--callgrind`'s).
#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum Route {
    Redirect,
    Pixel,
    /// `GET /healthz?{token}`: the pixel's requests (the same wrk script,
    /// user agent and path length), answered without the pixel's work, so
    /// the server's ceiling is measured with the load generator costing
    /// what it costs for the pixel. (Without a script wrk sends one fixed
    /// request, far cheaper for it than a Lua function per request, and on
    /// two shared cores the CPU it saves went to the server.)
    Healthz,
}

impl Route {
    /// Before and after the token in the wrk script's paths.
    fn wrk_path(self) -> (&'static str, &'static str) {
        match self {
            Route::Redirect => ("/c/", ""),
            Route::Pixel => ("/o/", ".gif"),
            Route::Healthz => ("/healthz?", ""),
        }
    }

    /// The route's label in the server's request metrics.
    fn matched_path(self) -> &'static str {
        match self {
            Route::Redirect => "/c/{token}",
            Route::Pixel => "/o/{file}",
            Route::Healthz => "/healthz",
        }
    }

    /// The token this route is asked for with: the pixel answers only a
    /// pixel token (its kind is sealed in it), so a click token's letter
    /// gets one of the same time; the other routes take the click token.
    fn token_for(self, click: Token) -> Token {
        match (self, SEAL.get()) {
            (Route::Pixel, Some(seal)) if click.unix_millis() >= seal.sealed_since_ms() => {
                let plain = match seal.open(&click) {
                    Opened::Sealed(plain) => Plaintext {
                        kind: TokenKind::Pixel.code(),
                        ..plain
                    },
                    Opened::Legacy => Plaintext::issue(TokenKind::Pixel, 0, 0),
                };
                seal.seal(click.created_at(), plain)
            }
            _ => click,
        }
    }

    /// Whether each request names a link to look up: only then must every
    /// token be fresh (`/healthz` ignores its token).
    fn reads_links(self) -> bool {
        self != Route::Healthz
    }
}

/// wrk's threads (the machine has two cores).
const WRK_THREADS: usize = 2;

/// One measurement: throughput, p99 latency (s), statements per request,
/// CPU seconds per request inside MariaDB (the server user's statements,
/// replay included) and in this process (the server: requests and replay),
/// and how long after the load its events were all in the database.
#[derive(Debug, Clone, Copy, Default)]
struct Figure {
    per_second: f64,
    p99: f64,
    statements_per_hit: f64,
    database_cpu_per_hit: f64,
    server_cpu_per_hit: f64,
    /// The part of `server_cpu_per_hit` spent while wrk ran: the request
    /// path, and whatever of the replay got the CPU meanwhile.
    server_cpu_in_load_per_hit: f64,
    /// The load generator's CPU (wrk, or sysbench for the ceiling).
    generator_cpu_per_hit: f64,
    /// The whole `mariadbd` process: its background threads too (page
    /// compression, flushing, purge), which `database_cpu_per_hit` leaves out.
    mariadbd_cpu_per_hit: f64,
    replayed_after: f64,
}

impl Figure {
    /// CPU of every process a hit kept busy on this machine: the load
    /// generator, the server (none for the ceiling) and all of MariaDB.
    fn machine_cpu_per_hit(&self) -> f64 {
        self.generator_cpu_per_hit + self.server_cpu_per_hit + self.mariadbd_cpu_per_hit
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    if std::env::var_os(RECEIVER_PROCESS).is_some() {
        return receiver_process().await;
    }
    let args = Args::parse();
    // What `linktrack serve` logs, so the requests' tracing spans cost
    // here what they cost there.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info,sqlx=warn"))
        .with_writer(std::io::stderr)
        .init();
    for (tool, package) in [("wrk", "wrk"), ("sysbench", "sysbench")] {
        anyhow::ensure!(
            std::process::Command::new(tool)
                .arg("--version")
                .output()
                .is_ok(),
            "{tool} is not installed: apt-get install -y {package}"
        );
    }
    if let Some(letters) = args.hot_letters {
        return hot::hot_rounds(&args, letters).await;
    }
    let dir = tempfile::tempdir()?;
    let url = format!("{}/{}", args.server, args.database);
    let mut tokens = if args.reuse {
        existing_tokens(&url, args.sample).await?
    } else {
        load_links(&args, dir.path()).await?
    };
    tokens.shuffle(&mut rand::rng());
    let pool = sqlx::MySqlPool::connect(&url).await?;
    let _ = SEAL.set(store::link_templates::load_seal(&pool, None).await?);
    pool.close().await;
    let counter = ServerUser::create(&args.server, &args.database).await?;
    println!(
        "# linktrack bench_serve: {} rows in {} daily partitions, {} connections, {} s each, {} rounds",
        tokens.len(),
        args.days,
        args.connections,
        args.seconds,
        args.rounds
    );

    if let Some(seconds) = args.callgrind {
        return callgrind_hits(&args, &counter, dir.path(), &tokens, seconds).await;
    }

    let buffer_pool_before = match args.buffer_pool_mb {
        Some(mb) => Some(warm_buffer_pool(&counter.admin, &args.database, mb).await?),
        None => None,
    };
    let outcome = rounds(&args, &counter, dir.path(), &tokens).await;
    // Restored however the rounds ended: a failed run must not leave the
    // database server with the benchmark's pool size.
    if let Some(bytes) = buffer_pool_before {
        sqlx::query(&format!("SET GLOBAL innodb_buffer_pool_size = {bytes}"))
            .execute(&counter.admin)
            .await?;
    }
    outcome
}

/// The rounds of measurements (see the module docs), then their report.
async fn rounds(
    args: &Args,
    counter: &ServerUser,
    dir: &Path,
    tokens: &[Token],
) -> anyhow::Result<()> {
    let hooked_per_round = if args.webhooks {
        args.webhook_batches.len()
    } else {
        0
    };
    let per_round = 3 + hooked_per_round + usize::from(args.compare_in_flight.is_some());
    let slices: Vec<&[Token]> = tokens
        .chunks(tokens.len().div_ceil(args.rounds * per_round).max(1))
        .collect();
    let receiver = if args.webhooks {
        Some(Receiver::start().await?)
    } else {
        None
    };
    let mut hooked: Vec<Vec<(Figure, Drain)>> = vec![Vec::new(); hooked_per_round];
    let mut compared = Vec::new();
    let mut slices = slices.into_iter();
    let (mut ceilings, mut redirects, mut pixels, mut healths) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        let (Some(a), Some(b), Some(c)) = (slices.next(), slices.next(), slices.next()) else {
            anyhow::bail!("too few tokens for {} rounds", args.rounds);
        };
        let off = Outbound::default();
        ceilings.push(sysbench(args, counter, dir, a).await?);
        redirects.push(serve_load(args, counter, dir, Route::Redirect, b, &off).await?);
        pixels.push(serve_load(args, counter, dir, Route::Pixel, c, &off).await?);
        healths.push(serve_load(args, counter, dir, Route::Healthz, c, &off).await?);
        if let Some(receiver) = &receiver {
            for (batch, figures) in args.webhook_batches.iter().zip(&mut hooked) {
                let Some(d) = slices.next() else {
                    anyhow::bail!("too few tokens for {} rounds", args.rounds);
                };
                figures.push(webhooks_load(args, counter, dir, d, receiver, *batch).await?);
                eprintln!(
                    "  redirect with webhooks, batch {batch}: {:?}",
                    figures.last()
                );
            }
        }
        if let Some(in_flight) = args.compare_in_flight {
            let Some(e) = slices.next() else {
                anyhow::bail!("too few tokens for {} rounds", args.rounds);
            };
            let other = Args {
                in_flight,
                ..args.clone()
            };
            compared.push(serve_load(&other, counter, dir, Route::Redirect, e, &off).await?);
            eprintln!(
                "  redirect with {in_flight} lookups in flight {:?}",
                compared.last()
            );
        }
        eprintln!(
            "round {round}: ceiling {:?}\n  redirect {:?}\n  pixel {:?}\n  healthz {:?}",
            ceilings.last(),
            redirects.last(),
            pixels.last(),
            healths.last()
        );
    }
    report(
        &median(&ceilings),
        &median(&redirects),
        &median(&pixels),
        &median(&healths),
        args.rounds,
    );
    if let Some(in_flight) = args.compare_in_flight {
        report_in_flight(args, in_flight, &median(&redirects), &median(&compared));
    }
    for (batch, figures) in args.webhook_batches.iter().zip(&hooked) {
        report_webhooks(*batch, figures, &median(&redirects), args.seconds);
    }
    Ok(())
}

/// Resize the buffer pool to `mb` and read `links` (rows and token index)
/// into it; returns the size to restore.
async fn warm_buffer_pool(admin: &sqlx::MySqlPool, database: &str, mb: u64) -> anyhow::Result<u64> {
    let before: u64 = sqlx::query_scalar("SELECT CAST(@@innodb_buffer_pool_size AS UNSIGNED)")
        .fetch_one(admin)
        .await?;
    sqlx::query(&format!(
        "SET GLOBAL innodb_buffer_pool_size = {}",
        mb << 20
    ))
    .execute(admin)
    .await?;
    // The resize runs in the background; wait until it reports done.
    for _ in 0..600 {
        let status: Option<(String, String)> =
            sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_resize_status'")
                .fetch_optional(admin)
                .await?;
        let done = status.is_none_or(|(_, text)| text.is_empty() || text.contains("Completed"));
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for sql in [
        format!("SELECT SUM(LENGTH(url)) FROM `{database}`.links"),
        format!("SELECT COUNT(*) FROM `{database}`.links FORCE INDEX (uuid)"),
    ] {
        sqlx::query(&sql).execute(admin).await?;
    }
    eprintln!(
        "buffer pool {mb} MB, links read into it (was {} MB)",
        before >> 20
    );
    Ok(before)
}

/// Create the database with `days` daily partitions and load `rows` links
/// through LOAD DATA; returns every token.
async fn load_links(args: &Args, dir: &Path) -> anyhow::Result<Vec<Token>> {
    let admin = sqlx::MySqlPool::connect(&args.server).await?;
    let database = &args.database;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {database}"))
        .execute(&admin)
        .await?;
    let pool = store::migrate(&format!("{}/{database}", args.server)).await?;
    for line in store::set_row_format(&pool, &store::RowFormatOptions::new(args.row_format)).await?
    {
        println!("{database}: {line}");
    }
    // Tokens sealed as the builder seals them (docs/token.md), so the
    // redirect opens each one before its lookup, as it does in production.
    let seal = store::link_templates::load_seal(&pool, None).await?;
    let today = Utc::now().date_naive();
    let first = today
        .checked_sub_days(Days::new(args.days - 1))
        .unwrap_or(today);
    let policy = partitions::Policy {
        today: first,
        ahead_days: args.days as u32,
        keep_days: None,
    };
    partitions::run(&pool, &policy, &partitions::RunOptions::default()).await?;

    let tsv = dir.join("links.tsv");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tsv)?);
    let per_day = args.rows / args.days;
    let mut tokens = Vec::with_capacity(args.rows as usize);
    let mut n = 0u64;
    for d in 0..args.days {
        let day = first.checked_add_days(Days::new(d)).unwrap_or(first);
        let midnight = day.and_time(NaiveTime::MIN).and_utc();
        for i in 0..per_day {
            let at = midnight + chrono::Duration::milliseconds((i * 86_000_000 / per_day) as i64);
            // Built at least an hour ago: clicks on it are not "too fast".
            let at = at.min(Utc::now() - chrono::Duration::hours(1));
            let token = seal.seal(at, Plaintext::issue(TokenKind::Click, 0, i / 20 + 1));
            tokens.push(token);
            writeln!(
                out,
                "{token}\t{}\tclick\tm{d}\t{}\treader{}@example.com\t{}\thttps://news.example.com/articles/{}?utm_source=newsletter&utm_medium=email",
                token.date(),
                i / 20,
                i / 20,
                i % 20 + 1,
                n % 5000
            )?;
            n += 1;
        }
    }
    out.flush()?;
    drop(out);
    let seconds = mysql_client::load_links_tsv(database, &tsv, "links")?;
    eprintln!("loaded {n} rows in {seconds:.0} s");
    sqlx::query("ANALYZE TABLE links").execute(&pool).await?;
    Ok(tokens)
}

/// The tokens of an already loaded database: all, or a random `sample`.
async fn existing_tokens(url: &str, sample: Option<u64>) -> anyhow::Result<Vec<Token>> {
    let pool = store::connect(url, &PoolSettings::default()).await?;
    let sql = match sample {
        Some(n) => format!("SELECT uuid FROM links ORDER BY RAND() LIMIT {n}"),
        None => "SELECT uuid FROM links".to_owned(),
    };
    let rows: Vec<Vec<u8>> = sqlx::query_scalar(&sql).fetch_all(&pool).await?;
    Ok(rows
        .iter()
        .filter_map(|b| Token::from_bytes(b).ok())
        .collect())
}
