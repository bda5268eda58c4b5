//! The tracking routes over real sockets against real MariaDB: redirects,
//! bots, bad tokens, the pixel, unsubscribe pages, hostile requests, health
//! and metrics. Each test runs the app on a task (`common::TestServer`) and
//! talks to it with reqwest (redirects off). Every wait is bounded.

use crate::common::{
    add_link, assert_route_within, client, closed_pool, days_ago, db, expired_token, header,
    metrics_text, quick, seal_of, sealed_token, server_pool, settled_token, today, token_on,
    wait_for_events, TestServer, BROWSER,
};
use chrono::Utc;
use linktrack::store::links::{self, LinkKind, NewLink};
use linktrack::token::Token;
use reqwest::{header, Method, StatusCode};
use std::path::PathBuf;

#[tokio::test]
async fn a_click_redirects_with_privacy_headers_and_head_is_not_a_human_click() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let url = "https://example.com/landing?a=1&b=%C3%A9";
    let token = add_link(&db.pool, LinkKind::Click, url, 1).await;
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();

    let response = http
        .get(server.url(&format!("/c/{token}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(header(&response, header::LOCATION), url);
    assert_eq!(header(&response, header::CACHE_CONTROL), "no-store");
    assert_eq!(header(&response, header::REFERRER_POLICY), "no-referrer");
    assert!(!header(&response, "x-request-id".parse().unwrap()).is_empty());
    assert_eq!(header(&response, header::CONTENT_LENGTH), "0");

    let long_agent = format!("LinkChecker/1.0 {}", "é".repeat(600));
    let head = http
        .head(server.url(&format!("/c/{token}")))
        .header(header::USER_AGENT, long_agent.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::FOUND);
    assert_eq!(header(&head, header::LOCATION), url);

    let stored = wait_for_events(&db.pool, 2).await;
    let humans: Vec<_> = stored.iter().filter(|e| !e.bot).collect();
    assert_eq!(humans.len(), 1, "exactly one human click: {stored:?}");
    assert_eq!(humans[0].kind, "click");
    assert_eq!(humans[0].token, token.to_string());
    assert_eq!(
        humans[0].ip.as_deref(),
        Some("127.0.0.0"),
        "a /24, not the host"
    );
    assert_eq!(humans[0].user_agent.as_deref(), Some(BROWSER));
    let checker = stored.iter().find(|e| e.bot).unwrap();
    let stored_agent = checker.user_agent.clone().unwrap_or_default();
    assert_eq!(
        stored_agent.chars().count(),
        512,
        "user agents are cut to 512"
    );
    assert!(humans[0].link_id.is_some());
    assert!(
        stored
            .iter()
            .any(|e| e.bot_reason.as_deref() == Some("head")),
        "HEAD is kept as a bot event: {stored:?}"
    );
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn bots_are_stored_with_their_reason() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let settled = add_link(&db.pool, LinkKind::Click, "https://example.com/a", 1).await;
    let fresh = sealed_token(&seal_of(&db.pool).await, Utc::now(), LinkKind::Click);
    links::insert(
        &db.pool,
        &[NewLink {
            token: fresh,
            kind: LinkKind::Click,
            mailing_id: "m-1".into(),
            letter_id: 8,
            email: "bob@example.com".into(),
            position: 1,
            url: "https://example.com/b".into(),
            meta: None,
        }],
    )
    .await
    .unwrap();
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();
    let curl = http
        .get(server.url(&format!("/c/{settled}")))
        .header(header::USER_AGENT, "curl/8.5.0")
        .send()
        .await
        .unwrap();
    assert_eq!(
        curl.status(),
        StatusCode::FOUND,
        "bots are answered like people"
    );
    let fast = http
        .get(server.url(&format!("/c/{fresh}")))
        .send()
        .await
        .unwrap();
    assert_eq!(fast.status(), StatusCode::FOUND);

    let stored = wait_for_events(&db.pool, 2).await;
    let reason_of = |t: Token| {
        stored
            .iter()
            .find(|e| e.token == t.to_string())
            .map(|e| (e.bot, e.bot_reason.clone()))
    };
    assert_eq!(reason_of(settled), Some((true, Some("ua:curl".into()))));
    assert_eq!(reason_of(fresh), Some((true, Some("too_fast".into()))));
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn bad_and_expired_tokens_are_answered_without_a_database_read() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    // Any read on a closed pool fails (503), so a 404/410 proves there was none.
    let server = TestServer::start_in(closed_pool(&db).await, dir.path(), quick).await;
    let http = client();
    let good = token_on(today()).to_string();
    let future = token_on(today() + chrono::Days::new(3)).to_string();
    let cases = [
        ("/c/not-a-token".to_owned(), StatusCode::NOT_FOUND),
        (format!("/c/{}", good.to_uppercase()), StatusCode::NOT_FOUND),
        (format!("/c/{}", &good[..31]), StatusCode::NOT_FOUND),
        (format!("/c/{future}"), StatusCode::NOT_FOUND),
        (format!("/c/{}", token_on(days_ago(91))), StatusCode::GONE),
        (format!("/u/{}", token_on(days_ago(400))), StatusCode::GONE),
        (format!("/i/{}", token_on(days_ago(400))), StatusCode::GONE),
    ];
    for (path, expected) in cases {
        let response = http.get(server.url(&path)).send().await.unwrap();
        assert_eq!(response.status(), expected, "{path}");
        let body = response.text().await.unwrap();
        assert!(body.contains("<h1>"), "a human page for {path}: {body}");
    }
    // None of them waited for anything (the server's own latencies).
    let metrics = metrics_text(&server.admin_url("")).await;
    for route in ["/c/{token}", "/u/{token}", "/i/{token}"] {
        assert_route_within(&metrics, route, "1");
    }
    // The control: a well-formed, current token does need the database.
    let response = http
        .get(server.url(&format!("/c/{good}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn an_unknown_token_is_not_found_and_a_wrong_kind_too() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let pixel = add_link(&db.pool, LinkKind::Pixel, "", 0).await;
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();
    for path in [
        format!("/c/{}", settled_token(&db.pool, LinkKind::Click).await),
        format!("/c/{pixel}"),
        "/nowhere".into(),
    ] {
        let response = http.get(server.url(&path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
    }
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn the_pixel_is_always_a_gif_and_counts_opens_of_known_tokens() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let known = add_link(&db.pool, LinkKind::Pixel, "", 0).await;
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();
    let paths = [
        format!("/o/{known}.gif"),
        format!("/o/{}.gif", settled_token(&db.pool, LinkKind::Pixel).await),
        "/o/garbage.gif".to_owned(),
        "/o/%ff%fe".to_owned(),
        format!(
            "/o/{}.gif",
            expired_token(&db.pool, LinkKind::Pixel, 365).await
        ),
    ];
    for path in &paths {
        let response = http.get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(header(&response, header::CONTENT_TYPE), "image/gif");
        assert_eq!(header(&response, header::CACHE_CONTROL), "no-store");
        assert_eq!(header(&response, header::REFERRER_POLICY), "no-referrer");
        // Served past the router or through it (the escaped path), the
        // same headers.
        assert_eq!(header(&response, header::CONTENT_LENGTH), "43", "{path}");
        assert!(!header(&response, "x-request-id".parse().unwrap()).is_empty());
        let body = response.bytes().await.unwrap();
        assert_eq!(body.len(), 43);
        assert!(body.starts_with(b"GIF89a"));
    }
    // A marker: the known pixel once more, after every other request. The
    // journal keeps the order of the hits, so once the marker's open is
    // stored, whatever the other requests journaled is stored too.
    let marker = http
        .get(server.url(&format!("/o/{known}.gif")))
        .send()
        .await
        .unwrap();
    assert_eq!(marker.status(), StatusCode::OK);
    let stored = wait_for_events(&db.pool, 2).await;
    assert_eq!(stored.len(), 2, "only the known pixel's opens: {stored:?}");
    for event in &stored {
        assert_eq!(
            (event.kind.as_str(), event.token.clone()),
            ("open", known.to_string())
        );
    }
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn unsubscribe_confirms_on_get_and_suppresses_on_one_click_post() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let token = add_link(&db.pool, LinkKind::Unsubscribe, "", 0).await;
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();
    let url = server.url(&format!("/u/{token}"));

    let page = http.get(&url).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(html.contains("<form method=\"post\""), "{html}");
    let suppressed = || async {
        sqlx::query_as::<_, (String, String)>(
            "SELECT CONVERT(email USING utf8mb4), reason FROM suppressions",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    assert!(suppressed().await.is_empty(), "a GET never unsubscribes");

    for _ in 0..2 {
        let response = http
            .post(&url)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body("List-Unsubscribe=One-Click")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.text().await.unwrap().contains("unsubscribed"));
    }
    assert_eq!(
        suppressed().await,
        vec![("ann@example.com".to_owned(), "unsubscribe".to_owned())]
    );
    // Both one-click POSTs are recorded (the suppression once); `all` alone
    // would pass on an empty list if the wait ran out.
    let stored = wait_for_events(&db.pool, 2).await;
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert!(stored.iter().all(|e| e.kind == "unsubscribe"), "{stored:?}");
    drop(http);
    server.stop().await;
}

/// Both unsubscribe pages say which subscription the button ends: the
/// masked address and the mailing, HTML-escaped (a mailing id is the
/// sender's text).
#[tokio::test]
async fn unsubscribe_pages_name_the_masked_address_and_the_mailing() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let token = settled_token(&db.pool, LinkKind::Unsubscribe).await;
    let row = NewLink {
        token,
        kind: LinkKind::Unsubscribe,
        mailing_id: "spring <news> & more".into(),
        letter_id: 7,
        email: "Zoe.Long@Example.org".into(),
        position: 0,
        url: String::new(),
        meta: None,
    };
    links::insert(&db.pool, &[row]).await.unwrap();
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();
    let url = server.url(&format!("/u/{token}"));

    let confirm = http.get(&url).send().await.unwrap();
    assert_eq!(confirm.status(), StatusCode::OK);
    let done = http
        .post(&url)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), StatusCode::OK);
    for html in [confirm.text().await.unwrap(), done.text().await.unwrap()] {
        assert!(html.contains("z***@example.org"), "{html}");
        assert!(
            !html.contains("zoe.long"),
            "the local part stays masked: {html}"
        );
        assert!(html.contains("spring &lt;news&gt; &amp; more"), "{html}");
        assert!(!html.contains("<news>"), "{html}");
    }
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn hostile_requests_never_cause_a_server_error() {
    use rand::{Rng, RngExt};
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let good = add_link(&db.pool, LinkKind::Click, "https://example.com/ok", 1).await;
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();
    let valid = good.to_string();
    let mut wrong_version = *good.as_bytes();
    wrong_version[6] = (wrong_version[6] & 0x0f) | 0x40;
    let wrong_version = uuid::Uuid::from_bytes(wrong_version).simple().to_string();
    let long = "a".repeat(16 * 1024);
    let mut rng = rand::rng();
    for i in 0..2_000u32 {
        let mut junk = vec![0u8; rng.random_range(0..200)];
        rng.fill_bytes(&mut junk);
        let junk: String = junk.iter().map(|b| format!("%{b:02x}")).collect();
        let (method, path) = match i % 9 {
            0 => (Method::GET, format!("/c/{junk}")),
            1 => (Method::GET, format!("/c/{long}")),
            2 => (Method::GET, format!("/c/{}g", &valid[..31])),
            3 => (Method::GET, format!("/c/{}", valid.to_uppercase())),
            4 => (Method::GET, format!("/c/{wrong_version}")),
            5 => (Method::from_bytes(b"BREW").unwrap(), format!("/c/{valid}")),
            6 => (Method::DELETE, format!("/u/{valid}")),
            7 => (Method::GET, format!("/o/{junk}.gif")),
            _ => (Method::POST, format!("/i/{junk}")),
        };
        let response = http
            .request(method.clone(), server.url(&path))
            .send()
            .await
            .unwrap();
        assert!(
            !response.status().is_server_error(),
            "{method} {path} answered {}",
            response.status()
        );
    }
    let huge = "x".repeat(64 * 1024);
    let response = http
        .get(server.url(&format!("/c/{valid}")))
        .header("x-huge", huge)
        .send()
        .await;
    if let Ok(response) = response {
        assert!(
            !response.status().is_server_error(),
            "{}",
            response.status()
        );
    }
    let response = http
        .get(server.url(&format!("/c/{valid}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FOUND, "still serving");
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn health_and_metrics_answer() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();
    let health = http.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let ready = http.get(server.admin_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    assert!(ready.text().await.unwrap().contains("\"ok\""));
    let _ = http.get(server.url("/c/zzz")).send().await.unwrap();
    let brew = Method::from_bytes(b"BREW").unwrap();
    let _ = http
        .request(brew, server.url("/c/zzz"))
        .send()
        .await
        .unwrap();
    let metrics = http.get(server.admin_url("/metrics")).send().await.unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    let text = metrics.text().await.unwrap();
    assert!(text.contains("linktrack_http_requests_total"), "{text}");
    assert!(text.contains("route=\"/c/{token}\""), "{text}");
    assert!(text.contains("method=\"other\""), "{text}");
    assert!(
        !text.contains("BREW"),
        "client-chosen methods are no labels"
    );
    assert!(
        text.contains("linktrack_http_request_duration_seconds_bucket"),
        "{text}"
    );
    for operators_only in ["/readyz", "/metrics"] {
        let public = http.get(server.url(operators_only)).send().await.unwrap();
        assert_eq!(
            public.status(),
            StatusCode::NOT_FOUND,
            "{operators_only} answers on the admin listener only"
        );
    }
    let admin_health = http.get(server.admin_url("/healthz")).send().await.unwrap();
    assert_eq!(admin_health.status(), StatusCode::OK);
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn a_scanner_walking_every_link_of_a_letter_is_a_burst() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let mut tokens = Vec::new();
    for position in 1..=3 {
        let url = format!("https://example.com/{position}");
        tokens.push(add_link(&db.pool, LinkKind::Click, &url, position).await);
    }
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();
    for token in &tokens {
        let response = http
            .get(server.url(&format!("/c/{token}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FOUND);
    }
    let stored = wait_for_events(&db.pool, 3).await;
    let verdict = |t: &Token| {
        stored
            .iter()
            .find(|e| e.token == t.to_string())
            .and_then(|e| e.bot_reason.clone())
    };
    assert_eq!(verdict(&tokens[0]), None);
    assert_eq!(verdict(&tokens[1]), None);
    assert_eq!(verdict(&tokens[2]).as_deref(), Some("burst"));
    drop(http);
    server.stop().await;
}

#[test]
fn serve_flags_parse_with_defaults() {
    use clap::Parser;
    use linktrack::cli::args::{Cli, Command};
    let cli = Cli::try_parse_from([
        "linktrack",
        "serve",
        "--journal",
        "/var/lib/lt",
        "--keep-days",
        "30",
    ])
    .unwrap();
    let Command::Serve(args) = cli.command else {
        panic!("not serve");
    };
    assert_eq!(args.journal, PathBuf::from("/var/lib/lt"));
    assert_eq!(args.keep_days, 30);
    assert!(!args.trust_forwarded_for);
    assert!(args.db_timeout_ms > 0);
    assert!(
        args.admin_listen.ip().is_loopback(),
        "metrics and readiness stay off the network by default"
    );
}
