//! Uncached clicks while the database is away answer 503 with
//! `Retry-After`, at any concurrency: every click is answered, none is
//! left waiting, and each is one lookup.
//!
//! The "database" is one the test controls: a port that refuses
//! connections (a listener bound and closed), and a listener that accepts
//! and never answers (a stopped server). How long the clicks take against
//! `--db-timeout-ms` (a click's wait starts when it arrives, not when a
//! lookup slot frees up, so none may wait for two timeouts) is a latency
//! figure: `bench_outages --outages refused,stopped` measures it beside
//! the same clicks with the database up (docs/benchmarks.md).

use crate::common::{client, quick_with, test_settings, TestServer};
use crate::common::{metric_value, metrics_text, route_latency_bucket};
use chrono::Utc;
use linktrack::store::{self, PoolSettings};
use linktrack::token::Token;
use reqwest::{header, StatusCode};
use std::time::Duration;

const DB_TIMEOUT: Duration = Duration::from_millis(500);

/// Clicks each client sends one after the other: with every client busy,
/// clicks keep arriving while earlier ones wait (as from a load
/// generator), for several timeouts in a row.
const CLICKS_PER_CLIENT: usize = 4;

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

/// `concurrency` clients each clicking [`CLICKS_PER_CLIENT`] tokens no
/// cache holds, one after the other; every answer must be a 503 with
/// Retry-After (the client gives up after its own 10 s: a click left
/// waiting fails the test). Returns how many were answered.
async fn uncached_clicks(server: &TestServer, concurrency: usize) -> u64 {
    let http = client();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (http, base) = (http.clone(), server.url(""));
        clients.spawn(async move {
            for _ in 0..CLICKS_PER_CLIENT {
                let token = Token::at(Utc::now() - chrono::Duration::minutes(60));
                let response = http.get(format!("{base}/c/{token}")).send().await.unwrap();
                assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
                assert!(response.headers().contains_key(header::RETRY_AFTER));
            }
            CLICKS_PER_CLIENT as u64
        });
    }
    clients.join_all().await.into_iter().sum()
}

async fn every_click_is_answered_503(database: &str, what: &str) {
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
        answered += uncached_clicks(&server, concurrency).await;
    }
    assert_eq!(answered, (8 + 32 + 128) * CLICKS_PER_CLIENT as u64);
    let metrics = metrics_text(&server.admin_url("")).await;
    assert_eq!(
        route_latency_bucket(&metrics, "/c/{token}", "+Inf"),
        answered,
        "{what}: the server counted every click: {metrics}"
    );
    // Each click asked the shared lookups once: none was answered without
    // asking, none asked again.
    assert_eq!(
        metric_value(&metrics, "linktrack_link_lookups_total"),
        Some(answered as f64),
        "{what}: one lookup a click: {metrics}"
    );
    server.stop().await;
}

#[tokio::test]
async fn uncached_clicks_are_answered_503_when_the_database_refuses() {
    every_click_is_answered_503(&refusing_address().await, "refused").await;
}

#[tokio::test]
async fn uncached_clicks_are_answered_503_when_the_database_is_stopped() {
    let (address, listener) = silent_address().await;
    every_click_is_answered_503(&address, "stopped").await;
    listener.abort();
}
