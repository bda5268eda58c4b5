//! Uncached clicks while the database is away answer 503 within
//! `--db-timeout-ms`, at any concurrency: a click's wait starts when it
//! arrives, not when a lookup slot frees up.
//!
//! The "database" is one the test controls: a port that refuses
//! connections (a listener bound and closed), and a listener that accepts
//! and never answers (a stopped server). The bound is read from the
//! server's own latency histogram (`linktrack_http_request_duration_seconds`
//! for `/c/{token}`): with a 500 ms timeout every click must fall in the
//! 1 s bucket, i.e. no click waited for two timeouts. That is a correctness
//! bound (2×), not a speed figure; the client-side latencies are printed.

use crate::common::{client, quick_with, test_settings, TestServer};
use crate::common::{metrics_text, route_latency_bucket};
use chrono::Utc;
use linktrack::store::{self, PoolSettings};
use linktrack::token::Token;
use reqwest::{header, StatusCode};
use std::time::{Duration, Instant};

const DB_TIMEOUT: Duration = Duration::from_millis(500);

/// A port nothing listens on: bound, then closed.
async fn refusing_address() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr.to_string()
}

/// A listener that accepts connections and never says a word, as a
/// stopped (SIGSTOP) database server would; it keeps them open until dropped.
async fn silent_address() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (addr, task)
}

/// `concurrency` clients each clicking tokens no cache holds, one after
/// the other, for three timeouts (as a load generator does: clicks keep
/// arriving while earlier ones wait); every answer must be a 503 with
/// Retry-After. Returns the client-side latencies, sorted.
async fn uncached_clicks(server: &TestServer, concurrency: usize) -> Vec<Duration> {
    let http = client();
    let until = Instant::now() + DB_TIMEOUT * 3;
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (http, base) = (http.clone(), server.url(""));
        clients.spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < until {
                let token = Token::at(Utc::now() - chrono::Duration::minutes(60));
                let started = Instant::now();
                let response = http.get(format!("{base}/c/{token}")).send().await.unwrap();
                assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
                assert!(response.headers().contains_key(header::RETRY_AFTER));
                latencies.push(started.elapsed());
            }
            latencies
        });
    }
    let mut latencies: Vec<Duration> = clients.join_all().await.into_iter().flatten().collect();
    latencies.sort();
    latencies
}

async fn no_click_waits_for_two_timeouts(database: &str, what: &str) {
    let url = format!("mysql://root@{database}/nothing");
    let pool = store::connect_lazy(
        &url,
        &PoolSettings {
            max_connections: 16,
            acquire_timeout: DB_TIMEOUT,
        },
    )
    .unwrap();
    let journal = tempfile::tempdir().unwrap();
    let settings = linktrack::server::state::ServerSettings {
        db_timeout: DB_TIMEOUT,
        ..test_settings()
    };
    let server = TestServer::start_in(pool, journal.path(), quick_with(settings)).await;
    let mut answered = 0;
    for concurrency in [8, 32, 128] {
        let latencies = uncached_clicks(&server, concurrency).await;
        answered += latencies.len() as u64;
        let pct = |p: usize| latencies[(latencies.len() - 1) * p / 100];
        println!(
            "{what}, {concurrency} clients, timeout {DB_TIMEOUT:?}: {} clicks, median {:?}, p99 {:?}, max {:?}",
            latencies.len(),
            pct(50),
            pct(99),
            latencies[latencies.len() - 1]
        );
    }
    let metrics = metrics_text(&server.admin_url("")).await;
    assert_eq!(
        route_latency_bucket(&metrics, "/c/{token}", "+Inf"),
        answered,
        "{metrics}"
    );
    assert_eq!(
        route_latency_bucket(&metrics, "/c/{token}", "1"),
        answered,
        "{what}: some clicks waited more than twice --db-timeout-ms (the server's own histogram)"
    );
    server.stop().await;
}

#[tokio::test]
async fn uncached_clicks_answer_within_the_timeout_when_the_database_refuses() {
    no_click_waits_for_two_timeouts(&refusing_address().await, "refused").await;
}

#[tokio::test]
async fn uncached_clicks_answer_within_the_timeout_when_the_database_is_stopped() {
    let (address, listener) = silent_address().await;
    no_click_waits_for_two_timeouts(&address, "stopped").await;
    listener.abort();
}
