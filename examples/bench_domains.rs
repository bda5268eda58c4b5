//! How soon running servers answer on a tracking domain added with
//! `linktrack domains add` (docs/domains.md promises 2 s; the test
//! `domains::a_new_domain_is_answered_on_every_server_after_the_command`
//! checks that they do, this says how soon).
//!
//! ```sh
//! cargo build --release --bin linktrack --example bench_domains
//! target/release/examples/bench_domains --servers 2 --rounds 10
//! ```
//!
//! `--servers` real `linktrack serve` processes (the binary given by
//! `--linktrack`) on one fresh database that already has one tracking
//! domain, so an unknown host is refused. Each round runs `linktrack
//! domains add` for a new host and, from the moment the command returns,
//! asks every server for its login page on that host every millisecond
//! until the answer is no longer the unknown host's page. The take-up of
//! each server is reported (median and worst over the rounds), each as a
//! fraction of the 2 s promised; beside it the baseline measured in the
//! same run, a request's round trip on a known host, so a slow machine
//! shows as such; and the servers' CPU per round, read from
//! `/proc/PID/stat` (the background refresh that does the work).
//!
//! Uses a fresh `lt_bench_domains` database and drops it afterwards.
#![allow(clippy::unwrap_used)] // tests and benchmarks: a failure should stop them loudly

#[path = "support/fresh_db.rs"]
mod fresh_db;

use clap::Parser;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The unknown host's page says this (src/server/hosts.rs).
const REFUSED: &str = "answers only on the host of its base URL";
const PROMISED: Duration = Duration::from_secs(2);

#[derive(Parser)]
struct Args {
    /// MySQL server, without a database.
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    server: String,
    /// The binary under test.
    #[arg(long, default_value = "target/release/linktrack")]
    linktrack: String,
    /// Servers on the one database.
    #[arg(long, default_value_t = 2)]
    servers: usize,
    /// Domains added, one a round.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
}

/// A `linktrack serve` child and the address it logged.
struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(args: &Args, url: &str, journal: &std::path::Path) -> Server {
    let mut child = Command::new(&args.linktrack)
        .args(["serve", "--rollup-every", "0", "--listen", "127.0.0.1:0"])
        .args(["--admin-listen", "127.0.0.1:0", "--journal"])
        .arg(journal)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "error,linktrack=info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("running linktrack serve");
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the server exited before serving")
            .unwrap();
        if let Some(rest) = line
            .split(" listen=")
            .nth(1)
            .filter(|_| line.contains("serving"))
        {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    // Drained, so the server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Server {
        child,
        base: format!("http://{addr}"),
    }
}

/// The process's user + system CPU so far (`/proc/PID/stat`, in ticks of
/// 10 ms).
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|at| fields.get(*at)?.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

async fn answered(http: &reqwest::Client, server: &Server, host: &str) -> bool {
    let Ok(response) = http
        .get(format!("{}/login", server.base))
        .header(reqwest::header::HOST, host)
        .send()
        .await
    else {
        return false;
    };
    !response.text().await.unwrap_or_default().contains(REFUSED)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (pool, url) = fresh_db::fresh_db(&args.server, "lt_bench_domains").await?;
    linktrack::store::tracking_domains::add(&pool, "click.first.example", "first.example").await?;
    let journals: Vec<tempfile::TempDir> = (0..args.servers)
        .map(|_| tempfile::tempdir())
        .collect::<Result<_, _>>()?;
    let servers: Vec<Server> = journals
        .iter()
        .map(|journal| serve(&args, &url, journal.path()))
        .collect();
    let http = reqwest::Client::new();

    // Baseline: a round trip on a host every server knows.
    let mut trips = Vec::new();
    for _ in 0..50 {
        for server in &servers {
            let asked = Instant::now();
            assert!(answered(&http, server, "click.first.example").await);
            trips.push(asked.elapsed());
        }
    }

    let cpu_before: Duration = servers.iter().map(|s| cpu(s.child.id())).sum();
    let mut took: Vec<Vec<Duration>> = vec![Vec::new(); servers.len()];
    for round in 0..args.rounds {
        let host = format!("go{round}.second.example");
        let added = Command::new(&args.linktrack)
            .args(["domains", "add", &host, "--for", "second.example"])
            .env("DATABASE_URL", &url)
            .env("RUST_LOG", "warn")
            .output()?;
        anyhow::ensure!(added.status.success(), "domains add: {added:?}");
        let returned = Instant::now();
        let mut waiting: Vec<usize> = (0..servers.len()).collect();
        while !waiting.is_empty() {
            let mut still = Vec::new();
            for n in waiting {
                if answered(&http, &servers[n], &host).await {
                    took[n].push(returned.elapsed());
                } else {
                    still.push(n);
                }
            }
            waiting = still;
            anyhow::ensure!(
                returned.elapsed() < Duration::from_secs(60),
                "{host} not answered within a minute"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let cpu_after: Duration = servers.iter().map(|s| cpu(s.child.id())).sum();

    println!(
        "baseline: a request's round trip on a known host, median {:.2} ms",
        median(trips).as_secs_f64() * 1e3
    );
    for (n, took) in took.iter().enumerate() {
        let worst = *took.iter().max().unwrap();
        let middle = median(took.clone());
        println!(
            "server {n}: a new domain answered after median {:.0} ms, worst {:.0} ms \
             ({:.2} and {:.2} of the {} s promised; {} rounds)",
            middle.as_secs_f64() * 1e3,
            worst.as_secs_f64() * 1e3,
            middle.as_secs_f64() / PROMISED.as_secs_f64(),
            worst.as_secs_f64() / PROMISED.as_secs_f64(),
            PROMISED.as_secs(),
            took.len()
        );
    }
    println!(
        "servers' CPU per round (the background refresh and the probes): {:.1} ms",
        (cpu_after - cpu_before).as_secs_f64() * 1e3 / args.rounds as f64
    );
    drop(servers);
    sqlx::query("DROP DATABASE IF EXISTS lt_bench_domains")
        .execute(&pool)
        .await?;
    Ok(())
}
