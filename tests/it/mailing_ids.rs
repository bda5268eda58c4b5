//! Issue 29, item 9: mailing ids are byte for byte. The columns compare
//! without case and trailing padding, so the stats routes check the bytes
//! and the builder refuses an id the database would take for another.

use crate::common::build::options;
use crate::common::stats::MAILING;
use crate::common::stats_api::{rolled_db, TOKEN};
use crate::common::{client, TestDb, TestServer};
use linktrack::builder::{self, BuildError};
use reqwest::StatusCode;
use std::path::Path;

#[tokio::test]
async fn the_stats_routes_answer_only_the_exact_id() {
    let db = rolled_db().await;
    let app = TestServer::with_stats(db.pool.clone(), Some(TOKEN), None, None).await;
    let status = |id: String| {
        let url = format!("{}/api/mailings/{id}/stats", app.base);
        async move {
            client()
                .get(url)
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(status(MAILING.to_owned()).await, StatusCode::OK);
    for other in [
        MAILING.to_uppercase(),
        format!("{MAILING}%20"),
        format!("{MAILING}%00"),
        format!("%20{MAILING}"),
    ] {
        assert_eq!(
            status(other.clone()).await,
            StatusCode::NOT_FOUND,
            "{other}"
        );
    }
    app.stop().await;
}

fn write_mailing(dir: &Path, id: &str, subject: &str) -> std::path::PathBuf {
    let path = dir.join(format!("mailing-{}.json", id.len()));
    let mailing = serde_json::json!({
        "mailing_id": id,
        "subject": subject,
        "from": "News <news@example.com>",
        "html": "<p>Hello <a href=\"https://example.com/a\">a</a></p>",
    });
    std::fs::write(&path, mailing.to_string()).unwrap();
    path
}

async fn stored_subjects(db: &TestDb) -> Vec<(String, String)> {
    sqlx::query_as("SELECT mailing_id, subject FROM mailings ORDER BY mailing_id")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_id_the_database_takes_for_another_mailing_is_refused_by_name() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let recipients = dir.path().join("r.jsonl");
    std::fs::write(&recipients, "{\"email\":\"a@example.com\"}\n").unwrap();

    let lower = write_mailing(dir.path(), "news-a", "lower");
    let built = builder::run(&db.pool, &options(dir.path(), lower, recipients.clone()))
        .await
        .unwrap();
    assert_eq!(built.letters_built, 1);

    let upper_dir = tempfile::tempdir().unwrap();
    let upper = write_mailing(upper_dir.path(), "NEWS-A", "upper");
    let err = builder::run(
        &db.pool,
        &options(upper_dir.path(), upper.clone(), recipients.clone()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, BuildError::MailingIdCollides { id, existing, .. }
            if id == "NEWS-A" && existing == "news-a"),
        "{err}"
    );
    let message = err.to_string();
    assert!(message.contains(&upper.display().to_string()) && message.contains("mailing_id"));
    // The first mailing is untouched: its creative was not overwritten.
    assert_eq!(
        stored_subjects(&db).await,
        vec![("news-a".to_owned(), "lower".to_owned())]
    );
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links WHERE mailing_id = 'news-a'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let built_rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, built_rows, "nothing of NEWS-A was stored");

    // White space around an id is refused, not trimmed into `news-a`.
    let padded = write_mailing(upper_dir.path(), "news-a ", "padded");
    let err = builder::run(&db.pool, &options(upper_dir.path(), padded, recipients))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("white space"), "{err}");
}
