//! A new user's first minutes (issue 39): `GET /` leads to the dashboard
//! when it is on, and the demo's letters count as delivered when it starts
//! serving them, so its user's own clicks are not `too_fast` bots.

use crate::common::stats_api::{SECRET, TOKEN};
use crate::common::{client, TestDb, TestServer};

#[tokio::test]
async fn the_root_path_leads_to_the_dashboard_when_it_is_on() {
    let db = TestDb::new().await;
    let with_login = TestServer::with_stats(db.pool.clone(), Some(TOKEN), Some(SECRET), None).await;
    let response = client()
        .get(format!("{}/", with_login.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()["location"], "/login");
    with_login.stop().await;
    // Without LINKTRACK_SECRET (another seal key: a database of its own).
    let db = TestDb::new().await;
    let bearer_only = TestServer::with_stats(db.pool.clone(), Some(TOKEN), None, None).await;
    let response = client()
        .get(format!("{}/", bearer_only.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()["location"], "/mailings");
    bearer_only.stop().await;
    // Off: `/` is unknown, as every dashboard path.
    let off = TestServer::with_stats(db.pool.clone(), None, None, None).await;
    let response = client().get(format!("{}/", off.base)).send().await.unwrap();
    assert_eq!(response.status(), 404);
    off.stop().await;
}

#[tokio::test]
async fn the_demos_letters_are_delivered_when_it_starts_serving() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let outcome = linktrack::demo::prepare(
        &db.url,
        "http://127.0.0.1:9",
        None,
        dir.path(),
        Default::default(),
    )
    .await
    .unwrap();
    let (before,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM deliveries")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(before, 0);
    let (built_at,): (chrono::NaiveDateTime,) = sqlx::query_as("SELECT UTC_TIMESTAMP()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    linktrack::demo::deliver_now(&db.url, &outcome)
        .await
        .unwrap();
    let rows: Vec<(String, String, chrono::NaiveDateTime)> = sqlx::query_as(
        "SELECT mailing_id, CAST(status AS CHAR), at FROM deliveries ORDER BY letter_id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len() as u64, outcome.summary.letters_built);
    for (mailing, status, at) in rows {
        assert_eq!(
            (mailing.as_str(), status.as_str()),
            ("weekly-2026-47", "delivered")
        );
        assert!(
            at >= built_at,
            "delivered at {at}, before the demo served ({built_at})"
        );
    }
    // Once more (a rerun of the demo): delivered again from the new start.
    linktrack::demo::deliver_now(&db.url, &outcome)
        .await
        .unwrap();
    let (after,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM deliveries")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(after as u64, outcome.summary.letters_built);
}
