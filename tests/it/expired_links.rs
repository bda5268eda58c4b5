//! Issue 27 end to end: a built letter's links after retention took their
//! day. Build through the real builder, serve, click; then empty the day's
//! partitions of `links` and `events` the way `partitions rotate` drops
//! them (the partition itself stays: today's must keep taking inserts),
//! start a fresh server (a cold cache, as months later) and use every link
//! of the letter again.

use crate::common::build::{options, tracked_tokens, BASE};
use crate::common::image_upstream::upstream;
use crate::common::{client, quick_with, server_pool, test_settings, wait_for_events, TestServer};
use crate::common::{today, TestDb};
use linktrack::builder;
use linktrack::server::image::AddressPolicy;
use linktrack::store::links::LinkKind;
use linktrack::store::partitions::partition_name;
use linktrack::token::Token;
use reqwest::{header, StatusCode};
use sqlx::MySqlPool;

const READER: &str = "reader-27@example.com";
const TARGET: &str = "https://example.com/spring?utm=1";

/// Every row of every table of this database that holds `needle` in a
/// text column, as `table.column`.
async fn rows_holding(pool: &MySqlPool, needle: &str) -> Vec<String> {
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(TABLE_NAME AS CHAR), CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND DATA_TYPE IN \
           ('char','varchar','text','mediumtext','longtext','json','blob','mediumblob','longblob','varbinary')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut found = Vec::new();
    for (table, column) in columns {
        let sql = format!(
            "SELECT COUNT(*) FROM `{table}` WHERE LOCATE(?, CAST(`{column}` AS CHAR CHARACTER SET utf8mb4)) > 0"
        );
        let n: i64 = sqlx::query_scalar(&sql)
            .bind(needle)
            .fetch_one(pool)
            .await
            .unwrap();
        if n > 0 {
            found.push(format!("{table}.{column}"));
        }
    }
    found
}

fn token_of(tokens: &[(LinkKind, Token)], kind: LinkKind) -> Token {
    tokens
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("the letter has a {kind} link"))
}

#[tokio::test]
async fn a_built_letter_keeps_working_after_its_day_is_dropped_and_names_nobody() {
    let db = TestDb::new().await;
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let mailing = dir.path().join("mailing.json");
    let html = format!(
        "<p>Hi {{{{ first_name }}}} <a href=\"{TARGET}\">spring</a> <img src=\"{}/img.png\" alt=\"\"></p>",
        up.base
    );
    let file = serde_json::json!({
        "mailing_id": "m-27",
        "subject": "Spring",
        "from": "News <news@example.com>",
        "html": html,
        "proxy_images": true,
        // The honeypot is a /c/ link too: without it the letter's one
        // click token is the reader's link.
        "honeypot": false,
        "list_manage_url": "mailto:lists@example.com",
    });
    std::fs::write(&mailing, file.to_string()).unwrap();
    let recipients = dir.path().join("r.jsonl");
    std::fs::write(
        &recipients,
        format!("{{\"email\":\"{READER}\",\"first_name\":\"Ann\"}}\n"),
    )
    .unwrap();
    let summary = builder::run(&db.pool, &options(dir.path(), mailing, recipients))
        .await
        .unwrap();
    assert_eq!(summary.letters_built, 1);
    let letter: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(dir.path().join("letters.jsonl"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    let html = letter["html"].as_str().unwrap();
    let list_unsubscribe = letter["headers"]["List-Unsubscribe"].as_str().unwrap();
    let tokens = tracked_tokens(&format!("{html} {list_unsubscribe}"));
    let (click, image, pixel, unsubscribe) = (
        token_of(&tokens, LinkKind::Click),
        token_of(&tokens, LinkKind::Image),
        token_of(&tokens, LinkKind::Pixel),
        token_of(&tokens, LinkKind::Unsubscribe),
    );
    assert!(html.contains(BASE));

    let mut settings = test_settings();
    settings.images.policy = AddressPolicy::AllowLoopback;
    let journal = tempfile::tempdir().unwrap();
    let http = client();

    // While the row lives: a click of the reader, recorded with the address.
    let server = TestServer::start_in(
        server_pool(&db).await,
        journal.path(),
        quick_with(settings.clone()),
    )
    .await;
    let live = http
        .get(server.url(&format!("/c/{click}")))
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), StatusCode::FOUND);
    assert_eq!(live.headers()[header::LOCATION], TARGET);
    let events = wait_for_events(&db.pool, 1).await;
    assert_eq!(events.len(), 1);
    server.stop().await;
    assert!(!rows_holding(&db.pool, READER).await.is_empty());

    // Retention takes the day: its link rows and events are gone.
    let day = partition_name(today());
    for table in ["links", "events"] {
        sqlx::query(&format!("ALTER TABLE {table} TRUNCATE PARTITION {day}"))
            .execute(&db.pool)
            .await
            .unwrap();
    }

    let server =
        TestServer::start_in(server_pool(&db).await, journal.path(), quick_with(settings)).await;
    let late = http
        .get(server.url(&format!("/c/{click}")))
        .send()
        .await
        .unwrap();
    assert_eq!(
        late.status(),
        StatusCode::FOUND,
        "an old letter's click still leads"
    );
    assert_eq!(late.headers()[header::LOCATION], TARGET);
    let picture = http
        .get(server.url(&format!("/i/{image}")))
        .send()
        .await
        .unwrap();
    assert_eq!(picture.status(), StatusCode::OK);
    assert_eq!(picture.text().await.unwrap(), "PNGDATA");
    let gif = http
        .get(server.url(&format!("/o/{pixel}.gif")))
        .send()
        .await
        .unwrap();
    assert_eq!(gif.status(), StatusCode::OK);
    assert_eq!(gif.headers()[header::CONTENT_TYPE], "image/gif");
    let page = http
        .post(server.url(&format!("/u/{unsubscribe}")))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let page = page.text().await.unwrap();
    assert!(page.contains("href=\"mailto:lists@example.com\""), "{page}");
    // A made-up template id under the same date: unknown.
    let seal = crate::common::seal_of(&db.pool).await;
    let forged = seal.seal(
        chrono::Utc::now(),
        linktrack::token::Plaintext::issue(linktrack::kind::TokenKind::Click, 987_654, 1),
    );
    let forged = http
        .get(server.url(&format!("/c/{forged}")))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::NOT_FOUND);
    // The late click is recorded for the mailing, naming nobody.
    let events = wait_for_events(&db.pool, 1).await;
    server.stop().await;
    assert_eq!(events.len(), 1, "{events:?}");
    let (mailing_id, email, position): (Option<String>, Option<String>, Option<u32>) =
        sqlx::query_as("SELECT mailing_id, email, position FROM events")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (mailing_id.as_deref(), email, position),
        (Some("m-27"), None, Some(1))
    );

    // Nothing personal survived retention, in any table.
    assert_eq!(rows_holding(&db.pool, READER).await, Vec::<String>::new());
}
