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

#[path = "support/mysql_client.rs"]
mod mysql_client;
#[path = "support/process_cpu.rs"]
mod process_cpu;
use process_cpu::{mariadbd_stat, ProcessCpu};

use chrono::{Days, NaiveTime, Utc};
use clap::Parser;
use linktrack::events::journal::JournalSettings;
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

/// The redirect with `--compare-in-flight` lookups in flight against `--in-flight`.
fn report_in_flight(args: &Args, in_flight: usize, base: &Figure, other: &Figure) {
    println!(
        "redirect, {in_flight} lookups in flight        {:>9.0} req/s      p99 {:>7.2} ms   {:.3} statements/hit",
        other.per_second,
        other.p99 * 1e3,
        other.statements_per_hit
    );
    println!(
        "{in_flight} / {} lookups in flight, req/s     {:.2}   p99 {:.2}",
        args.in_flight,
        other.per_second / base.per_second,
        other.p99 / base.p99
    );
    println!(
        "  CPU per redirect (µs): database {:.1} against {:.1}, server {:.1} against {:.1}",
        other.database_cpu_per_hit * 1e6,
        base.database_cpu_per_hit * 1e6,
        other.server_cpu_per_hit * 1e6,
        base.server_cpu_per_hit * 1e6
    );
}

fn report(ceiling: &Figure, redirect: &Figure, pixel: &Figure, health: &Figure, rounds: usize) {
    let ms = |s: f64| s * 1e3;
    println!("\nmedians of {rounds} rounds");
    println!(
        "ceiling: the lookup by sysbench        {:>9.0} queries/s  p99 {:>7.2} ms",
        ceiling.per_second,
        ms(ceiling.p99)
    );
    for (name, f) in [
        ("redirect GET /c/{token}", redirect),
        ("pixel GET /o/{token}.gif", pixel),
        ("GET /healthz", health),
    ] {
        println!(
            "{name:<38} {:>9.0} req/s      p99 {:>7.2} ms   {:.3} statements/hit",
            f.per_second,
            ms(f.p99),
            f.statements_per_hit
        );
    }
    println!(
        "\nredirect req/s / ceiling queries/s   {:.2}   (aim >= 1.0)",
        redirect.per_second / ceiling.per_second
    );
    println!(
        "redirect p99 / ceiling p99           {:.2}   (aim <= 1.5)",
        redirect.p99 / ceiling.p99
    );
    println!(
        "pixel req/s / healthz req/s          {:.2}   (aim >= 0.7)",
        pixel.per_second / health.per_second
    );
    println!(
        "statements per click                 {:.3}  (aim <= 0.6)",
        redirect.statements_per_hit
    );
    println!(
        "statements per open                  {:.3}  (aim <= 0.12)",
        pixel.statements_per_hit
    );
    report_cpu(ceiling, redirect, pixel, health);
}

/// Where each hit's CPU went, and the two capacity ratios that hold when
/// the database and the server have machines of their own (here they share
/// two cores with each other and with the load generators, so the req/s
/// ratios above also measure who got the CPU).
fn report_cpu(ceiling: &Figure, redirect: &Figure, pixel: &Figure, health: &Figure) {
    let us = |s: f64| s * 1e6;
    println!(
        "\nCPU per hit (µs)                       database   server   (in the load, after it)   events replayed after the load"
    );
    println!(
        "ceiling: the lookup by sysbench        {:>8.1}        -",
        us(ceiling.database_cpu_per_hit)
    );
    for (name, f) in [
        ("redirect (lookup, journal, replay)", redirect),
        ("pixel (journal, replay)", pixel),
        ("healthz", health),
    ] {
        println!(
            "{name:<38} {:>8.1} {:>8.1}   ({:>5.1}, {:>5.1})             {:.1} s",
            us(f.database_cpu_per_hit),
            us(f.server_cpu_per_hit),
            us(f.server_cpu_in_load_per_hit),
            us(f.server_cpu_per_hit - f.server_cpu_in_load_per_hit),
            f.replayed_after
        );
    }
    println!(
        "\nredirects / ceiling lookups per database CPU second   {:.2}   (aim >= 1.0 where the database is the limit)",
        ceiling.database_cpu_per_hit / redirect.database_cpu_per_hit
    );
    println!(
        "pixels / healthz per server CPU second                {:.2}   (aim >= 0.7 where the server is the limit)",
        health.server_cpu_per_hit / pixel.server_cpu_per_hit
    );
    report_machine_cpu(ceiling, redirect, pixel, health);
}

/// The CPU every process on this machine spent per hit, and the req/s
/// ratios that CPU allows where all of them share the machine's cores
/// (as wrk, the server and MariaDB do here): a ratio of the CPU each hit
/// costs the whole machine. The last line bounds the redirect's ratio
/// from above: a redirect that cost the generator and the server no more
/// than `/healthz` does, and MariaDB what it costs now.
fn report_machine_cpu(ceiling: &Figure, redirect: &Figure, pixel: &Figure, health: &Figure) {
    let us = |s: f64| s * 1e6;
    println!(
        "\nCPU per hit on this machine (µs)       generator   server   mariadbd (all threads)   in all"
    );
    for (name, f) in [
        ("ceiling (sysbench)", ceiling),
        ("redirect (wrk)", redirect),
        ("pixel (wrk)", pixel),
        ("healthz (wrk)", health),
    ] {
        println!(
            "{name:<38} {:>9.1} {:>8.1} {:>12.1}             {:>8.1}",
            us(f.generator_cpu_per_hit),
            us(f.server_cpu_per_hit),
            us(f.mariadbd_cpu_per_hit),
            us(f.machine_cpu_per_hit())
        );
    }
    println!(
        "\nwhere the machine's CPU is the limit: redirect / ceiling {:.2}, pixel / healthz {:.2}",
        ceiling.machine_cpu_per_hit() / redirect.machine_cpu_per_hit(),
        health.machine_cpu_per_hit() / pixel.machine_cpu_per_hit()
    );
    let leanest_redirect =
        health.generator_cpu_per_hit + health.server_cpu_per_hit + redirect.mariadbd_cpu_per_hit;
    println!(
        "  and were a redirect's HTTP work as cheap as /healthz's: redirect / ceiling {:.2}",
        ceiling.machine_cpu_per_hit() / leanest_redirect
    );
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

/// The server's own MariaDB user, its statements counted by the server.
struct ServerUser {
    admin: sqlx::MySqlPool,
    url: String,
    /// Named as the database.
    name: String,
    /// `/proc/{pid}/stat` of the `mariadbd` process, when it runs on this
    /// machine (its pid file is readable here).
    mariadbd_stat: Option<PathBuf>,
}

impl ServerUser {
    async fn create(server: &str, database: &str) -> anyhow::Result<ServerUser> {
        let admin = sqlx::MySqlPool::connect(server).await?;
        for sql in [
            "SET GLOBAL userstat = 1".to_owned(),
            format!("CREATE USER IF NOT EXISTS '{database}'@'%'"),
            format!("GRANT ALL ON `{database}`.* TO '{database}'@'%'"),
        ] {
            sqlx::query(&sql).execute(&admin).await?;
        }
        let host = server
            .strip_prefix("mysql://")
            .and_then(|rest| rest.split_once('@').map(|(_, host)| host))
            .unwrap_or("127.0.0.1:3306");
        let url = format!("mysql://{database}@{host}/{database}");
        let mariadbd_stat = mariadbd_stat(&admin).await;
        if mariadbd_stat.is_none() {
            eprintln!("note: MariaDB's process is not on this machine: its CPU is not counted");
        }
        Ok(ServerUser {
            admin,
            url,
            name: database.to_owned(),
            mariadbd_stat,
        })
    }

    /// CPU seconds the whole `mariadbd` process has used so far (0 when it
    /// is not on this machine).
    fn mariadbd_cpu(&self) -> anyhow::Result<f64> {
        match &self.mariadbd_stat {
            Some(stat) => Ok(ProcessCpu::read(stat)?.own),
            None => Ok(0.0),
        }
    }

    /// CPU seconds MariaDB has spent on the user's statements so far
    /// (`USER_STATISTICS.CPU_TIME`): other users of the database server,
    /// such as a test suite running beside the benchmark, are not counted.
    async fn cpu(&self) -> anyhow::Result<f64> {
        let seconds: Option<f64> = sqlx::query_scalar(
            "SELECT CAST(CPU_TIME AS DOUBLE) FROM information_schema.USER_STATISTICS WHERE USER = ?",
        )
        .bind(&self.name)
        .fetch_optional(&self.admin)
        .await?;
        Ok(seconds.unwrap_or(0.0))
    }

    /// Every statement the server's user has run so far.
    async fn statements(&self) -> anyhow::Result<f64> {
        let total: Option<i64> = sqlx::query_scalar(
            "SELECT CAST(SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS AS SIGNED) \
             FROM information_schema.USER_STATISTICS WHERE USER = ?",
        )
        .bind(&self.name)
        .fetch_optional(&self.admin)
        .await?;
        Ok(total.unwrap_or(0) as f64)
    }
}

/// The ceiling: sysbench's C client runs the redirect's lookup as a
/// prepared statement over `tokens` (each thread its share, each token once).
async fn sysbench(
    args: &Args,
    counter: &ServerUser,
    dir: &Path,
    tokens: &[Token],
) -> anyhow::Result<Figure> {
    let share_dir = dir.join("sysbench-tokens");
    let _ = std::fs::remove_dir_all(&share_dir);
    std::fs::create_dir_all(&share_dir)?;
    let mut shares: Vec<_> = (0..args.connections)
        .map(|t| {
            std::fs::File::create(share_dir.join(format!("{t}.txt"))).map(std::io::BufWriter::new)
        })
        .collect::<Result<_, _>>()?;
    for (n, token) in tokens.iter().enumerate() {
        writeln!(shares[n % args.connections], "{token} {}", token.date())?;
    }
    for share in &mut shares {
        share.flush()?;
    }
    let script = dir.join("lookup.lua");
    std::fs::write(&script, SYSBENCH_SCRIPT)?;
    let cpu_before = counter.cpu().await?;
    let (mariadbd_before, reaped_before) = (counter.mariadbd_cpu()?, ProcessCpu::this()?.children);
    let output = tokio::process::Command::new("sysbench")
        .args([
            "--db-driver=mysql",
            "--mysql-host=127.0.0.1",
            "--mysql-port=3306",
            // As the server's user, so USER_STATISTICS counts its CPU alike.
            &format!("--mysql-user={}", args.database),
            &format!("--mysql-db={}", args.database),
            &format!("--threads={}", args.connections),
            &format!("--time={}", args.seconds),
            "--percentile=99",
        ])
        .arg(&script)
        .arg("run")
        .env("LT_TOKENS_DIR", &share_dir)
        .output()
        .await?;
    let database_cpu = counter.cpu().await? - cpu_before;
    let mariadbd_cpu = counter.mariadbd_cpu()? - mariadbd_before;
    let sysbench_cpu = ProcessCpu::this()?.children - reaped_before;
    let text = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "sysbench failed:\n{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let queries_line = text
        .lines()
        .find(|l| l.trim_start().starts_with("queries:"))
        .ok_or_else(|| anyhow::anyhow!("no queries line in sysbench output:\n{text}"))?;
    let requests = queries_line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("unreadable: {queries_line}"))?;
    let per_second = queries_line
        .split('(')
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("unreadable: {queries_line}"))?;
    let p99_ms = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99th percentile:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("no 99th percentile in sysbench output:\n{text}"))?;
    if requests > tokens.len() as f64 {
        eprintln!("note: sysbench asked for more lookups than its slice has tokens");
    }
    Ok(Figure {
        per_second,
        p99: p99_ms / 1e3,
        statements_per_hit: 1.0,
        database_cpu_per_hit: database_cpu / requests.max(1.0),
        generator_cpu_per_hit: sysbench_cpu / requests.max(1.0),
        mariadbd_cpu_per_hit: mariadbd_cpu / requests.max(1.0),
        ..Figure::default()
    })
}

/// sysbench's script: thread `tid` walks its own token file once.
const SYSBENCH_SCRIPT: &str = r#"
function thread_init()
  drv = sysbench.sql.driver()
  con = drv:connect()
  tokens = {}
  for line in io.lines(os.getenv("LT_TOKENS_DIR") .. "/" .. sysbench.tid .. ".txt") do
    local hex, day = line:match("(%x+) (%S+)")
    tokens[#tokens + 1] = { hex, day }
  end
  next_token = 1
  stmt = con:prepare("SELECT id, CAST(kind AS CHAR), mailing_id, letter_id, email, position, url " ..
                     "FROM links WHERE uuid = UNHEX(?) AND inserted = ?")
  uuid = stmt:bind_create(sysbench.sql.type.VARCHAR, 32)
  day = stmt:bind_create(sysbench.sql.type.VARCHAR, 10)
  stmt:bind_param(uuid, day)
end

function event()
  local token = tokens[next_token]
  next_token = next_token % #tokens + 1
  uuid:set(token[1])
  day:set(token[2])
  stmt:execute()
end

function thread_done()
  stmt:close()
  con:disconnect()
end
"#;

/// The user agent of every request: a reader's browser, so each hit goes
/// through all of the bot checks (wrk sends none, which is a bot at once).
const BROWSER: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";

/// A wrk script (in `dir`, returned) asking for `route` with `tokens`,
/// each once: thread `t` of `WRK_THREADS` takes every `WRK_THREADS`-th
/// token from the `t`-th on.
fn write_wrk_script(dir: &Path, route: Route, tokens: &[Token]) -> anyhow::Result<PathBuf> {
    let (prefix, suffix) = route.wrk_path();
    let path = dir.join("load.lua");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
    writeln!(out, "tokens = {{")?;
    for token in tokens {
        writeln!(out, "\"{}\",", route.token_for(*token))?;
    }
    writeln!(
        out,
        r#"}}
local threads = 0
function setup(thread) thread:set("n", threads); threads = threads + 1 end
wrk.headers["User-Agent"] = "{BROWSER}"
function request()
  n = n + {WRK_THREADS}
  return wrk.format("GET", "{prefix}" .. tokens[n % #tokens + 1] .. "{suffix}")
end"#
    )?;
    out.flush()?;
    Ok(path)
}

/// Start a new server, load it with wrk, stop it (its events replayed);
/// the figure counts the server user's statements over all of that.
async fn serve_load(
    args: &Args,
    counter: &ServerUser,
    dir: &Path,
    route: Route,
    tokens: &[Token],
    outbound: &Outbound,
) -> anyhow::Result<Figure> {
    let measured = serve_load_with(args, counter, dir, route, tokens, outbound, None).await?;
    Ok(measured.0)
}

/// [`serve_load`], and with a receiver: how the sender drained (the server
/// runs until the receiver has every event of the load, or [`DRAIN_LIMIT`]).
async fn serve_load_with(
    args: &Args,
    counter: &ServerUser,
    dir: &Path,
    route: Route,
    tokens: &[Token],
    outbound: &Outbound,
    receiver: Option<&Receiver>,
) -> anyhow::Result<(Figure, Option<Drain>)> {
    let script = write_wrk_script(dir, route, tokens)?;
    let server = BenchServer::start(args, counter, dir, outbound).await?;
    let before = counter.statements().await?;
    let delivered_before = match receiver {
        Some(receiver) => receiver.delivered().await?,
        None => 0,
    };
    let (database_cpu, mariadbd_cpu) = (counter.cpu().await?, counter.mariadbd_cpu()?);
    let before_load = ProcessCpu::this()?;
    let output = wrk(args, args.seconds, &script, server.addr).await?;
    let after_load = ProcessCpu::this()?;
    let text = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(!text.contains("Non-2xx or 3xx"), "wrk saw errors:\n{text}");
    let (per_second, p99, requests) = wrk_figures(&text)?;
    let replayed_after = wait_replayed(&server.journal).await?;
    let database_cpu = counter.cpu().await? - database_cpu;
    let mariadbd_cpu = counter.mariadbd_cpu()? - mariadbd_cpu;
    let server_cpu = ProcessCpu::this()?.own - before_load.own;
    let server_cpu_in_load = after_load.own - before_load.own;
    // wrk is the only child reaped while it ran (the webhook receiver is
    // reaped when the run ends).
    let wrk_cpu = after_load.children - before_load.children;
    let drain = match receiver {
        Some(receiver) => Some(receiver.drain(delivered_before, requests as u64).await?),
        None => None,
    };
    server.stop().await;
    let statements = counter.statements().await? - before;
    if route.reads_links() && requests > tokens.len() as f64 {
        eprintln!("note: wrk asked for more than its slice's tokens: some were asked twice");
    }
    let hits = requests.max(1.0);
    let figure = Figure {
        per_second,
        p99,
        statements_per_hit: statements / hits,
        database_cpu_per_hit: database_cpu / hits,
        server_cpu_per_hit: server_cpu / hits,
        server_cpu_in_load_per_hit: server_cpu_in_load / hits,
        generator_cpu_per_hit: wrk_cpu / hits,
        mariadbd_cpu_per_hit: mariadbd_cpu / hits,
        replayed_after,
    };
    Ok((figure, drain))
}

/// The longest wait for a load's events to be replayed into the database.
const REPLAY_LIMIT: Duration = Duration::from_secs(600);

/// Wait until the journal directory holds no segment (every event of the
/// load is in the database); returns the seconds that took. Measuring up
/// to here charges the replay to the load that caused it, and the next
/// measurement starts without a backlog.
async fn wait_replayed(journal: &Path) -> anyhow::Result<f64> {
    let start = std::time::Instant::now();
    loop {
        if linktrack::events::journal::unreplayed_segments(journal)?.is_empty() {
            return Ok(start.elapsed().as_secs_f64());
        }
        if start.elapsed() > REPLAY_LIMIT {
            eprintln!("note: the journal was not replayed within {REPLAY_LIMIT:?}");
            return Ok(start.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A new server on the server user's own pool, running on a task.
struct BenchServer {
    addr: std::net::SocketAddr,
    /// Its own journal directory, so no measurement replays another's events.
    journal: std::path::PathBuf,
    admin: Option<std::net::SocketAddr>,
    pool: sqlx::MySqlPool,
    stop: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<Result<(), linktrack::server::ServeError>>,
}

impl BenchServer {
    async fn start(
        args: &Args,
        counter: &ServerUser,
        dir: &Path,
        outbound: &Outbound,
    ) -> anyhow::Result<BenchServer> {
        let settings = PoolSettings {
            max_connections: args.pool,
            acquire_timeout: Duration::from_secs(5),
        };
        let pool = store::connect(&counter.url, &settings).await?;
        static SERVERS: AtomicU64 = AtomicU64::new(0);
        let journal = dir.join(format!(
            "journal-{}",
            SERVERS.fetch_add(1, Ordering::Relaxed)
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let mut settings = AppSettings {
            outbound: outbound.clone(),
            ..AppSettings::new(pool.clone(), JournalSettings::new(&journal))
        };
        settings.server.lookups_in_flight = args.in_flight;
        let server = App::build(settings, listener).await?;
        let addr = server.local_addr()?;
        let admin = server.admin_addr();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        Ok(BenchServer {
            addr,
            journal,
            admin,
            pool,
            stop,
            running,
        })
    }

    /// Stop serving and wait until the journal is replayed.
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.running.await;
        self.pool.close().await;
    }
}

/// Run wrk for `seconds` on `addr`, asking for `script`'s paths.
async fn wrk(
    args: &Args,
    seconds: u64,
    script: &Path,
    addr: std::net::SocketAddr,
) -> anyhow::Result<std::process::Output> {
    let mut wrk = tokio::process::Command::new("wrk");
    wrk.args([
        &format!("-t{WRK_THREADS}"),
        &format!("-c{}", args.connections),
        &format!("-d{seconds}s"),
        "--timeout",
        "30s",
        "--latency",
    ]);
    wrk.arg("-s").arg(script);
    Ok(wrk.arg(format!("http://{addr}/")).output().await?)
}

/// Instructions per hit of `--callgrind-route` (see the module docs): zero
/// callgrind's counters, load the route for `seconds`, dump them, wait for
/// the load's events to be replayed, dump again, and divide each dump's
/// total by the hits the server counted.
async fn callgrind_hits(
    args: &Args,
    counter: &ServerUser,
    dir: &Path,
    tokens: &[Token],
    seconds: u64,
) -> anyhow::Result<()> {
    let route = args.callgrind_route;
    let script = write_wrk_script(dir, route, tokens)?;
    let server = BenchServer::start(args, counter, dir, &Outbound::default()).await?;
    let admin = server
        .admin
        .ok_or_else(|| anyhow::anyhow!("the server has no admin listener"))?;
    let before = hits_served(admin, route).await?;
    callgrind_control("-z")?;
    let output = wrk(args, seconds, &script, server.addr).await?;
    let dumped = callgrind_control("-d")?;
    let in_load = dumped_instructions()?;
    let hits = hits_served(admin, route).await? - before;
    wait_replayed(&server.journal).await?;
    callgrind_control("-d")?;
    let in_replay = dumped_instructions()?;
    server.stop().await;
    eprintln!("{}", String::from_utf8_lossy(&output.stdout));
    let per_hit = |instructions: u64| instructions as f64 / hits.max(1) as f64;
    println!(
        "callgrind: {} hits of {} ({} connections): {:.0} instructions per hit \
         in the load ({in_load} in all), {:.0} more in its replay ({in_replay})\n{dumped}",
        hits,
        route.matched_path(),
        args.connections,
        per_hit(in_load),
        per_hit(in_replay),
    );
    Ok(())
}

/// Run `callgrind_control OPTION` on this process.
fn callgrind_control(option: &str) -> anyhow::Result<String> {
    let output = std::process::Command::new("callgrind_control")
        .arg(option)
        .arg(std::process::id().to_string())
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    anyhow::ensure!(
        output.status.success() && !text.contains("Error"),
        "callgrind_control {option} failed (is this process running under \
         valgrind --tool=callgrind?):\n{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(text.trim().to_owned())
}

/// The instruction total of this process's newest callgrind dump.
fn dumped_instructions() -> anyhow::Result<u64> {
    let prefix = format!("callgrind.out.{}.", std::process::id());
    let newest = std::fs::read_dir(".")?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .ok_or_else(|| anyhow::anyhow!("no {prefix}* in the working directory"))?;
    let text = std::fs::read_to_string(newest.path())?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no summary line in {}", newest.path().display()))
}

/// Requests of `route` the server has answered so far, by its `/metrics`.
async fn hits_served(admin: std::net::SocketAddr, route: Route) -> anyhow::Result<u64> {
    let text = reqwest::get(format!("http://{admin}/metrics"))
        .await?
        .text()
        .await?;
    let label = format!(r#"route="{}""#, route.matched_path());
    Ok(text
        .lines()
        .filter(|l| l.starts_with("linktrack_http_requests_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

/// Requests/s, p99 (s) and requests of wrk's output.
fn wrk_figures(text: &str) -> anyhow::Result<(f64, f64, f64)> {
    let per_second = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("no Requests/sec in wrk output:\n{text}"))?;
    let p99 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%"))
        .and_then(|v| seconds(v.trim()))
        .ok_or_else(|| anyhow::anyhow!("no 99% latency in wrk output:\n{text}"))?;
    let requests = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("no request count in wrk output:\n{text}"))?;
    Ok((per_second, p99, requests))
}

/// The median of each field over rounds.
fn median(rounds: &[Figure]) -> Figure {
    let median = |field: fn(&Figure) -> f64| {
        let mut values: Vec<f64> = rounds.iter().map(field).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
    };
    Figure {
        per_second: median(|f| f.per_second),
        p99: median(|f| f.p99),
        statements_per_hit: median(|f| f.statements_per_hit),
        database_cpu_per_hit: median(|f| f.database_cpu_per_hit),
        server_cpu_per_hit: median(|f| f.server_cpu_per_hit),
        server_cpu_in_load_per_hit: median(|f| f.server_cpu_in_load_per_hit),
        generator_cpu_per_hit: median(|f| f.generator_cpu_per_hit),
        mariadbd_cpu_per_hit: median(|f| f.mariadbd_cpu_per_hit),
        replayed_after: median(|f| f.replayed_after),
    }
}

/// wrk's durations: `812.00us`, `3.45ms`, `1.02s`.
fn seconds(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    match unit {
        "us" => Some(value / 1e6),
        "ms" => Some(value / 1e3),
        "s" => Some(value),
        "m" => Some(value * 60.0),
        _ => None,
    }
}

// ---- Events out (issue 9): the redirect with webhooks on ----

/// Set in the environment of the receiver process (this binary again).
const RECEIVER_PROCESS: &str = "LT_BENCH_WEBHOOK_RECEIVER";

/// What the sender did in one measurement with webhooks on.
#[derive(Debug, Clone, Copy)]
struct Drain {
    /// Events the receiver got while the load ran.
    during_load: u64,
    /// Events still to deliver when the load ended.
    queued_at_end: u64,
    /// From the end of the load until the receiver had every event.
    seconds: f64,
    /// False when it had not after [`DRAIN_LIMIT`].
    drained: bool,
}

/// The longest wait for the queue to drain after a load.
const DRAIN_LIMIT: Duration = Duration::from_secs(180);

/// The redirect with an endpoint of `batch` events per request on: a clean
/// outbox, then [`serve_load_with`] the receiver.
async fn webhooks_load(
    args: &Args,
    counter: &ServerUser,
    dir: &Path,
    tokens: &[Token],
    receiver: &Receiver,
    batch: usize,
) -> anyhow::Result<(Figure, Drain)> {
    let admin = sqlx::MySqlPool::connect(&format!("{}/{}", args.server, args.database)).await?;
    sqlx::query("DELETE FROM outbox").execute(&admin).await?;
    admin.close().await;
    let outbound = Outbound::new(vec![receiver.endpoint(batch)?], RetryPolicy::default());
    let (figure, drain) = serve_load_with(
        args,
        counter,
        dir,
        Route::Redirect,
        tokens,
        &outbound,
        Some(receiver),
    )
    .await?;
    let drain = drain.ok_or_else(|| anyhow::anyhow!("no drain figures"))?;
    Ok((figure, drain))
}

fn report_webhooks(batch: usize, rounds: &[(Figure, Drain)], off: &Figure, seconds: u64) {
    let on = median(&rounds.iter().map(|(f, _)| *f).collect::<Vec<_>>());
    let per_round: Vec<String> = rounds
        .iter()
        .map(|(f, _)| format!("{:.2}", f.per_second / off.per_second))
        .collect();
    let middle = |field: fn(&Drain) -> f64| {
        let mut values: Vec<f64> = rounds.iter().map(|(_, d)| field(d)).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!(
        "\nwebhooks on, {batch} event(s) per request: redirect {:.0} req/s, p99 {:.2} ms, {:.3} statements/hit",
        on.per_second,
        on.p99 * 1e3,
        on.statements_per_hit
    );
    println!(
        "  redirect webhooks on / off, req/s  {:.2}   (aim >= 0.95; rounds {})",
        on.per_second / off.per_second,
        per_round.join(", ")
    );
    println!(
        "  events sent during the load        {:.0}/s; queued at its end {:.0}; drained in {:.1} s{}",
        middle(|d| d.during_load as f64) / seconds as f64,
        middle(|d| d.queued_at_end as f64),
        middle(|d| d.seconds),
        if rounds.iter().all(|(_, d)| d.drained) {
            ""
        } else {
            " (some rounds did not drain within the limit)"
        }
    );
}

/// The receiver process: its address, and a client to read its count.
struct Receiver {
    addr: SocketAddr,
    http: reqwest::Client,
    _child: tokio::process::Child,
}

impl Receiver {
    /// This binary again, as a receiver, at nice 19; it prints its address.
    async fn start() -> anyhow::Result<Receiver> {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new("nice")
            .args(["-n", "19"])
            .arg(std::env::current_exe()?)
            .env(RECEIVER_PROCESS, "1")
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("the receiver has no stdout"))?;
        let mut line = String::new();
        tokio::io::BufReader::new(stdout)
            .read_line(&mut line)
            .await?;
        let addr = line.trim().parse()?;
        Ok(Receiver {
            addr,
            http: reqwest::Client::new(),
            _child: child,
        })
    }

    fn endpoint(&self, batch: usize) -> anyhow::Result<Endpoint> {
        Ok(Endpoint {
            name: format!("bench-{batch}"),
            target: Target::Webhook {
                url: format!("http://{}/hook", self.addr).parse()?,
                secret: Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?,
            },
            types: None,
            mailings: None,
            concurrency: 8,
            timeout: Duration::from_secs(10),
            batch,
        })
    }

    /// Events received so far.
    async fn delivered(&self) -> anyhow::Result<u64> {
        let url = format!("http://{}/count", self.addr);
        Ok(self
            .http
            .get(url)
            .send()
            .await?
            .text()
            .await?
            .trim()
            .parse()?)
    }

    /// Wait until `events` more than `before` arrived (or [`DRAIN_LIMIT`]).
    async fn drain(&self, before: u64, events: u64) -> anyhow::Result<Drain> {
        let end = std::time::Instant::now();
        let during_load = self.delivered().await?.saturating_sub(before);
        let mut received = during_load;
        while received < events && end.elapsed() < DRAIN_LIMIT {
            tokio::time::sleep(Duration::from_millis(100)).await;
            received = self.delivered().await?.saturating_sub(before);
        }
        Ok(Drain {
            during_load,
            queued_at_end: events.saturating_sub(during_load),
            seconds: end.elapsed().as_secs_f64(),
            drained: received >= events,
        })
    }
}

/// The receiver: counts the events of every POST (one, or a batch's
/// `data` array, by their `event_id` fields) and answers 204; `GET /count`.
async fn receiver_process() -> anyhow::Result<()> {
    let events = Arc::new(AtomicU64::new(0));
    let counted = events.clone();
    let app = axum::Router::new()
        .route(
            "/hook",
            axum::routing::post(move |body: axum::body::Bytes| {
                let counted = counted.clone();
                async move {
                    let n = String::from_utf8_lossy(&body)
                        .matches("\"event_id\"")
                        .count();
                    counted.fetch_add(n as u64, Ordering::Relaxed);
                    axum::http::StatusCode::NO_CONTENT
                }
            }),
        )
        .route(
            "/count",
            axum::routing::get(move || {
                let events = events.clone();
                async move { events.load(Ordering::Relaxed).to_string() }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", listener.local_addr()?);
    std::io::stdout().flush()?;
    axum::serve(listener, app).await?;
    Ok(())
}
