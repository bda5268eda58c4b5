//! A hostile creative and subject (issue 29's two templates) cannot stall
//! the server: the dashboard previews the creative within limits on the
//! blocking pool and says so, subjects are never run, and a click sent
//! while ten dashboard requests run is answered before they all are.

use crate::common::add_link;
use crate::common::stats::{letters, record, traffic, MAILING};
use crate::common::{days_ago, TestDb, TestServer};
use linktrack::store::links::LinkKind;
use linktrack::store::{rollup, stats};
use reqwest::StatusCode;
use std::time::{Duration, Instant};

const TOKEN: &str = "test-token-0123456789";

/// A branch false at build time and true in a preview, around two nested
/// loops of 10,000 turns.
const LOOPS: &str = "{% if first_name is startingwith('‹') %}{% for i in range(10000) %}\
                     {% for j in range(10000) %}{{ j }}{% endfor %}{% endfor %}{% endif %}";
/// 50 MB of output in 500 instructions.
const HUGE: &str = "{% for i in range(500) %}{{ 'x' * 100000 }}{% endfor %}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_is_answered_while_ten_dashboards_preview_a_runaway_creative() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let today = days_ago(0);
    let fixture = letters(&db.pool, today, 3).await;
    record(&db.pool, &traffic(&fixture, today, today)).await;
    rollup::rollup(&db.pool, 1000).await.unwrap();
    let creative =
        format!("<html><body><a href=\"https://example.com/\">x</a>{LOOPS}{HUGE}</body></html>");
    stats::save_mailing(
        &db.pool,
        &crate::common::mailing_id(MAILING),
        LOOPS,
        &creative,
    )
    .await
    .unwrap();
    let click = add_link(&db.pool, LinkKind::Click, "https://example.com/c", 1).await;
    let app = TestServer::with_stats(db.pool.clone(), Some(TOKEN), None, None).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // The link is cached first, so the click below measures the runtime,
    // not a database read.
    let warm = http
        .get(format!("{}/c/{click}", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(warm.status(), StatusCode::FOUND);

    let started = Instant::now();
    let mut dashboards = tokio::task::JoinSet::new();
    for _ in 0..10 {
        let request = http
            .get(format!("{}/mailings/{MAILING}", app.base))
            .bearer_auth(TOKEN)
            .send();
        dashboards.spawn(async move {
            let response = request.await.unwrap();
            let status = response.status();
            let body = response.text().await.unwrap();
            (status, body, started.elapsed())
        });
    }
    let clicked = http
        .get(format!("{}/c/{click}", app.base))
        .send()
        .await
        .unwrap();
    let click_answered = started.elapsed();
    assert_eq!(clicked.status(), StatusCode::FOUND);
    let pages = dashboards.join_all().await;
    let last_page = pages.iter().map(|(_, _, at)| *at).max().unwrap();
    println!(
        "click answered after {click_answered:?}; dashboards answered after {:?}",
        pages
            .iter()
            .map(|(_, _, at)| *at)
            .collect::<Vec<Duration>>()
    );
    for (status, body, _) in &pages {
        assert_eq!(*status, StatusCode::OK);
        assert!(
            body.contains("Preview limited"),
            "{}",
            &body[..body.len().min(2000)]
        );
        assert!(
            body.len() < 1 << 20,
            "the page stays small: {} bytes",
            body.len()
        );
        assert!(!body.contains("9999"), "the subject's loops never ran");
    }
    assert!(
        click_answered < last_page,
        "the click was answered while dashboard requests were still running \
         (click {click_answered:?}, last dashboard {last_page:?})"
    );
    app.stop().await;
}
