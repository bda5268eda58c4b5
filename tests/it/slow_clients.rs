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

/// Issue 43, item 1: the login form's body is read within a deadline (the
/// header timeout) and a size; a body trickled in a byte at a time is cut
/// with 408, and while 200 such clients keep coming back, every click is
/// answered and none waits behind a slow body: the clicks' p99 (the
/// server's own histogram) stays far under the body deadline a click
/// queued behind the slow bodies would wait for. How close it stays to
/// the idle p99 is a speed figure, printed here and measured by the
/// benches, not asserted (a ratio of milliseconds on shared cores is
/// noise: 4 ms against 0.96 ms failed a CI run).
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
    // Warm: the link cached, so clicks measure the server, not a first read.
    assert_eq!(http.get(&click_url).send().await.unwrap().status(), 302);

    let idle_before = metrics(&app).await;
    let idle_answered = click_many(&http, &click_url, 1_000).await;
    let idle_after = metrics(&app).await;

    let stop = Arc::new(AtomicBool::new(false));
    let cut_with_408 = Arc::new(AtomicUsize::new(0));
    let mut slow = tokio::task::JoinSet::new();
    let address = app.base.trim_start_matches("http://").to_owned();
    for _ in 0..200 {
        let (stop, cut, address) = (stop.clone(), cut_with_408.clone(), address.clone());
        slow.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if trickle_a_login_body(&address).await {
                    cut.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    // Past one body deadline, so cut clients have come back.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let loaded_before = metrics(&app).await;
    let loaded_answered = click_many(&http, &click_url, 1_000).await;
    let loaded_after = metrics(&app).await;
    stop.store(true, Ordering::Relaxed);
    slow.join_all().await;
    // Idle again: the machine is shared, so the baseline is the larger of
    // two idle runs around the loaded one, not one taken at a quiet moment.
    let again_before = metrics(&app).await;
    let again_answered = click_many(&http, &click_url, 1_000).await;
    let again_after = metrics(&app).await;

    assert_eq!(
        idle_answered + again_answered,
        2_000,
        "every idle click answered"
    );
    assert_eq!(
        loaded_answered, 1_000,
        "every click answered beside the slow bodies"
    );
    let idle = click_p99(&idle_before, &idle_after).max(click_p99(&again_before, &again_after));
    let loaded = click_p99(&loaded_before, &loaded_after);
    let cut = cut_with_408.load(Ordering::Relaxed);
    println!("click p99 idle {idle:.6} s, beside 200 slow bodies {loaded:.6} s; {cut} slow bodies cut with 408");
    assert!(cut >= 200, "every slow body is cut with 408: {cut}");
    let deadline = limits.header_timeout.as_secs_f64();
    assert!(
        loaded < deadline / 4.0,
        "clicks waited behind the slow bodies: p99 {loaded:.6} s (idle {idle:.6} s), body deadline {deadline} s"
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
    let sent = read_until_closed(&mut stream, Duration::from_secs(5)).await;
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

/// One slow client: a login form's headers, then one byte every 200 ms of
/// a 1,000-byte body. True when the server answered 408 and closed.
async fn trickle_a_login_body(address: &str) -> bool {
    let Ok(stream) = TcpStream::connect(address).await else {
        return false;
    };
    let (mut read, mut write) = stream.into_split();
    let head = b"POST /login HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ntoken=";
    if write.write_all(head).await.is_err() {
        return false;
    }
    let trickle = async {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if write.write_all(b"x").await.is_err() {
                break;
            }
        }
    };
    let mut answer = Vec::new();
    tokio::select! {
        _ = read.read_to_end(&mut answer) => {}
        () = trickle => {}
        () = tokio::time::sleep(Duration::from_secs(30)) => return false,
    }
    answer.starts_with(b"HTTP/1.1 408")
}

/// The p99 of `/c/{token}` between two `/metrics` texts, interpolated
/// within the histogram's buckets as Prometheus' `histogram_quantile` does.
fn click_p99(before: &str, after: &str) -> f64 {
    let les = [
        "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
        "2.5", "+Inf",
    ];
    let count = |le: &str| {
        crate::common::route_latency_bucket(after, "/c/{token}", le)
            - crate::common::route_latency_bucket(before, "/c/{token}", le)
    };
    let total = count("+Inf") as f64;
    let rank = 0.99 * total;
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
