//! Slow and abusive clients against the real server on a real socket: a
//! connection that never finishes its headers is cut after the header
//! timeout (and so is an idle keep-alive one) while other clients are
//! served; oversized headers get 431; the connection cap holds new
//! connections back until one closes.

use crate::common::{metric_value, TestDb, TestServer};
use linktrack::server::listen::ConnectionLimits;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn app_with(db: &TestDb, limits: ConnectionLimits) -> TestServer {
    TestServer::start(db.pool.clone(), |settings| linktrack::server::AppSettings {
        connections: limits,
        ..settings
    })
    .await
}

/// A raw connection to the app that has sent `bytes`.
async fn connect_and_send(app: &TestServer, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(app.base.trim_start_matches("http://"))
        .await
        .unwrap();
    stream.write_all(bytes).await.unwrap();
    stream
}

/// The admin listener's `/metrics` text.
async fn metrics(app: &TestServer) -> String {
    crate::common::metrics_text(&app.admin).await
}

const COMPLETE: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";

/// Read until the server closes the connection; returns what it sent, or
/// `None` if it was still open after `wait`.
async fn read_until_closed(stream: &mut TcpStream, wait: Duration) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(received),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn a_slow_header_connection_is_closed_after_the_timeout_while_others_are_served() {
    let db = TestDb::new().await;
    let limits = ConnectionLimits {
        header_timeout: Duration::from_millis(600),
        ..ConnectionLimits::default()
    };
    let app = app_with(&db, limits).await;
    // Slowloris: a request line and one header, then nothing.
    let mut slow = Vec::new();
    for _ in 0..20 {
        slow.push(connect_and_send(&app, b"GET /healthz HTTP/1.1\r\nHost: t\r\n").await);
    }
    // An idle keep-alive connection: one complete request, then silence.
    let mut idle = connect_and_send(&app, COMPLETE).await;
    let mut first = [0u8; 17];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200 OK\r\n");

    // Meanwhile, and past the timeout, normal clients get their answers.
    let http = reqwest::Client::new();
    let served_until = Instant::now() + Duration::from_millis(1_200);
    let mut answered = 0;
    while Instant::now() < served_until {
        let response = http.get(format!("{}/healthz", app.base)).send().await;
        assert_eq!(response.unwrap().status(), reqwest::StatusCode::OK);
        answered += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(answered > 10, "{answered} normal requests");

    for (n, stream) in slow.iter_mut().enumerate() {
        let sent = read_until_closed(stream, Duration::from_secs(5)).await;
        let sent = sent.unwrap_or_else(|| panic!("slow connection {n} is still open"));
        assert!(sent.is_empty(), "no answer to half a request: {sent:?}");
    }
    let rest = read_until_closed(&mut idle, Duration::from_secs(5)).await;
    assert!(rest.is_some(), "the idle keep-alive connection is closed");

    // Counted once the server side has closed too.
    let cut = "linktrack_connections_cut_total{reason=\"header_timeout\"}";
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut text = metrics(&app).await;
    while !text.contains(cut) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        text = metrics(&app).await;
    }
    assert!(text.contains(cut), "{text}");
    app.stop().await;
}

#[tokio::test]
async fn oversized_headers_are_answered_431() {
    let db = TestDb::new().await;
    let app = app_with(&db, ConnectionLimits::default()).await;
    let http = reqwest::Client::new();
    let response = http
        .get(format!("{}/healthz", app.base))
        .header("x-padding", "p".repeat(20 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        reqwest::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
    );
    let response = http
        .get(format!("{}/healthz", app.base))
        .header("x-padding", "p".repeat(8 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::OK, "8 KiB is fine");
    app.stop().await;
}

#[tokio::test]
async fn at_the_connection_cap_new_connections_wait_until_one_closes() {
    let db = TestDb::new().await;
    let limits = ConnectionLimits {
        max_connections: 2,
        header_timeout: Duration::from_secs(30),
        ..ConnectionLimits::default()
    };
    let app = app_with(&db, limits).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = connect_and_send(&app, COMPLETE).await;
        let mut status = [0u8; 12];
        stream.read_exact(&mut status).await.unwrap();
        assert_eq!(&status, b"HTTP/1.1 200");
        held.push(stream);
    }
    // The accept loop found no permit and waits for one: its own counter,
    // counted just before it waits, says so (rather than a while waited).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = metrics(&app).await;
        let reached = metric_value(&text, "linktrack_connection_cap_reached_total");
        if reached.is_some_and(|n| n >= 1.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cap was never reached: {text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A third connection (the kernel completes its handshake) sends its
    // request: nothing comes back while both others are held.
    let mut third = connect_and_send(&app, COMPLETE).await;
    let mut status = [0u8; 12];
    assert!(
        matches!(third.try_read(&mut status), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a third connection is not served"
    );
    drop(held.pop());
    tokio::time::timeout(Duration::from_secs(5), third.read_exact(&mut status))
        .await
        .expect("served once a connection closed")
        .unwrap();
    assert_eq!(&status, b"HTTP/1.1 200");
    let text = metrics(&app).await;
    assert!(
        text.contains("linktrack_connection_cap_reached_total"),
        "{text}"
    );
    drop(held);
    app.stop().await;
}
