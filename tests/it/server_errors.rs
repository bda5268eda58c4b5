//! A database error on a request path keeps its cause: the answer is a
//! 500 page, and the server's log says what kind of failure it was (the
//! store's `kind` and MySQL's error number), so an operator or a test can
//! tell a missing table from a deadlock or a lost connection. The next
//! request, once the database is right again, is served as usual.

use crate::common::wait::{eventually, PATIENCE};
use crate::common::{click_link, days_ago, seal_of, sealed_token, serve_command, Serving, TestDb};
use linktrack::kind::LinkKind;
use linktrack::store::links;

#[tokio::test]
async fn a_database_error_reaches_the_log_with_its_kind() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let seal = seal_of(&db.pool).await;
    let made = chrono::Utc::now() - chrono::Duration::hours(1);
    let row = click_link(sealed_token(&seal, made, LinkKind::Click), 1);
    links::insert(&db.pool, std::slice::from_ref(&row))
        .await
        .unwrap();

    let journal = tempfile::tempdir().unwrap();
    let mut server = Serving::spawn(serve_command(&db, journal.path(), &[])).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = format!("{}/c/{}", server.base(), row.token);

    // The table the lookup reads is gone (as after a botched migration).
    sqlx::query("RENAME TABLE links TO links_away")
        .execute(&db.pool)
        .await
        .unwrap();
    let failed = http.get(&url).send().await.unwrap();
    assert_eq!(failed.status(), 500);
    let logged = wait_for_line(&server, "request failed").await;
    assert!(
        logged.contains(r#"kind="no_such_table""#) && logged.contains("mysql_error=1146"),
        "the log names the kind and the MySQL error: {logged}"
    );
    assert!(
        logged.contains("ERROR"),
        "a failed request is an error: {logged}"
    );

    // The same link once the table is back: the failure was not kept.
    sqlx::query("RENAME TABLE links_away TO links")
        .execute(&db.pool)
        .await
        .unwrap();
    let served = http.get(&url).send().await.unwrap();
    assert_eq!(served.status(), 302);
    assert_eq!(served.headers()["location"], "https://example.com/1");
    server.terminate().await;
}

/// The first line of the server's log that contains `text` (waited for:
/// the log is read from the child's stderr by another thread).
async fn wait_for_line(server: &Serving, text: &str) -> String {
    let what = format!("`{text}` in the log");
    eventually(PATIENCE, &what, || async {
        let log = server.log();
        match log.lines().find(|line| line.contains(text)) {
            Some(line) => Ok(line.to_owned()),
            None => Err(log),
        }
    })
    .await
}
