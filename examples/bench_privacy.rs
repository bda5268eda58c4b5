//! What a server pays to hold the tracking opt-out list in memory
//! (docs/privacy.md, docs/benchmarks.md): memory and load time of the
//! privacy view at `--optouts` addresses, and the cost of the check every
//! hit makes, each against a baseline measured in the same run.
//!
//! ```sh
//! cargo run --release --example bench_privacy                       # 1,000,000 opt-outs
//! cargo run --release --example bench_privacy -- --optouts 100000   # quicker
//! ```
//!
//! 1. `LOAD DATA` of `--optouts` addresses into `tracking_optouts` (the
//!    `mysql` client; `local_infile=ON`).
//! 2. Baseline: the `mysql` client reads the same list (`SELECT email`,
//!    output discarded). Then the server's full load (`Privacy::refresh`):
//!    time, the view's heap (from its table's capacity) and the process's
//!    resident memory before and after; and, for comparison, the resident
//!    memory of the addresses themselves in a `HashSet<String>`.
//! 3. The hit-time check: `Privacy::withholds` on fingerprints half of
//!    which are listed, against the same lookups in a `HashSet<u64>` with
//!    the standard library's hasher; and what a cache miss adds once, the
//!    address's fingerprint (HMAC-SHA256).
//!
//! Uses a fresh `lt_bench_privacy_*` database and drops it unless `--keep`.
#![allow(clippy::unwrap_used)] // tests and benchmarks: a failure should stop them loudly

#[path = "support/mysql_client.rs"]
mod mysql_client;

use clap::Parser;
use linktrack::privacy::{Privacy, PrivacySettings, Withheld};
use linktrack::store;
use std::collections::HashSet;
use std::hint::black_box;
use std::io::Write;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// MySQL server, without a database.
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    server: String,
    /// Addresses on the opt-out list.
    #[arg(long, default_value_t = 1_000_000)]
    optouts: u64,
    /// Checks timed (half of them listed addresses).
    #[arg(long, default_value_t = 10_000_000)]
    checks: u64,
    /// Keep the database afterwards.
    #[arg(long)]
    keep: bool,
}

/// The `n`th address of the list.
fn address(n: u64) -> String {
    format!("reader.{n:07}@mail{}.example.com", n % 997)
}

/// The process's resident memory, in bytes (`/proc/self/statm`).
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let name = format!("lt_bench_privacy_{:08x}", rand::random::<u32>());
    let pool = store::migrate(&format!("{}/{name}", args.server)).await?;
    let outcome = run(&args, &name, &pool).await;
    if !args.keep {
        sqlx::query(&format!("DROP DATABASE `{name}`"))
            .execute(&pool)
            .await?;
    }
    outcome
}

async fn run(args: &Args, name: &str, pool: &sqlx::MySqlPool) -> anyhow::Result<()> {
    // 1. The list.
    let tsv = std::env::temp_dir().join(format!("{name}.tsv"));
    {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&tsv)?);
        for n in 0..args.optouts {
            writeln!(file, "{}\tbench", address(n))?;
        }
    }
    let started = Instant::now();
    let sql = format!(
        "LOAD DATA LOCAL INFILE '{}' INTO TABLE tracking_optouts (email, source)",
        tsv.display()
    );
    let status = mysql_client::command(name, &sql).status()?;
    anyhow::ensure!(status.success(), "LOAD DATA failed: {status}");
    let _ = std::fs::remove_file(&tsv);
    println!(
        "loaded {} opt-outs in {:.1} s",
        args.optouts,
        started.elapsed().as_secs_f64()
    );

    // 2. Reading it: the client (baseline), then the server's full load.
    let started = Instant::now();
    let out = mysql_client::command(name, "SELECT email FROM tracking_optouts").output()?;
    anyhow::ensure!(out.status.success(), "the client's read failed");
    let client_secs = started.elapsed().as_secs_f64();
    drop(out);
    let before = resident();
    let privacy = Privacy::new("bench", PrivacySettings::default());
    let started = Instant::now();
    let refreshed = privacy.refresh(pool).await?;
    let load_secs = started.elapsed().as_secs_f64();
    let after = resident();
    anyhow::ensure!(refreshed.full, "a full load");
    anyhow::ensure!(
        privacy.opted_out_len() as u64 == args.optouts,
        "every address in the view"
    );
    let heap = privacy.heap_bytes() as u64;
    let before_strings = resident();
    let strings: HashSet<String> = (0..args.optouts).map(address).collect();
    let after_strings = resident();
    println!(
        "full load: {load_secs:.2} s; the mysql client reading the same list: {client_secs:.2} s ({:.2}x)",
        load_secs / client_secs
    );
    println!(
        "view: {} fingerprints, heap {:.1} MB ({:.1} bytes per address), resident +{:.1} MB; \
         the addresses themselves in a HashSet<String>: resident +{:.1} MB ({:.2}x the view)",
        privacy.opted_out_len(),
        mb(heap),
        heap as f64 / args.optouts as f64,
        mb(after.saturating_sub(before)),
        mb(after_strings.saturating_sub(before_strings)),
        after_strings.saturating_sub(before_strings) as f64 / heap as f64
    );
    drop(strings);

    // 3. The check on the hot path.
    let key = privacy.key().unwrap().clone();
    let probes: Vec<u64> = (0..1_000_000u64)
        .map(|n| {
            key.fingerprint(&address(if n % 2 == 0 {
                n % args.optouts
            } else {
                args.optouts + n
            }))
        })
        .collect();
    let now = chrono::Utc::now();
    let started = Instant::now();
    let mut withheld = 0u64;
    for n in 0..args.checks {
        let fingerprint = probes[(n % probes.len() as u64) as usize];
        if black_box(privacy.withholds(black_box(fingerprint), now)) != Withheld::No {
            withheld += 1;
        }
    }
    let check_ns = started.elapsed().as_nanos() as f64 / args.checks as f64;
    let mut plain: HashSet<u64> = HashSet::new();
    for n in 0..args.optouts {
        plain.insert(key.fingerprint(&address(n)));
    }
    let started = Instant::now();
    let mut found = 0u64;
    for n in 0..args.checks {
        let fingerprint = probes[(n % probes.len() as u64) as usize];
        if black_box(&plain).contains(&black_box(fingerprint)) {
            found += 1;
        }
    }
    let plain_ns = started.elapsed().as_nanos() as f64 / args.checks as f64;
    anyhow::ensure!(
        withheld == found,
        "the same answers ({withheld} and {found})"
    );
    let started = Instant::now();
    for n in 0..100_000u64 {
        black_box(key.fingerprint(black_box(&address(n))));
    }
    let fingerprint_ns = started.elapsed().as_nanos() as f64 / 100_000.0;
    println!(
        "check per hit: {check_ns:.0} ns (read lock + two lookups); a HashSet<u64> with the std hasher: \
         {plain_ns:.0} ns ({:.2}x); a cache miss adds the address's fingerprint once: {fingerprint_ns:.0} ns",
        check_ns / plain_ns
    );
    Ok(())
}
