//! The Redis live layer on the real Redis at 127.0.0.1:6379 (override with
//! `LINKTRACK_TEST_REDIS`), each test under its own key prefix, removed at
//! the end.

use crate::common::stats::{letters, record, traffic, MAILING};
use crate::common::{days_ago, TestDb, TestServer};
use linktrack::live::{self, Live, SegmentQuery};
use linktrack::store::{erase, rollup, segments};

fn redis_url() -> String {
    std::env::var("LINKTRACK_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A live layer under a fresh key prefix; every key under it is deleted
/// when the guard drops, even if the test failed half-way.
struct TestLive {
    live: Live,
    prefix: String,
}

impl TestLive {
    fn new() -> TestLive {
        let prefix = format!("lt-test-{:016x}:", rand::random::<u64>());
        TestLive {
            live: Live::new(&redis_url(), &prefix).unwrap(),
            prefix,
        }
    }
}

impl Drop for TestLive {
    fn drop(&mut self) {
        let prefix = self.prefix.clone();
        crate::common::run_detached(async move {
            if let Ok(live) = Live::new(&redis_url(), &prefix) {
                let _ = live.clear().await;
            }
        });
    }
}

fn options(limit: u32) -> rollup::RollupOptions {
    rollup::RollupOptions {
        limit,
        settle: std::time::Duration::ZERO,
        ..Default::default()
    }
}

fn tags(list: &[&str]) -> Vec<String> {
    list.iter().map(|t| t.to_string()).collect()
}

async fn segment(live: &Live, db: &TestDb, query: SegmentQuery) -> Vec<String> {
    let letters = live.segment(MAILING, &query).await.unwrap();
    segments::addresses_of_letters(&db.pool, &crate::common::mailing_id(MAILING), &letters)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_rollup_keeps_live_counters_recent_clicks_top_links_and_segments() {
    let (d1, d2) = (days_ago(1), days_ago(0));
    let db = TestDb::with_days_since(d1).await;
    let guard = TestLive::new();
    let live = guard.live.clone();
    let letters = letters(&db.pool, d1, 3).await;
    let hits = traffic(&letters, d1, d2);
    record(&db.pool, &hits[..5]).await;
    // Two passes, so counters and sets accumulate across batches.
    linktrack::rollup_worker::roll_and_publish(&db.pool, Some(&live), &options(2))
        .await
        .unwrap();
    record(&db.pool, &hits).await;
    linktrack::rollup_worker::roll_and_publish(&db.pool, Some(&live), &options(2))
        .await
        .unwrap();
    assert!(live.is_up());

    let snap = live.snapshot(MAILING).await.unwrap();
    let counter = |name: &str| snap.counters.get(name).copied().unwrap_or(0);
    assert_eq!(
        (
            counter("clicks"),
            counter("bot_clicks"),
            counter("opens"),
            counter("bot_opens")
        ),
        (5, 1, 3, 1)
    );
    assert_eq!(snap.recent_clicks.len(), 6);
    assert_eq!(snap.recent_clicks[0]["position"], 3, "newest first");
    assert_eq!(snap.top_links[0], (1, 3));

    let ruby_web_not_erlang = SegmentQuery {
        all: tags(&["ruby", "web"]),
        none: tags(&["erlang"]),
        ..SegmentQuery::default()
    };
    assert_eq!(
        segment(&live, &db, ruby_web_not_erlang.clone()).await,
        ["user1@example.com"]
    );
    let or_erlang = SegmentQuery {
        all: tags(&["ruby", "web"]),
        any: tags(&["erlang"]),
        ..SegmentQuery::default()
    };
    assert_eq!(
        segment(&live, &db, or_erlang).await,
        ["user1@example.com", "user2@example.com"]
    );
    let ruby = SegmentQuery {
        all: tags(&["ruby"]),
        ..SegmentQuery::default()
    };
    assert_eq!(
        segment(&live, &db, ruby.clone()).await,
        ["user1@example.com", "user2@example.com"],
        "letter 3's ruby click was a link scanner: bots never join segments"
    );
    // An address that withdrew from tracking leaves every segment (its
    // earlier clicks stay counted, not listed).
    linktrack::store::tracking_optouts::add(&db.pool, &["user2@example.com".into()], "test")
        .await
        .unwrap();
    assert_eq!(segment(&live, &db, ruby).await, ["user1@example.com"]);
    linktrack::store::tracking_optouts::remove(&db.pool, &["user2@example.com".into()])
        .await
        .unwrap();

    // The same through the HTTP API, with the live section in the stats.
    let app = TestServer::with_stats(db.pool.clone(), Some("tok"), None, Some(live.clone())).await;
    let base = app.base.clone();
    let get = |path: String| {
        let url = format!("{base}{path}");
        async move {
            let r = reqwest::Client::new()
                .get(url)
                .bearer_auth("tok")
                .send()
                .await
                .unwrap();
            (
                r.status(),
                serde_json::from_str::<serde_json::Value>(&r.text().await.unwrap()).unwrap(),
            )
        }
    };
    let (status, body) = get(format!(
        "/api/mailings/{MAILING}/segment?tag=ruby&and=web&not=erlang"
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["addresses"], serde_json::json!(["user1@example.com"]));
    let (status, body) = get(format!("/api/mailings/{MAILING}/segment")).await;
    assert_eq!(status, 400, "a segment needs a tag: {body}");
    let (_, body) = get(format!("/api/mailings/{MAILING}/stats")).await;
    assert_eq!(body["live"]["counters"]["clicks"], 5);
    assert_eq!(body["redis_up"], true);
    let page = reqwest::Client::new()
        .get(format!("{base}/mailings/{MAILING}"))
        .bearer_auth("tok")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("Latest clicks (live)"), "{page}");
    assert!(page.contains("live layer up"));

    // Erasing an address takes it out of every segment.
    erase::erase(&db.pool, "user1@example.com").await.unwrap();
    assert!(segment(&live, &db, ruby_web_not_erlang).await.is_empty());

    assert!(live.clear().await.unwrap() > 0);
    assert_eq!(
        live.clear().await.unwrap(),
        0,
        "nothing left under the prefix"
    );
}

#[tokio::test]
async fn with_redis_down_the_rollup_and_the_api_keep_working() {
    let d1 = days_ago(0);
    let db = TestDb::with_days_since(d1).await;
    // Nothing listens on port 1.
    let live = Live::new("redis://127.0.0.1:1", "lt-down:").unwrap();
    let letters = letters(&db.pool, d1, 3).await;
    record(&db.pool, &traffic(&letters, d1, d1)).await;
    let report = linktrack::rollup_worker::roll_and_publish(&db.pool, Some(&live), &options(1000))
        .await
        .unwrap();
    assert_eq!(report.events(), 10);
    assert!(!live.is_up());

    let app = TestServer::with_stats(db.pool.clone(), Some("tok"), None, Some(live)).await;
    let base = app.base.clone();
    let client = reqwest::Client::new();
    let stats = client
        .get(format!("{base}/api/mailings/{MAILING}/stats"))
        .bearer_auth("tok")
        .send()
        .await
        .unwrap();
    assert_eq!(stats.status(), 200);
    let body: serde_json::Value = serde_json::from_str(&stats.text().await.unwrap()).unwrap();
    assert_eq!(body["clicks"]["human"]["total"], 5);
    assert!(body["live"].is_null());
    assert_eq!(body["redis_up"], false);
    let seg = client
        .get(format!("{base}/api/mailings/{MAILING}/segment?tag=ruby"))
        .bearer_auth("tok")
        .send()
        .await
        .unwrap();
    assert_eq!(seg.status(), 503);
    // The server stays ready without Redis, and says Redis is down.
    let ready = client
        .get(format!("{}/readyz", app.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let ready: serde_json::Value = serde_json::from_str(&ready.text().await.unwrap()).unwrap();
    assert_eq!(
        (ready["database"].as_str(), ready["redis"].as_str()),
        (Some("ok"), Some("unavailable")),
        "{ready}"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_big_batch_keeps_only_the_newest_clicks() {
    let guard = TestLive::new();
    let at = days_ago(0).and_hms_opt(12, 0, 0).unwrap();
    let clicks: Vec<rollup::BatchClick> = (1..=live::RECENT_CLICKS as u64 + 10)
        .map(|i| rollup::BatchClick {
            mailing_id: MAILING.into(),
            letter_id: i,
            position: 1 + (i % 3) as u32,
            bot: false,
            occurred_at: at,
            tags: vec!["t".into()],
        })
        .collect();
    guard.live.apply(&[], &clicks).await.unwrap();
    let snap = guard.live.snapshot(MAILING).await.unwrap();
    assert_eq!(snap.recent_clicks.len(), live::RECENT_CLICKS as usize);
    assert_eq!(snap.recent_clicks[0]["letter_id"], clicks.len());
    let top: u64 = snap.top_links.iter().map(|(_, n)| n).sum();
    assert_eq!(
        top,
        clicks.len() as u64,
        "every click still counts for top links"
    );
    let all = SegmentQuery {
        all: tags(&["t"]),
        ..SegmentQuery::default()
    };
    assert_eq!(
        guard.live.segment(MAILING, &all).await.unwrap().len(),
        clicks.len()
    );
}
