//! The parts together: build the fixture mailing, click through the real
//! server, let its rollup worker count the click, read it back from the
//! stats API that the same server mounts, and see Redis in `/readyz` on the
//! admin listener.

use crate::common::wait::{eventually, PATIENCE};
use crate::common::{TestDb, TestServer};
use linktrack::journal::segments::JournalSettings;
use linktrack::live::Live;
use linktrack::server::{App, AppSettings};
use serde_json::Value;
use std::time::Duration;

#[tokio::test]
async fn a_click_on_a_built_letter_shows_in_the_stats_api_of_the_same_server() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let built = linktrack::demo::prepare(
        &db.url,
        &base,
        None,
        &dir.path().join("demo"),
        Default::default(),
    )
    .await
    .unwrap();
    let click = built
        .sample_urls
        .iter()
        .find(|(label, _)| label.starts_with("a click"))
        .unwrap()
        .1
        .clone();

    let prefix = format!("lt:test:{}:", db.name);
    let redis = Live::new("redis://127.0.0.1:6379", &prefix).unwrap();
    let settings = AppSettings {
        api_token: Some("s3cret".to_owned()),
        live: Some(redis.clone()),
        // The app's own rollup worker counts the click.
        rollup_every: Some(Duration::from_millis(200)),
        ..AppSettings::new(
            db.pool.clone(),
            JournalSettings::new(dir.path().join("journal")),
        )
    };
    let app = App::build(settings, listener).await.unwrap();
    assert_eq!(
        app.worker_names(),
        [
            "privacy",
            "rollup",
            "health-gauges",
            "offline-targets",
            "link-rules"
        ]
    );
    let server = TestServer::running(app);
    let admin = &server.admin;

    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let answer = http
        .get(&click)
        .header("user-agent", "Mozilla/5.0 (Macintosh) Safari/605")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 302);
    assert!(
        answer.headers().contains_key("x-request-id"),
        "the stats routes share the tracking layers"
    );

    // The event reaches `events`, then the rollup counts it.
    let clicks = |summary: &Value| {
        summary["clicks"]["human"]["total"].as_u64().unwrap_or(0)
            + summary["clicks"]["bot"]["total"].as_u64().unwrap_or(0)
    };
    let summary: Value = eventually(PATIENCE, "the click counted by the rollup", || async {
        let answer = http
            .get(format!("{base}/api/mailings/weekly-2026-47/stats"))
            .bearer_auth("s3cret")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert!(answer.headers().contains_key("x-request-id"));
        let summary: Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
        if clicks(&summary) >= 1 {
            Ok(summary)
        } else {
            Err(summary)
        }
    })
    .await;
    assert_eq!(clicks(&summary), 1, "{summary:#}");
    assert_eq!(
        summary["letters_built"], 6,
        "counted by the builder in its batch transaction"
    );
    assert_eq!(
        summary["subject"], "{{ first_name }}, this week: Rust 1.95 and daily partitions",
        "the builder saved the creative"
    );

    let unauthorised = http
        .get(format!("{base}/api/mailings/weekly-2026-47/stats"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorised.status(), 401);
    let ready: Value = serde_json::from_str(
        &http
            .get(format!("{admin}/readyz"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (ready["database"].as_str(), ready["redis"].as_str()),
        (Some("ok"), Some("ok")),
        "{ready}"
    );

    server.stop().await;
    redis.clear().await.unwrap();
}
