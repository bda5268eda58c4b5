//! Load benchmark of the redirect, against the raw point-select it is built on.
//!
//! ```sh
//! apt-get install -y wrk
//! cargo run --release --example bench_serve                  # 10M links in 30 daily partitions (~10 min)
//! cargo run --release --example bench_serve -- --rows 1000000 --seconds 10
//! ```
//!
//! In one run, on loopback, at `--connections` (64) concurrent clients:
//!
//! 1. **Ceiling**: the redirect's own lookup (`WHERE uuid = ? AND inserted = ?`)
//!    issued by a plain sqlx client with the server's pool size; queries/s
//!    and p99.
//! 2. **Redirect**: `GET /c/{token}` through the whole server (parse, lookup,
//!    journal append, 302) with wrk; req/s and p99. The link cache is kept
//!    tiny so almost every request reads the database, as the ceiling does.
//! 3. **Recording off**: the same with event recording switched off, to show
//!    what journaling every hit costs.
//!
//! Tokens are drawn uniformly from a sample spread over all partitions.
#![allow(clippy::unwrap_used)] // tests and benchmarks: a failure should stop them loudly

#[path = "support/mysql_client.rs"]
mod mysql_client;

use chrono::{Days, NaiveTime, Utc};
use clap::Parser;
use linktrack::events::journal::JournalSettings;
use linktrack::server::state::ServerSettings;
use linktrack::server::{App, AppSettings};
use linktrack::store::{self, links, partitions, PoolSettings, RowFormat};
use linktrack::token::Token;
use rand::seq::IndexedRandom;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    server: String,
    /// Link rows, spread evenly over `--days` daily partitions.
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    #[arg(long, default_value_t = 30)]
    days: u64,
    /// Tokens the load picks from.
    #[arg(long, default_value_t = 100_000)]
    sample: usize,
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Database connections, for the server and the ceiling client alike.
    #[arg(long, default_value_t = 16)]
    pool: u32,
    /// Rounds of (ceiling, recorded, off); figures are medians.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Reuse the database of an earlier run (skip the load).
    #[arg(long)]
    reuse: bool,
    /// Row format of the loaded `links` (compressed, dynamic, page-compressed).
    #[arg(long, default_value = "compressed")]
    row_format: RowFormat,
    /// Also load a second database in this format and measure the redirect
    /// on it in every round: the ratio of the two formats, in one run.
    #[arg(long)]
    compare_format: Option<RowFormat>,
}

const DATABASE: &str = "lt_bench_serve";

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        std::process::Command::new("wrk")
            .arg("--version")
            .output()
            .is_ok(),
        "wrk is not installed: apt-get install -y wrk"
    );
    let dir = tempfile::tempdir()?;
    let url = format!("{}/{DATABASE}", args.server);
    let sample = if args.reuse {
        existing_sample(&url, args.sample).await?
    } else {
        load_links(&args, DATABASE, dir.path(), args.row_format).await?
    };
    let compare = match args.compare_format {
        Some(format) => {
            let name = format!("{DATABASE}_compare");
            let compare_dir = dir.path().join("compare");
            std::fs::create_dir_all(&compare_dir)?;
            let sample = if args.reuse {
                existing_sample(&format!("{}/{name}", args.server), args.sample).await?
            } else {
                load_links(&args, &name, &compare_dir, format).await?
            };
            let settings = PoolSettings {
                max_connections: args.pool,
                acquire_timeout: Duration::from_secs(5),
            };
            let pool = store::connect(&format!("{}/{name}", args.server), &settings).await?;
            let script = write_wrk_script(&compare_dir, &sample)?;
            Some((format, pool, script, compare_dir))
        }
        None => None,
    };
    println!(
        "# linktrack bench_serve: {} rows in {} daily partitions, {} connections, {} s each",
        args.rows, args.days, args.connections, args.seconds
    );

    let settings = PoolSettings {
        max_connections: args.pool,
        acquire_timeout: Duration::from_secs(5),
    };
    let pool = store::connect(&url, &settings).await?;
    let script = write_wrk_script(dir.path(), &sample)?;
    // The three measurements take turns, round after round, and each figure
    // is the median of its rounds: a burst of load from elsewhere on a shared
    // machine then hits all three alike instead of skewing one.
    let (mut ceilings, mut on, mut off) = (Vec::new(), Vec::new(), Vec::new());
    let mut compared = Vec::new();
    for round in 1..=args.rounds {
        ceilings.push(ceiling(&pool, &sample, &args).await);
        on.push(redirect_load(&pool, &args, &script, dir.path(), true).await?);
        off.push(redirect_load(&pool, &args, &script, dir.path(), false).await?);
        if let Some((_, compare_pool, compare_script, compare_dir)) = &compare {
            compared
                .push(redirect_load(compare_pool, &args, compare_script, compare_dir, true).await?);
        }
        eprintln!(
            "round {round}: ceiling {:?}, recorded {:?}, off {:?}",
            ceilings.last(),
            on.last(),
            off.last()
        );
    }
    let (ceiling_qps, ceiling_p99) = medians(&ceilings);
    let (on_rps, on_p99) = medians(&on);
    let (off_rps, off_p99) = medians(&off);
    println!("\nmedians of {} rounds", args.rounds);
    println!("ceiling: point-select by a plain sqlx client   {ceiling_qps:>9.0} queries/s   p99 {:>7.2} ms", ceiling_p99 * 1e3);
    println!(
        "redirect, events recorded                     {on_rps:>9.0} req/s       p99 {:>7.2} ms",
        on_p99 * 1e3
    );
    println!(
        "redirect, recording off                       {off_rps:>9.0} req/s       p99 {:>7.2} ms",
        off_p99 * 1e3
    );

    println!(
        "\nredirect req/s / ceiling queries/s   {:.2}   (aim >= 0.7)",
        on_rps / ceiling_qps
    );
    println!(
        "redirect p99 / ceiling p99           {:.2}   (aim <= 1.5)",
        on_p99 / ceiling_p99
    );
    println!(
        "recording on / off, req/s            {:.2}",
        on_rps / off_rps
    );
    if let Some((format, ..)) = &compare {
        let (compare_rps, compare_p99) = medians(&compared);
        println!(
            "\nredirect on {} tables: {compare_rps:.0} req/s, p99 {:.2} ms",
            format.name(),
            compare_p99 * 1e3
        );
        println!(
            "redirect {} / {}, req/s   {:.2}",
            format.name(),
            args.row_format.name(),
            compare_rps / on_rps
        );
    }
    Ok(())
}

/// Create the database with `days` daily partitions and load `rows` links
/// through LOAD DATA; returns a uniform sample of their tokens.
async fn load_links(
    args: &Args,
    database: &str,
    dir: &Path,
    format: RowFormat,
) -> anyhow::Result<Vec<Token>> {
    let admin = sqlx::MySqlPool::connect(&args.server).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {database}"))
        .execute(&admin)
        .await?;
    let pool = store::migrate(&format!("{}/{database}", args.server)).await?;
    for line in store::set_row_format(&pool, &store::RowFormatOptions::new(format)).await? {
        println!("{database}: {line}");
    }
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
    let every = (args.rows / args.sample as u64).max(1);
    let mut sample = Vec::with_capacity(args.sample);
    let mut n = 0u64;
    for d in 0..args.days {
        let day = first.checked_add_days(Days::new(d)).unwrap_or(first);
        let midnight = day.and_time(NaiveTime::MIN).and_utc();
        for i in 0..per_day {
            let at = midnight + chrono::Duration::milliseconds((i * 86_000_000 / per_day) as i64);
            let token = Token::at(at);
            if n.is_multiple_of(every) && sample.len() < args.sample {
                sample.push(token);
            }
            let hex: String = token
                .as_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            writeln!(
                out,
                "{hex}\t{day}\tclick\tm{d}\t{}\treader{}@example.com\t{}\thttps://news.example.com/articles/{}?utm_source=newsletter&utm_medium=email",
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
    Ok(sample)
}

/// Tokens of an already loaded database.
async fn existing_sample(url: &str, size: usize) -> anyhow::Result<Vec<Token>> {
    let pool = store::connect(url, &PoolSettings::default()).await?;
    let rows: Vec<Vec<u8>> = sqlx::query_scalar("SELECT uuid FROM links ORDER BY RAND() LIMIT ?")
        .bind(size as u64)
        .fetch_all(&pool)
        .await?;
    Ok(rows
        .iter()
        .filter_map(|b| Token::from_bytes(b).ok())
        .collect())
}

/// `connections` tasks doing the redirect's lookup back to back.
async fn ceiling(pool: &sqlx::MySqlPool, sample: &[Token], args: &Args) -> (f64, f64) {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let pool = pool.clone();
        let sample = sample.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let Some(token) = sample.choose(&mut rand::rng()).copied() else {
                    break;
                };
                let started = Instant::now();
                if links::lookup(&pool, &token).await.is_ok() {
                    latencies.push(started.elapsed().as_secs_f64());
                }
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap_or_default());
    }
    all.sort_by(f64::total_cmp);
    let p99 = all.get(all.len() * 99 / 100).copied().unwrap_or(f64::NAN);
    (all.len() as f64 / args.seconds as f64, p99)
}

fn write_wrk_script(dir: &Path, sample: &[Token]) -> anyhow::Result<std::path::PathBuf> {
    let path = dir.join("redirect.lua");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
    writeln!(out, "paths = {{")?;
    for token in sample {
        writeln!(out, "\"/c/{token}\",")?;
    }
    writeln!(out, "}}\nmath.randomseed(os.time())\nrequest = function() return wrk.format(\"GET\", paths[math.random(#paths)]) end")?;
    out.flush()?;
    Ok(path)
}

/// Start a server with recording on or off, load it with wrk; (req/s, p99 s).
async fn redirect_load(
    pool: &sqlx::MySqlPool,
    args: &Args,
    script: &Path,
    dir: &Path,
    record_events: bool,
) -> anyhow::Result<(f64, f64)> {
    let settings = ServerSettings {
        // Almost every request reads the database, like the ceiling.
        link_cache_entries: 16,
        record_events,
        ..ServerSettings::default()
    };
    let journal = dir.join(format!("journal-{record_events}"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let settings = AppSettings {
        server: settings,
        ..AppSettings::new(pool.clone(), JournalSettings::new(&journal))
    };
    let server = App::build(settings, listener).await?;
    let addr = server.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let output = tokio::process::Command::new("wrk")
        .args([
            "-t2",
            &format!("-c{}", args.connections),
            &format!("-d{}s", args.seconds),
            "--latency",
            "-s",
        ])
        .arg(script)
        .arg(format!("http://{addr}"))
        .output()
        .await?;
    let _ = stop.send(());
    let _ = running.await;
    let text = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(!text.contains("Non-2xx or 3xx"), "wrk saw errors:\n{text}");
    let rps = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("no Requests/sec in wrk output:\n{text}"))?;
    let p99 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%"))
        .and_then(|v| seconds(v.trim()))
        .ok_or_else(|| anyhow::anyhow!("no 99% latency in wrk output:\n{text}"))?;
    Ok((rps, p99))
}

/// Median throughput and median p99 over rounds.
fn medians(rounds: &[(f64, f64)]) -> (f64, f64) {
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
    };
    (
        median(rounds.iter().map(|r| r.0).collect()),
        median(rounds.iter().map(|r| r.1).collect()),
    )
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
