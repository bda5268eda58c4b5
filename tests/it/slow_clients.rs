//! Slow and abusive clients against the real server on a real socket: a
//! connection that never finishes its headers is cut after the header
//! timeout (and so is an idle keep-alive one) while other clients are
//! served; oversized headers get 431; the connection cap holds new
//! connections back until one closes.

use crate::common::slow_login::trickle_a_login_body;
use crate::common::wait::{self, eventually, never_within, PATIENCE};
use crate::common::{metric_value, TestDb, TestServer};
use linktrack::server::listen::ConnectionLimits;
use std::time::Duration;
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

/// Read until the server closes the connection (or resets it); returns
/// what it sent, or `None` if it was still open after [`PATIENCE`] (a
/// ceiling, not a measurement).
async fn read_until_closed(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let read = stream.read_to_end(&mut received);
    match tokio::time::timeout(wait::scaled(PATIENCE), read).await {
        Err(_) => None,
        Ok(_) => Some(received),
    }
}

/// `linktrack_connections_cut_total{reason="header_timeout"}` in `/metrics`.
async fn cut_at_header_timeout(app: &TestServer) -> f64 {
    let text = metrics(app).await;
    metric_value(
        &text,
        "linktrack_connections_cut_total{reason=\"header_timeout\"}",
    )
    .unwrap_or(0.0)
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

    // Meanwhile, normal clients get their answers: one each time the cut
    // counter is read, until the server has cut the 20 slow connections at
    // the header timeout (its own counter, counted once its side closed)...
    let http = reqwest::Client::new();
    let healthz = format!("{}/healthz", app.base);
    let mut answered = 0;
    eventually(PATIENCE, "20 slow connections cut", || {
        let request = http.get(&healthz).send();
        answered += 1;
        let app = &app;
        async move {
            assert_eq!(request.await.unwrap().status(), reqwest::StatusCode::OK);
            match cut_at_header_timeout(app).await {
                cut if cut >= 20.0 => Ok(()),
                cut => Err(cut),
            }
        }
    })
    .await;
    // ...and past it.
    let response = http.get(&healthz).send().await.unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    assert!(answered >= 1, "{answered} normal requests");

    for (n, stream) in slow.iter_mut().enumerate() {
        let sent = read_until_closed(stream).await;
        let sent = sent.unwrap_or_else(|| panic!("slow connection {n} is still open"));
        assert!(sent.is_empty(), "no answer to half a request: {sent:?}");
    }
    let rest = read_until_closed(&mut idle).await;
    assert!(rest.is_some(), "the idle keep-alive connection is closed");
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
    eventually(PATIENCE, "the connection cap reached", || async {
        let text = metrics(&app).await;
        match metric_value(&text, "linktrack_connection_cap_reached_total") {
            Some(reached) if reached >= 1.0 => Ok(()),
            _ => Err(text),
        }
    })
    .await;
    // A third connection (the kernel completes its handshake) sends its
    // request: nothing comes back while both others are held. The window
    // is many times what the two held connections' answers took (a
    // `/healthz` answer is written within milliseconds of its request), so
    // a third connection served at once would be seen.
    let mut third = connect_and_send(&app, COMPLETE).await;
    let mut status = [0u8; 12];
    never_within(Duration::from_secs(1), "a third connection served", || {
        let read = third.try_read(&mut status);
        async move {
            match read {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
                other => Err(other),
            }
        }
    })
    .await;
    drop(held.pop());
    tokio::time::timeout(wait::scaled(PATIENCE), third.read_exact(&mut status))
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

/// Issue 43, item 1: the login form's body is read within a deadline (the
/// header timeout) and a size; a body trickled in a byte at a time is cut
/// with 408, and while 200 such clients keep coming back, every click is
/// answered. How long the clicks take beside the slow bodies, against the
/// same server idle, is a speed figure: `bench_outages --slow-bodies 200`
/// measures it (docs/benchmarks.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_request_bodies_are_cut_while_clicks_are_answered() {
    use crate::common::{client, stats_api::SECRET};
    use linktrack::store::links::LinkKind;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let db = TestDb::with_days_since(crate::common::days_ago(1)).await;
    // The login is on, so LINKTRACK_SECRET is set: it keys the token seal
    // too, and the click's token is sealed with it.
    let seal = linktrack::store::link_templates::load_seal(&db.pool, Some(SECRET))
        .await
        .unwrap();
    let click = crate::common::sealed_token(
        &seal,
        chrono::Utc::now() - chrono::Duration::hours(1),
        LinkKind::Click,
    );
    linktrack::store::links::insert(&db.pool, &[crate::common::click_link(click, 1)])
        .await
        .unwrap();
    let limits = ConnectionLimits {
        header_timeout: Duration::from_secs(2),
        ..ConnectionLimits::default()
    };
    let app = TestServer::start(db.pool.clone(), |settings| linktrack::server::AppSettings {
        connections: limits,
        api_token: Some("slow-body-test-token-0123456789".to_owned()),
        secret: Some(SECRET.to_owned()),
        ..settings
    })
    .await;
    let click_url = app.url(&format!("/c/{click}"));
    let http = client();
    assert_eq!(http.get(&click_url).send().await.unwrap().status(), 302);

    let stop = Arc::new(AtomicBool::new(false));
    let cut_with_408 = Arc::new(AtomicUsize::new(0));
    let mut slow = tokio::task::JoinSet::new();
    let address = app.base.trim_start_matches("http://").to_owned();
    for _ in 0..200 {
        let (stop, cut, address) = (stop.clone(), cut_with_408.clone(), address.clone());
        slow.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if trickle_a_login_body(address.as_str(), wait::scaled(PATIENCE)).await {
                    cut.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    // Every slow body is cut with 408 (200 cuts: the clients have met the
    // body deadline and come back), rather than a while waited.
    eventually(PATIENCE, "200 slow bodies cut with 408", || {
        let cut = cut_with_408.load(Ordering::Relaxed);
        async move {
            if cut >= 200 {
                Ok(())
            } else {
                Err(cut)
            }
        }
    })
    .await;
    // While they keep trickling, every click is answered.
    let answered = click_many(&http, &click_url, 1_000).await;
    let cut_by_then = cut_with_408.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    slow.join_all().await;
    assert_eq!(
        answered, 1_000,
        "every click answered beside the slow bodies"
    );
    // The slow clients were still being cut with 408 after the clicks:
    // they were there all along, none got its body read.
    let cut = cut_with_408.load(Ordering::Relaxed);
    assert!(
        cut > cut_by_then,
        "the slow bodies outlasted the clicks: {cut}"
    );
    // The server counted them too.
    let text = metrics(&app).await;
    let refused = metric_value(
        &text,
        "linktrack_request_bodies_refused_total{reason=\"too_slow\"}",
    );
    assert!(
        refused.is_some_and(|n| n >= cut as f64),
        "{cut} cut: {refused:?}\n{text}"
    );
    app.stop().await;
}

/// With the dashboard off, `/login` answers 404 before reading any of the
/// body: a slow body is not waited for.
#[tokio::test]
async fn a_body_to_a_route_that_is_off_is_not_read() {
    let db = TestDb::new().await;
    let app = app_with(&db, ConnectionLimits::default()).await;
    let mut stream = connect_and_send(
        &app,
        b"POST /login HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\ntoken=",
    )
    .await;
    // The body is far from complete; the answer comes anyway.
    let sent = read_until_closed(&mut stream).await;
    let sent =
        String::from_utf8_lossy(&sent.expect("answered and closed before the body")).into_owned();
    assert!(sent.starts_with("HTTP/1.1 404"), "{sent}");
    app.stop().await;
}

/// `n` clicks, 10 at a time; how many were answered 302 within 8 s each.
async fn click_many(http: &reqwest::Client, url: &str, n: usize) -> usize {
    let mut answered = 0;
    for _ in 0..n / 10 {
        let mut batch = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let request = http.get(url).timeout(Duration::from_secs(8)).send();
            batch.spawn(async move { request.await.is_ok_and(|r| r.status() == 302) });
        }
        answered += batch.join_all().await.into_iter().filter(|ok| *ok).count();
    }
    answered
}
