//! A load measurement, not a test: run it on purpose with
//! `cargo nextest run --run-ignored only -E 'test(measure_)' --no-capture`.
//! It prints redirect throughput and latency (every redirect waits for its
//! journal append) and how long the backlog takes to reach `events`.

use crate::common::{click_link, days_ago, TestDb};
use chrono::Utc;
use linktrack::events::journal::JournalSettings;
use linktrack::server::state::ServerSettings;
use linktrack::server::{App, AppSettings};
use linktrack::store::links::{self, NewLink};
use linktrack::store::{self, PoolSettings};
use linktrack::token::Token;
use std::time::{Duration, Instant};

const CLIENTS: usize = 32;
const RUN_FOR: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run on purpose"]
async fn measure_redirect_throughput() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let tokens: Vec<Token> = (0..100)
        .map(|_| Token::at(Utc::now() - chrono::Duration::hours(1)))
        .collect();
    let rows: Vec<NewLink> = tokens
        .iter()
        .enumerate()
        .map(|(n, token)| click_link(*token, n as u32))
        .collect();
    links::insert(&db.pool, &rows).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pool = store::connect(&db.url, &PoolSettings::default())
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let settings = AppSettings {
        server: ServerSettings::default(),
        ..AppSettings::new(pool, JournalSettings::new(dir.path()))
    };
    let server = App::build(settings, listener).await.unwrap();
    let base = format!("http://{}", server.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));

    let started = Instant::now();
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let base = base.clone();
        let tokens = tokens.clone();
        clients.push(tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .user_agent("Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0")
                .build()
                .unwrap();
            let mut latencies = Vec::new();
            let mut n = c;
            while started.elapsed() < RUN_FOR {
                let token = tokens[n % tokens.len()];
                n += CLIENTS;
                let sent = Instant::now();
                let response = http.get(format!("{base}/c/{token}")).send().await.unwrap();
                assert_eq!(response.status(), 302);
                latencies.push(sent.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for client in clients {
        latencies.extend(client.await.unwrap());
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "redirects: {} in {:.1?} = {:.0}/s with {CLIENTS} clients; p50 {:.2?}, p99 {:.2?}, max {:.2?}",
        latencies.len(),
        elapsed,
        latencies.len() as f64 / elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        latencies[latencies.len() - 1],
    );

    let drained = Instant::now();
    let deadline = drained + Duration::from_secs(60);
    loop {
        let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        if stored as usize >= latencies.len() || Instant::now() > deadline {
            println!(
                "events: {stored} stored; backlog drained {:.1?} after the load stopped",
                drained.elapsed()
            );
            assert_eq!(stored as usize, latencies.len());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}
