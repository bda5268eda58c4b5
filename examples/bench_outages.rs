//! Clicks through trouble, beside the same clicks without it, in one run:
//! the latency figures the tests do not assert (tests/it/slow_clients.rs,
//! db_down.rs and server_outages.rs check that every click is answered,
//! and with what; how fast is measured here).
//!
//! ```sh
//! cargo run --release --example bench_outages                              # both parts
//! cargo run --release --example bench_outages -- --slow-bodies 200 --outages ''
//! cargo run --release --example bench_outages -- --slow-bodies 0 --outages refused,stopped --db-timeout-ms 500
//! ```
//!
//! 1. **Slow bodies** (`--slow-bodies N`, 0 to skip): an in-process server
//!    with the login on and a body deadline of `--body-deadline-ms`;
//!    `--clicks` clicks on one cached link, 10 at a time, idle, then while
//!    N clients trickle a login body a byte every 200 ms (each cut with
//!    408 at the deadline and coming straight back), then idle again. The
//!    figure: the clicks' p99 beside the slow bodies against the larger of
//!    the two idle p99s (the machine is shared, so the baseline is not one
//!    taken at a quiet moment), and against the body deadline (a click
//!    queued behind the slow bodies would wait for it). Both by the
//!    client's clock and by the server's own histogram; CPU per click is
//!    this whole process's (server and clients).
//! 2. **Outages** (`--outages`, a list of `refused`, `stopped`, `locked`,
//!    `closed`; empty to skip): uncached clicks (tokens no cache holds) from
//!    each of `--concurrency` clients in turn, `--clicks-per-client` each,
//!    one after the other, with `--db-timeout-ms`: against a port that
//!    refuses connections, a listener that accepts and never answers (a
//!    stopped database), MariaDB with `links` write-locked by another
//!    session, and a closed pool. Every answer must be 503. The baseline
//!    (`up`) is the same clicks on the same server kind with MariaDB
//!    answering (each an indexed miss: 404). The figure that matters is the
//!    slowest click against the timeout: a click's wait starts when it
//!    arrives, so none may wait for two timeouts (the lookups' queue for a
//!    slot counts against the same budget as the statement).
//!
//! MariaDB at `--server` (a database `lt_bench_outages` is made afresh).
#![allow(clippy::unwrap_used)] // benchmarks: a failure should stop them loudly

#[path = "support/fresh_db.rs"]
mod fresh_db;
#[path = "support/process_cpu.rs"]
mod process_cpu;
#[path = "../tests/it/common/slow_login.rs"]
mod slow_login;

use chrono::Utc;
use clap::Parser;
use linktrack::journal::segments::JournalSettings;
use linktrack::kind::LinkKind;
use linktrack::server::listen::ConnectionLimits;
use linktrack::server::state::ServerSettings;
use linktrack::server::{App, AppSettings};
use linktrack::store::links::{self, NewLink};
use linktrack::store::{self, PoolSettings};
use linktrack::token::{Plaintext, Token, TokenSeal};
use process_cpu::ProcessCpu;
use slow_login::trickle_a_login_body;
use sqlx::MySqlPool;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    about = "Click latency beside slow request bodies and through database outages, against the same clicks without them"
)]
struct Args {
    /// MariaDB server URL (no database).
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    server: String,
    /// Clients trickling a login body (0: skip the slow-bodies part).
    #[arg(long, default_value_t = 200)]
    slow_bodies: usize,
    /// The body deadline (the header timeout) in the slow-bodies part.
    #[arg(long, default_value_t = 2_000)]
    body_deadline_ms: u64,
    /// Clicks per measurement in the slow-bodies part.
    #[arg(long, default_value_t = 2_000)]
    clicks: usize,
    /// Outages to click through, comma-separated: refused, stopped, locked,
    /// closed (empty: skip the outages part).
    #[arg(
        long,
        default_value = "refused,stopped,locked,closed",
        value_delimiter = ','
    )]
    outages: Vec<String>,
    /// `--db-timeout-ms` of the server in the outages part.
    #[arg(long, default_value_t = 500)]
    db_timeout_ms: u64,
    /// Concurrent clients in the outages part, one level after the other.
    #[arg(long, default_value = "8,32,128", value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Clicks each client sends one after the other in the outages part.
    #[arg(long, default_value_t = 4)]
    clicks_per_client: usize,
}

const SECRET: &str = "bench-outages-secret";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (pool, url) = fresh_db::fresh_db(&args.server, "lt_bench_outages").await?;
    // The day before too: a token an hour old may be dated yesterday just
    // after midnight.
    let policy = store::partitions::Policy {
        today: Utc::now().date_naive() - chrono::Days::new(1),
        ahead_days: 2,
        keep_days: None,
    };
    store::partitions::run(&pool, &policy, &Default::default()).await?;
    // Every server here has the login on (the slow bodies need it), so
    // LINKTRACK_SECRET keys the token seal, and the clicks' tokens are
    // sealed with it: a server with the seal opens a token before it looks
    // it up, and these are looked up.
    let seal = Arc::new(linktrack::store::link_templates::load_seal(&pool, Some(SECRET)).await?);
    if args.slow_bodies > 0 {
        slow_bodies(&args, &pool, &seal).await?;
    }
    let outages: Vec<&str> = args
        .outages
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect();
    if !outages.is_empty() {
        outages_part(&args, &url, &outages, &seal).await?;
    }
    Ok(())
}

/// A server running on a task.
struct Running {
    base: String,
    admin: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), linktrack::server::ServeError>>,
    _journal: tempfile::TempDir,
}

impl Running {
    async fn start(
        pool: MySqlPool,
        adjust: impl FnOnce(AppSettings) -> AppSettings,
    ) -> anyhow::Result<Running> {
        let journal = tempfile::tempdir()?;
        let settings = adjust(AppSettings::new(pool, JournalSettings::new(journal.path())));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let app = App::build(settings, listener).await?;
        let base = format!("http://{}", app.local_addr()?);
        let admin = format!(
            "http://{}",
            app.admin_addr()
                .ok_or_else(|| anyhow::anyhow!("no admin listener"))?
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(app.run(async move {
            let _ = stopped.await;
        }));
        answering(&base).await?;
        Ok(Running {
            base,
            admin,
            stop,
            task,
            _journal: journal,
        })
    }

    async fn metrics(&self) -> anyhow::Result<String> {
        Ok(reqwest::get(format!("{}/metrics", self.admin))
            .await?
            .text()
            .await?)
    }

    async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.task.await??;
        Ok(())
    }
}

/// Wait until the server answers `/healthz`, as a load balancer would
/// before sending it clicks. The listener is bound before the server
/// serves: it first reads its tracking hosts, which with the database down
/// takes one `--db-timeout-ms`, and a click sent then would be measured
/// with that start on top of its own wait.
async fn answering(base: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        match reqwest::get(format!("{base}/healthz")).await {
            Ok(response) if response.status().is_success() => return Ok(()),
            _ if started.elapsed() > Duration::from_secs(30) => {
                anyhow::bail!("the server at {base} did not answer /healthz within 30 s")
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent("Mozilla/5.0 (Macintosh; Intel Mac OS X 14_0) AppleWebKit/605.1.15 Version/17.0 Safari/605.1.15")
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// The `p`th percentile of sorted latencies.
fn pct(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() - 1) * p / 100]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// What one batch of clicks gave.
struct Clicks {
    latencies: Vec<Duration>,
    /// Answers with the wanted status.
    wanted: usize,
    seconds: f64,
    cpu: f64,
}

impl Clicks {
    fn p99(&self) -> Duration {
        pct(&self.latencies, 99)
    }

    fn cpu_us_per_click(&self) -> f64 {
        self.cpu / self.latencies.len().max(1) as f64 * 1e6
    }

    fn max(&self) -> Duration {
        *self.latencies.last().unwrap_or(&Duration::ZERO)
    }

    /// The figures both parts print for a batch: answers, pace, latencies
    /// (`extra_p99` follows the p99) and CPU.
    fn summary(&self, answered: &str, extra_p99: &str) -> String {
        format!(
            "{}/{} answered {answered}, {:.0} clicks/s, p50 {:.2} ms, p99 {:.2} ms{extra_p99}, max {:.2} ms, {:.0} us CPU per click",
            self.wanted,
            self.latencies.len(),
            self.latencies.len() as f64 / self.seconds,
            ms(pct(&self.latencies, 50)),
            ms(self.p99()),
            ms(self.max()),
            self.cpu_us_per_click()
        )
    }
}

// ---------------------------------------------------------------- slow bodies

async fn slow_bodies(args: &Args, pool: &MySqlPool, seal: &TokenSeal) -> anyhow::Result<()> {
    let token = click_token(seal);
    links::insert(
        pool,
        &[NewLink {
            token,
            kind: LinkKind::Click,
            mailing_id: "bench".into(),
            letter_id: 1,
            email: "r1@example.com".into(),
            position: 1,
            url: "https://example.com/1".into(),
            meta: None,
        }],
    )
    .await?;
    let deadline = Duration::from_millis(args.body_deadline_ms);
    let server = Running::start(pool.clone(), |settings| AppSettings {
        connections: ConnectionLimits {
            header_timeout: deadline,
            ..ConnectionLimits::default()
        },
        api_token: Some("bench-outages-api-token-0123456789".to_owned()),
        secret: Some(SECRET.to_owned()),
        ..settings
    })
    .await?;
    let url = format!("{}/c/{token}", server.base);
    let http = http();
    // Warm: the link cached, so clicks measure the server, not a first read.
    anyhow::ensure!(
        http.get(&url).send().await?.status() == 302,
        "the warm-up click"
    );

    let idle = click_batches(&http, &url, args.clicks, &server).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let cut = Arc::new(AtomicUsize::new(0));
    let address: SocketAddr = server.base.trim_start_matches("http://").parse()?;
    let mut slow = tokio::task::JoinSet::new();
    for _ in 0..args.slow_bodies {
        let (stop, cut) = (stop.clone(), cut.clone());
        slow.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if trickle_a_login_body(address, Duration::from_secs(60)).await {
                    cut.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    // Every slow client cut once: they are coming back, as they will
    // during the clicks.
    let waiting = Instant::now();
    while cut.load(Ordering::Relaxed) < args.slow_bodies {
        anyhow::ensure!(
            waiting.elapsed() < deadline * 20,
            "the slow bodies are not cut"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let loaded = click_batches(&http, &url, args.clicks, &server).await?;
    stop.store(true, Ordering::Relaxed);
    slow.join_all().await;
    let again = click_batches(&http, &url, args.clicks, &server).await?;
    server.stop().await?;

    let (idle_client, idle_server) = if again.0.p99() > idle.0.p99() {
        (&again.0, again.1)
    } else {
        (&idle.0, idle.1)
    };
    let (loaded_client, loaded_server) = (&loaded.0, loaded.1);
    println!(
        "slow bodies: {} clients trickling a login body, body deadline {} ms, {} clicks per measurement, 10 at a time",
        args.slow_bodies,
        deadline.as_millis(),
        args.clicks
    );
    for (what, clicks, server_p99) in [
        ("idle (first)", &idle.0, idle.1),
        ("idle (again)", &again.0, again.1),
        ("beside the slow bodies", &loaded.0, loaded.1),
    ] {
        let server = format!(" (server's histogram {:.2} ms)", server_p99 * 1e3);
        println!("  {what:24} {}", clicks.summary("302", &server));
    }
    println!(
        "  p99 beside the slow bodies / idle p99: {:.2} (server's histogram {:.2}); / body deadline: {:.4}; CPU per click {:.2}x idle; {} slow bodies cut with 408",
        ms(loaded_client.p99()) / ms(idle_client.p99()).max(1e-9),
        loaded_server / idle_server.max(1e-9),
        loaded_client.p99().as_secs_f64() / deadline.as_secs_f64(),
        loaded_client.cpu_us_per_click() / idle_client.cpu_us_per_click().max(1e-9),
        cut.load(Ordering::Relaxed)
    );
    Ok(())
}

/// `n` clicks, 10 at a time: the client's latencies and the server's own
/// p99 (its `/metrics` histogram before and after).
async fn click_batches(
    http: &reqwest::Client,
    url: &str,
    n: usize,
    server: &Running,
) -> anyhow::Result<(Clicks, f64)> {
    let before = server.metrics().await?;
    let cpu = ProcessCpu::this()?.own;
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(n);
    let mut wanted = 0;
    for _ in 0..n.div_ceil(10) {
        let mut batch = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let request = http.get(url).send();
            batch.spawn(async move {
                let sent = Instant::now();
                let ok = request.await.is_ok_and(|r| r.status() == 302);
                (sent.elapsed(), ok)
            });
        }
        for (latency, ok) in batch.join_all().await {
            latencies.push(latency);
            wanted += usize::from(ok);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = ProcessCpu::this()?.own - cpu;
    let after = server.metrics().await?;
    latencies.sort();
    Ok((
        Clicks {
            latencies,
            wanted,
            seconds,
            cpu,
        },
        histogram_p99(&before, &after, "/c/{token}"),
    ))
}

/// How many requests of `route` the server's latency histogram counts at
/// or under `le` seconds.
fn bucket(metrics: &str, route: &str, le: &str) -> u64 {
    metrics
        .lines()
        .filter(|line| line.starts_with("linktrack_http_request_duration_seconds_bucket"))
        .filter(|line| line.contains(&format!("route=\"{route}\"")))
        .find(|line| line.contains(&format!("le=\"{le}\"")))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// The p99 of `route` between two `/metrics` texts, interpolated within
/// the histogram's buckets as Prometheus' `histogram_quantile` does.
fn histogram_p99(before: &str, after: &str, route: &str) -> f64 {
    let les = [
        "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
        "2.5", "+Inf",
    ];
    let count = |le: &str| bucket(after, route, le).saturating_sub(bucket(before, route, le));
    let rank = 0.99 * count("+Inf") as f64;
    let (mut lower_bound, mut lower_count) = (0.0, 0.0);
    for le in les {
        let upper = if le == "+Inf" {
            2.5
        } else {
            le.parse::<f64>().unwrap()
        };
        let cumulative = count(le) as f64;
        if cumulative >= rank {
            let within = (rank - lower_count) / (cumulative - lower_count).max(1.0);
            return lower_bound + (upper - lower_bound) * within;
        }
        (lower_bound, lower_count) = (upper, cumulative);
    }
    lower_bound
}

// ------------------------------------------------------------------- outages

/// A click token made an hour ago (not too fast a click), sealed.
fn click_token(seal: &TokenSeal) -> Token {
    seal.seal(
        Utc::now() - chrono::Duration::hours(1),
        Plaintext::issue(LinkKind::Click.into(), 0, 0),
    )
}

async fn outages_part(
    args: &Args,
    url: &str,
    outages: &[&str],
    seal: &Arc<TokenSeal>,
) -> anyhow::Result<()> {
    let timeout = Duration::from_millis(args.db_timeout_ms);
    println!(
        "outages: uncached clicks, --db-timeout-ms {}, {} clicks per client one after the other, clients {:?}",
        args.db_timeout_ms, args.clicks_per_client, args.concurrency
    );
    let pool_settings = PoolSettings {
        max_connections: 16,
        acquire_timeout: timeout,
    };
    let mut baseline = Vec::new();
    for kind in std::iter::once("up").chain(outages.iter().copied()) {
        // What the server's pool points at, and what keeps the outage up.
        let mut silent = None;
        let mut locker = None;
        let pool = match kind {
            "up" => store::connect(url, &pool_settings).await?,
            "refused" => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                let addr = listener.local_addr()?;
                drop(listener);
                store::connect_lazy(&format!("mysql://root@{addr}/nothing"), &pool_settings)?
            }
            "stopped" => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                let addr = listener.local_addr()?;
                silent = Some(tokio::spawn(async move {
                    let mut held = Vec::new();
                    while let Ok((socket, _)) = listener.accept().await {
                        held.push(socket);
                    }
                }));
                store::connect_lazy(&format!("mysql://root@{addr}/nothing"), &pool_settings)?
            }
            "locked" => {
                use sqlx::Connection;
                let pool = store::connect(url, &pool_settings).await?;
                let mut session = sqlx::MySqlConnection::connect(url).await?;
                sqlx::query("LOCK TABLES links WRITE")
                    .execute(&mut session)
                    .await?;
                locker = Some(session);
                pool
            }
            "closed" => {
                let pool = store::connect(url, &pool_settings).await?;
                pool.close().await;
                pool
            }
            other => anyhow::bail!("unknown outage {other:?} (refused, stopped, locked, closed)"),
        };
        let server = Running::start(pool, |settings| AppSettings {
            server: ServerSettings {
                db_timeout: timeout,
                ..ServerSettings::default()
            },
            secret: Some(SECRET.to_owned()),
            ..settings
        })
        .await?;
        let want = if kind == "up" { 404 } else { 503 };
        for (level, &concurrency) in args.concurrency.iter().enumerate() {
            let clicks = uncached_clicks(
                &server.base,
                seal,
                (concurrency, args.clicks_per_client),
                want,
            )
            .await;
            let max = clicks.max();
            let versus = if kind == "up" {
                baseline.push(clicks.p99());
                String::new()
            } else {
                format!(
                    ", p99 {:.0}x up's; max / timeout {:.2}",
                    clicks.p99().as_secs_f64()
                        / baseline
                            .get(level)
                            .map_or(1e-9, |b| b.as_secs_f64().max(1e-9)),
                    max.as_secs_f64() / timeout.as_secs_f64()
                )
            };
            println!(
                "  {kind:8} {concurrency:4} clients: {}{versus}",
                clicks.summary(&want.to_string(), "")
            );
        }
        server.stop().await?;
        if let Some(mut session) = locker {
            sqlx::query("UNLOCK TABLES").execute(&mut session).await?;
        }
        if let Some(task) = silent {
            task.abort();
        }
    }
    Ok(())
}

/// `concurrency` clients each clicking `per_client` tokens no cache holds
/// (and no link row), one after the other.
async fn uncached_clicks(
    base: &str,
    seal: &Arc<TokenSeal>,
    (concurrency, per_client): (usize, usize),
    want: u16,
) -> Clicks {
    let http = http();
    let cpu = ProcessCpu::this().map(|c| c.own).unwrap_or(0.0);
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (http, base, seal) = (http.clone(), base.to_owned(), seal.clone());
        clients.spawn(async move {
            let mut seen = Vec::with_capacity(per_client);
            for _ in 0..per_client {
                let token = click_token(&seal);
                let sent = Instant::now();
                let status = http
                    .get(format!("{base}/c/{token}"))
                    .send()
                    .await
                    .map_or(0, |r| r.status().as_u16());
                seen.push((sent.elapsed(), status == want));
            }
            seen
        });
    }
    let seen: Vec<(Duration, bool)> = clients.join_all().await.into_iter().flatten().collect();
    let seconds = started.elapsed().as_secs_f64();
    let cpu = ProcessCpu::this().map(|c| c.own).unwrap_or(0.0) - cpu;
    let wanted = seen.iter().filter(|(_, ok)| *ok).count();
    let mut latencies: Vec<Duration> = seen.into_iter().map(|(latency, _)| latency).collect();
    latencies.sort();
    Clicks {
        latencies,
        wanted,
        seconds,
        cpu,
    }
}
