//! Clicks without the database (docs/serve.md, "Clicks without the
//! database"): a server keeps the link templates of live mailings in
//! memory, so with MariaDB unreachable every click whose target is the
//! same in every letter still redirects to it, pixels and unsubscribe
//! pages answer, personalised targets answer 503 with Retry-After, and
//! every hit is journaled and stored exactly once when the database is
//! back. The outage is a TCP relay in front of MariaDB that the test cuts.

use crate::common::build::{options, tracked_tokens};
use crate::common::wait::{self, PATIENCE};
use crate::common::{client, events, metric_value, metrics_text, quick_with, test_settings};
use crate::common::{TestDb, TestServer};
use crate::server_outages::FlakyDatabase;
use linktrack::builder;
use linktrack::server::state::ServerSettings;
use linktrack::store::links::LinkKind;
use linktrack::store::{self, PoolSettings};
use linktrack::token::Token;
use reqwest::{header, StatusCode};
use std::collections::HashMap;
use std::time::Duration;

const READERS: usize = 8;
const STATIC_LINKS: usize = 5;

/// Build one mailing of [`READERS`] letters, each with [`STATIC_LINKS`]
/// links written out in the source and one made from the reader's name;
/// every tracked token of the letters, with its kind.
async fn build(db: &TestDb, dir: &std::path::Path) -> Vec<(LinkKind, Token)> {
    let mut html = String::from("<p>Hi {{ first_name }}</p>");
    for n in 0..STATIC_LINKS {
        html.push_str(&format!(
            "<p><a href=\"https://shop.example.com/p{n}?ref=news\">product {n}</a></p>"
        ));
    }
    html.push_str("<p><a href=\"https://shop.example.com/for/{{ first_name }}\">yours</a></p>");
    let mailing = dir.join("mailing.json");
    let file = serde_json::json!({
        "mailing_id": "m-offline",
        "subject": "Offline",
        "from": "News <news@example.com>",
        "html": html,
        "honeypot": false,
    });
    std::fs::write(&mailing, file.to_string()).unwrap();
    let recipients = dir.join("r.jsonl");
    let lines: String = (0..READERS)
        .map(|n| format!("{{\"email\":\"reader{n}@example.com\",\"first_name\":\"R{n}\"}}\n"))
        .collect();
    std::fs::write(&recipients, lines).unwrap();
    let summary = builder::run(&db.pool, &options(dir, mailing, recipients))
        .await
        .unwrap();
    assert_eq!(summary.letters_built, READERS as u64);
    let letters = std::fs::read_to_string(dir.join("letters.jsonl")).unwrap();
    let mut tokens: Vec<(LinkKind, Token)> = letters
        .lines()
        .flat_map(|line| {
            let letter: serde_json::Value = serde_json::from_str(line).unwrap();
            let html = letter["html"].as_str().unwrap().to_owned();
            tracked_tokens(&format!("{html} {}", letter["headers"]))
        })
        .collect();
    tokens.sort();
    tokens.dedup();
    tokens
}

/// The URL of every click link's row, by token.
async fn click_targets(db: &TestDb) -> HashMap<Token, String> {
    let rows: Vec<(Vec<u8>, String)> =
        sqlx::query_as("SELECT uuid, url FROM links WHERE kind = 'click'")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    rows.into_iter()
        .map(|(uuid, url)| (Token::from_bytes(&uuid).unwrap(), url))
        .collect()
}

/// Poll the server's gauge until it holds at least `n` templates.
async fn wait_for_templates(server: &TestServer, n: f64) {
    let admin = server.admin_url("");
    wait::eventually(PATIENCE, "the offline templates loaded", || async {
        let text = metrics_text(&admin).await;
        if metric_value(&text, "linktrack_offline_targets").is_some_and(|held| held >= n) {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await;
}

#[tokio::test]
async fn with_the_database_unreachable_clicks_redirect_and_land_once_it_is_back() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = build(&db, dir.path()).await;
    let targets = click_targets(&db).await;
    let of = |kind: LinkKind| -> Vec<Token> {
        tokens
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, t)| *t)
            .collect()
    };
    let (static_clicks, personal_clicks): (Vec<Token>, Vec<Token>) = of(LinkKind::Click)
        .into_iter()
        .partition(|token| !targets[token].contains("/for/"));
    assert_eq!(static_clicks.len(), READERS * STATIC_LINKS);
    assert_eq!(personal_clicks.len(), READERS);
    let pixels = of(LinkKind::Pixel);
    let unsubscribes = of(LinkKind::Unsubscribe);
    assert_eq!((pixels.len(), unsubscribes.len()), (READERS, READERS));

    let flaky = FlakyDatabase::start().await;
    let pool_settings = PoolSettings {
        max_connections: 4,
        acquire_timeout: Duration::from_millis(500),
    };
    let pool = store::connect(&flaky.url(&db), &pool_settings)
        .await
        .unwrap();
    let settings = ServerSettings {
        db_timeout: Duration::from_millis(800),
        ..test_settings()
    };
    let journal = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(pool, journal.path(), quick_with(settings)).await;
    // The mailing's templates: its links, the pixel and the unsubscribe link.
    wait_for_templates(&server, (STATIC_LINKS + 2) as f64).await;
    flaky.go_down();

    let http = client();
    let get = |path: String| http.get(server.url(&path)).send();
    let mut redirected = 0;
    for token in &static_clicks {
        let response = get(format!("/c/{token}")).await.unwrap();
        assert_eq!(response.status(), StatusCode::FOUND, "{token}");
        assert_eq!(
            response.headers()[header::LOCATION],
            targets[token].as_str()
        );
        redirected += 1;
    }
    assert_eq!(redirected, READERS * STATIC_LINKS);
    for token in &personal_clicks {
        let response = get(format!("/c/{token}")).await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "{token}"
        );
        let retry_after = response.headers()[header::RETRY_AFTER].to_str().unwrap();
        assert!(retry_after.parse::<u64>().is_ok(), "{retry_after}");
    }
    for token in &pixels {
        let response = get(format!("/o/{token}.gif")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "image/gif");
    }
    let page = get(format!("/u/{}", unsubscribes[0])).await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("m-offline"));
    assert!(
        events(&db.pool).await.is_empty(),
        "nothing stored while away"
    );

    flaky.come_up();
    let expected = static_clicks.len() + pixels.len();
    let what = format!("{expected} events stored once the database is back");
    let stored = wait::eventually(PATIENCE, &what, || async {
        let stored = events(&db.pool).await;
        if stored.len() >= expected {
            Ok(stored)
        } else {
            Err(format!("{} stored", stored.len()))
        }
    })
    .await;
    let mut per_token: HashMap<&str, usize> = HashMap::new();
    for event in &stored {
        *per_token.entry(event.token.as_str()).or_default() += 1;
        assert!(
            event.link_id.is_some_and(|id| id > 0),
            "named its link: {event:?}"
        );
    }
    for token in static_clicks.iter().chain(&pixels) {
        assert_eq!(
            per_token.get(token.to_string().as_str()),
            Some(&1),
            "{token}"
        );
    }
    assert_eq!(stored.len(), expected, "each hit once");
    let letters_named: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM events WHERE kind = 'click' AND letter_id IS NOT NULL \
         AND email LIKE 'reader%'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        letters_named,
        static_clicks.len() as i64,
        "the replay named each reader"
    );
    drop(http);
    server.stop().await;
}
