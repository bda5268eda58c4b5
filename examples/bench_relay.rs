//! Benchmark of `linktrack relay` against Postfix's own load generator
//! straight to Postfix's `smtp-sink`, in one run (issue 54).
//!
//! ```sh
//! apt-get install -y postfix && cargo run --release --example bench_relay
//! cargo run --release --example bench_relay -- --messages 4000 --sessions 8 --rounds 3
//! cargo run --release --example bench_relay -- --queued   # spool every message first
//! ```
//!
//! Four paths, in alternating rounds, the best round of each:
//!
//! 1. **direct**: `smtp-source` (`--sessions` sessions, `--messages`
//!    messages of `--size` bytes) to `smtp-sink`: the ceiling.
//! 2. **pass-through**: the same `smtp-source` run through the relay (its
//!    messages have no HTML part: the relay spools and forwards them
//!    untouched).
//! 3. **direct, HTML client**: a Python `smtplib` client sending a 5 KB
//!    HTML newsletter (10 links) over the same number of sessions straight
//!    to the sink: the ceiling of that client.
//! 4. **tracked**: the same client through the relay, every message
//!    tracked (links rewritten, a pixel, one row per link in MariaDB).
//!
//! A relay round's time runs from the first message to the last letter
//! leaving the spool (so forwarding is counted, not only the 250s). The
//! relay runs in this process: its CPU per message is this process's CPU
//! over the round (the clients are other processes), MariaDB's, the
//! sink's and the client's (this process's waited-for children) beside
//! it, so the machine's CPU per message is seen whole.
#![allow(clippy::unwrap_used)] // benchmarks: a failure should stop them loudly

#[path = "support/fresh_db.rs"]
mod fresh_db;
#[path = "support/process_cpu.rs"]
mod process_cpu;
use fresh_db::fresh_db;
use process_cpu::{mariadbd_stat, ProcessCpu};

use clap::Parser;
use linktrack::delivery::smtp::SmtpSettings;
use linktrack::relay::{RelaySettings, RelayTls, SuppressedAction};
use sqlx::MySqlPool;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    /// The server (a database `lt_bench_relay_*` is made and dropped).
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    server: String,
    /// Messages per round.
    #[arg(long, default_value_t = 2000)]
    messages: u32,
    /// SMTP sessions of the clients (and the relay's downstream sessions).
    #[arg(long, default_value_t = 4)]
    sessions: u32,
    /// smtp-source's message size, bytes.
    #[arg(long, default_value_t = 5000)]
    size: u32,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Run the relay with `--forward queued` (every message spooled,
    /// fsync'd, before its 250) instead of the default `--forward now`.
    #[arg(long)]
    queued: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Route {
    Direct,
    PassThrough,
    DirectHtml,
    Tracked,
}

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::Direct => "direct (smtp-source -> smtp-sink)",
            Route::PassThrough => "pass-through (smtp-source -> relay -> sink)",
            Route::DirectHtml => "direct, HTML client (smtplib -> sink)",
            Route::Tracked => "tracked (smtplib -> relay -> sink)",
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Round {
    per_second: f64,
    relay_cpu_us: f64,
    mariadb_cpu_us: f64,
    sink_cpu_us: f64,
    client_cpu_us: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let sink = Sink::start()?;
    let name = format!("lt_bench_relay_{}", std::process::id());
    let (pool, _) = fresh_db(&args.server, &name).await?;
    let admin = MySqlPool::connect(&args.server).await?;
    let mariadb = mariadbd_stat(&admin).await;
    let spool = tempfile::tempdir()?;
    let relay_port = free_port();
    let relay = spawn_relay(pool.clone(), &args, sink.port, relay_port, spool.path());
    wait_listening(relay_port).await?;
    let client = tempfile::tempdir()?;
    let script = client.path().join("client.py");
    std::fs::write(&script, PYTHON_CLIENT)?;

    let paths = [
        Route::Direct,
        Route::PassThrough,
        Route::DirectHtml,
        Route::Tracked,
    ];
    let mut best: Vec<Round> = vec![Round::default(); paths.len()];
    for round in 1..=args.rounds {
        for (n, path) in paths.iter().enumerate() {
            let port = match path {
                Route::Direct | Route::DirectHtml => sink.port,
                Route::PassThrough | Route::Tracked => relay_port,
            };
            let cpu = ProcessCpu::this()?;
            let sink_cpu = ProcessCpu::read(&sink.stat())?.own;
            let db_cpu = mariadb.as_deref().map(ProcessCpu::read).transpose()?;
            let started = Instant::now();
            let status = match path {
                Route::Direct | Route::PassThrough => smtp_source(&args, port)?,
                Route::DirectHtml | Route::Tracked => python_client(&script, &args, port)?,
            };
            anyhow::ensure!(status.success(), "{} failed: {status}", path.name());
            if port == relay_port {
                wait_spool_empty(spool.path()).await?;
            }
            let elapsed = started.elapsed().as_secs_f64();
            let messages = f64::from(args.messages);
            let after = ProcessCpu::this()?;
            let relay_cpu = after.own - cpu.own;
            let client_cpu = after.children - cpu.children;
            let sink_cpu = ProcessCpu::read(&sink.stat())?.own - sink_cpu;
            let db_cpu = match (mariadb.as_deref(), db_cpu) {
                (Some(stat), Some(before)) => ProcessCpu::read(stat)?.own - before.own,
                _ => f64::NAN,
            };
            let this = Round {
                per_second: messages / elapsed,
                relay_cpu_us: relay_cpu / messages * 1e6,
                mariadb_cpu_us: db_cpu / messages * 1e6,
                sink_cpu_us: sink_cpu / messages * 1e6,
                client_cpu_us: client_cpu / messages * 1e6,
            };
            println!(
                "round {round} {:<46} {:>8.0} msg/s  CPU µs/msg: relay {:>5.0}  MariaDB {:>5.0}  sink {:>4.0}  client {:>4.0}",
                path.name(),
                this.per_second,
                this.relay_cpu_us,
                this.mariadb_cpu_us,
                this.sink_cpu_us,
                this.client_cpu_us
            );
            if this.per_second > best[n].per_second {
                best[n] = this;
            }
        }
    }
    println!(
        "\nbest of {} rounds, {} messages, {} sessions:",
        args.rounds, args.messages, args.sessions
    );
    for (n, path) in paths.iter().enumerate() {
        let b = best[n];
        println!(
            "  {:<46} {:>8.0} msg/s  CPU µs/msg: relay {:>5.0}  MariaDB {:>5.0}  sink {:>4.0}  client {:>4.0}",
            path.name(),
            b.per_second,
            b.relay_cpu_us,
            b.mariadb_cpu_us,
            b.sink_cpu_us,
            b.client_cpu_us
        );
    }
    println!(
        "  pass-through / direct: {:.2} (relay CPU {:.0} µs per message)",
        best[1].per_second / best[0].per_second,
        best[1].relay_cpu_us
    );
    println!(
        "  tracked / direct HTML client: {:.2}; tracked / smtp-source direct: {:.2} (relay CPU {:.0} µs, MariaDB {:.0} µs per message)",
        best[3].per_second / best[2].per_second,
        best[3].per_second / best[0].per_second,
        best[3].relay_cpu_us,
        best[3].mariadb_cpu_us
    );
    // On a CPU-bound loopback the rate can be no better than the machine's
    // CPU per message allows: the relayed path receives and sends each
    // message again (and stores its rows), on the same cores. Direct's
    // total leaves MariaDB out: it is sent nothing on that path (what it
    // did meanwhile was other work on the machine).
    let total = |r: &Round, with_db: bool| {
        r.relay_cpu_us
            + r.sink_cpu_us
            + r.client_cpu_us
            + if with_db { r.mariadb_cpu_us } else { 0.0 }
    };
    for (name, direct, relayed) in [("pass-through", 0, 1), ("tracked", 2, 3)] {
        let (d, r) = (total(&best[direct], false), total(&best[relayed], true));
        println!(
            "  {name}: whole-machine CPU per message direct {d:.0} µs, relayed {r:.0} µs: \
             CPU form of the ratio {:.2} (msg/s ratio {:.2})",
            d / r,
            best[relayed].per_second / best[direct].per_second
        );
    }
    relay.abort();
    drop(sink);
    sqlx::query(&format!("DROP DATABASE IF EXISTS `{name}`"))
        .execute(&admin)
        .await?;
    Ok(())
}

/// Postfix's smtp-sink on a free loopback port, keeping nothing.
struct Sink {
    child: Child,
    port: u16,
}

impl Sink {
    fn start() -> anyhow::Result<Sink> {
        let port = free_port();
        let child = Command::new("smtp-sink")
            .args(["-u", "root", &format!("127.0.0.1:{port}"), "1000"])
            .spawn()
            .map_err(|e| anyhow::anyhow!("smtp-sink (apt-get install postfix): {e}"))?;
        std::thread::sleep(Duration::from_millis(300));
        Ok(Sink { child, port })
    }

    fn stat(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/stat", self.child.id()))
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

async fn wait_listening(port: u16) -> anyhow::Result<()> {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("the relay did not listen")
}

fn spawn_relay(
    pool: MySqlPool,
    args: &Args,
    sink_port: u16,
    port: u16,
    spool: &Path,
) -> tokio::task::JoinHandle<()> {
    let settings = RelaySettings {
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        hostname: "relay.bench".into(),
        smtp: SmtpSettings {
            url: format!("smtp://127.0.0.1:{sink_port}"),
            connections: args.sessions,
            messages_per_connection: None,
            retries: 5,
            backoff: Duration::from_millis(100),
        },
        pools: None,
        default_pool: "default".into(),
        open_to: vec!["127.0.0.0/8".parse().unwrap()],
        api_token: None,
        api_key_secret: None,
        spool: spool.to_owned(),
        forward_now: !args.queued,
        metrics_listen: None,
        max_message_bytes: 50 << 20,
        max_recipients: 1000,
        default_mailing: Some("bench-relay".into()),
        suppressed: SuppressedAction::Refuse,
        base_url: "https://t.example.com".into(),
        bounce_domain: None,
        secret: None,
        retry_after: Duration::from_millis(100),
        tls: RelayTls::default(),
        dkim_keys: Vec::new(),
        privacy: linktrack::privacy::PrivacySettings::default(),
    };
    tokio::spawn(async move {
        let never = std::future::pending::<()>();
        if let Err(err) = linktrack::relay::run(pool, settings, never).await {
            eprintln!("relay: {err}");
        }
    })
}

fn smtp_source(args: &Args, port: u16) -> anyhow::Result<std::process::ExitStatus> {
    Ok(Command::new("smtp-source")
        .args(["-s", &args.sessions.to_string()])
        .args(["-m", &args.messages.to_string()])
        .args(["-l", &args.size.to_string()])
        .args(["-f", "news@example.com", "-t", "reader@example.net"])
        .arg(format!("127.0.0.1:{port}"))
        .status()?)
}

fn python_client(
    script: &Path,
    args: &Args,
    port: u16,
) -> anyhow::Result<std::process::ExitStatus> {
    Ok(Command::new("python3")
        .arg(script)
        .args([
            port.to_string(),
            args.sessions.to_string(),
            args.messages.to_string(),
        ])
        .status()?)
}

/// Until every letter left the spool (`queue/` holds no message).
async fn wait_spool_empty(spool: &Path) -> anyhow::Result<()> {
    let queue: PathBuf = spool.join("queue");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let left = std::fs::read_dir(&queue)?
            .filter_map(Result::ok)
            .filter(|entry| {
                std::fs::read_dir(entry.path()).is_ok_and(|mut letters| letters.next().is_some())
            })
            .count();
        if left == 0 {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the spool did not drain");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `client.py PORT SESSIONS MESSAGES`: SESSIONS threads, each one SMTP
/// session sending its share of a 5 KB HTML newsletter with 10 links.
const PYTHON_CLIENT: &str = r#"
import smtplib, sys, threading
port, sessions, messages = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
links = "".join(
    f'<p><a href="https://news.example.com/articles/{n}?utm_source=nl">Article {n}</a>: '
    + "a paragraph about this week's article, long enough to wrap in the text part. " * 5
    + "</p>\r\n"
    for n in range(1, 11)
)
message = (
    "From: News <news@example.com>\r\nTo: reader@example.net\r\nSubject: This week\r\n"
    "MIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
    f"<html><body><h1>This week</h1>\r\n{links}</body></html>\r\n"
).encode()
def send(count, n):
    s = smtplib.SMTP("127.0.0.1", port)
    s.ehlo("bench.example")
    for i in range(count):
        s.sendmail("news@example.com", [f"reader{n}-{i}@example.net"], message)
    s.quit()
share = [messages // sessions + (1 if n < messages % sessions else 0) for n in range(sessions)]
threads = [threading.Thread(target=send, args=(share[n], n)) for n in range(sessions)]
for t in threads: t.start()
for t in threads: t.join()
"#;
