//! The server's journal: events acknowledged are journaled, replayed once
//! into `events` (after a crash too), and segments the database refuses or
//! that do not read are set aside without blocking the rest.

use crate::common::wait::{eventually, PATIENCE};
use crate::common::{
    add_link, build_app, client, closed_pool, db, events, quick, seal_of, sealed_token,
    server_pool, today, token_on, wait_for_events, TestDb, TestServer,
};
use chrono::Utc;
use linktrack::store::links::{self, LinkKind, NewLink};
use linktrack::store::{self};
use reqwest::StatusCode;
use std::path::{Path, PathBuf};
use tokio::task::AbortHandle;

#[tokio::test]
async fn events_wait_for_a_missing_partition_to_be_created() {
    let db = TestDb::with_days_since(today()).await;
    let tomorrow = today() + chrono::Days::new(1);
    let token = sealed_token(&seal_of(&db.pool).await, Utc::now(), LinkKind::Pixel);
    links::insert(
        &db.pool,
        &[NewLink {
            token,
            kind: LinkKind::Pixel,
            mailing_id: "m".into(),
            letter_id: 1,
            email: "a@example.com".into(),
            position: 0,
            url: String::new(),
            meta: None,
        }],
    )
    .await
    .unwrap();
    let drop_sql = format!(
        "ALTER TABLE events DROP PARTITION {}, {}",
        store::partitions::partition_name(today()),
        store::partitions::partition_name(tomorrow)
    );
    sqlx::query(&drop_sql).execute(&db.pool).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let response = client()
        .get(server.url(&format!("/o/{token}.gif")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(wait_for_events(&db.pool, 1).await.len(), 1);
    server.stop().await;
}

/// The journal segments (`.active` and `.jsonl`) of a directory.
fn segments(dir: &Path) -> Vec<PathBuf> {
    linktrack::journal::segments::unreplayed_segments(dir).unwrap()
}

/// Wait until the server has replayed every segment of `dir`.
async fn wait_replayed(dir: &Path) {
    eventually(PATIENCE, "every segment replayed", || async {
        let left = segments(dir);
        if left.is_empty() {
            Ok(())
        } else {
            Err(left)
        }
    })
    .await;
}

/// Every segment of a journal directory, concatenated.
fn journal_text(dir: &Path) -> String {
    let mut text = String::new();
    for path in segments(dir) {
        text.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
    }
    text
}

/// Copy the segments of `from` into `to`.
fn copy_segments(from: &Path, to: &Path) -> Vec<PathBuf> {
    let mut copied = Vec::new();
    for path in segments(from) {
        let target = to.join(path.file_name().unwrap());
        std::fs::copy(&path, &target).unwrap();
        copied.push(target);
    }
    copied
}

fn abort_all(handles: Vec<AbortHandle>) {
    for handle in handles {
        handle.abort();
    }
}

#[tokio::test]
async fn acknowledged_events_survive_a_crash_and_are_replayed_exactly_once() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let token = add_link(&db.pool, LinkKind::Pixel, "", 0).await;
    // First instance: its database is gone, so events can only be journaled.
    let crashed = build_app(closed_pool(&db).await, dir.path(), quick).await;
    let base = format!("http://{}", crashed.local_addr().unwrap());
    let handles = crashed.spawn_abortable();
    let http = client();
    for n in 1..=5 {
        let response = http
            .get(format!("{base}/o/{token}.gif"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        // Acknowledged means written: the journal has it before we read the answer.
        let lines = journal_text(dir.path()).matches(&token.to_string()).count();
        assert_eq!(lines, n, "journaled before the response");
    }
    abort_all(handles);
    #[cfg(unix)]
    for path in segments(dir.path()) {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "journal files are private");
    }
    drop(http);
    let backup = tempfile::tempdir().unwrap();
    assert!(!copy_segments(dir.path(), backup.path()).is_empty());

    // A new instance on the same journal replays everything.
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let stored = wait_for_events(&db.pool, 5).await;
    assert_eq!(stored.len(), 5, "{stored:?}");
    assert!(stored
        .iter()
        .all(|e| e.token == token.to_string() && e.kind == "open"));
    server.stop().await;

    // Replaying the same segments again (a crash between commit and delete)
    // adds nothing.
    copy_segments(backup.path(), dir.path());
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    wait_replayed(dir.path()).await;
    assert!(segments(dir.path()).is_empty(), "replayed");
    assert_eq!(events(&db.pool).await.len(), 5, "each event exactly once");
    server.stop().await;
}

/// The journal's backlog gauge goes up with each journaled open and back
/// to zero once they are replayed. (The journal keeps the gauge's handle:
/// taken before the metrics recorder was installed, it counted nothing,
/// and the replay's decrements took the gauge below zero.)
#[tokio::test]
async fn the_journal_backlog_gauge_returns_to_zero_after_the_replay() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let known = add_link(&db.pool, LinkKind::Pixel, "", 0).await;
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();
    for _ in 0..3 {
        let path = format!("/o/{known}.gif");
        let response = http.get(server.url(&path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    wait_for_events(&db.pool, 3).await;
    wait_replayed(dir.path()).await;
    // The replay lowers the gauge right after it deletes the segment, so
    // the file being gone does not mean the gauge moved yet: read it until
    // it is 0.
    eventually(PATIENCE, "the backlog gauge at 0", || async {
        let text = crate::common::metrics_text(&server.admin_url("")).await;
        match crate::common::metric_value(&text, "linktrack_journal_backlog_events") {
            Some(backlog) if backlog.abs() < f64::EPSILON => Ok(()),
            backlog => Err(format!("{backlog:?}: {text}")),
        }
    })
    .await;
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn a_segment_the_database_rejects_is_set_aside_and_does_not_block_the_rest() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let line = old_format_line;
    // An older segment the database refuses (a readable line whose mailing
    // id is longer than the column: strict mode rejects it), then a good
    // one. (A kind the database has no ENUM value for no longer gets that
    // far: the journal record does not read, see the quarantine test; and
    // a user agent is not stored with an event of no letter.)
    let too_long = line("open", 1).replace(
        "\"mailing_id\":null",
        &format!("\"mailing_id\":\"{}\"", "a".repeat(600)),
    );
    std::fs::write(dir.path().join("00000000000000000001.jsonl"), too_long).unwrap();
    std::fs::write(
        dir.path().join("00000000000000000002.jsonl"),
        line("open", 2),
    )
    .unwrap();
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let stored = wait_for_events(&db.pool, 1).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0].kind, "open");
    assert!(dir.path().join("00000000000000000001.failed").exists());
    server.stop().await;
}

/// A journal line exactly as the release before versioned records wrote it
/// (the database row's fields, no `v`).
fn old_format_line(kind: &str, id: u8) -> String {
    format!(
        "{{\"event_id\":\"{id:02x}{}\",\"occurred_at\":\"{}\",\"kind\":\"{kind}\",\
         \"token\":\"{}\",\"link_id\":null,\"mailing_id\":null,\"letter_id\":null,\
         \"email\":null,\"position\":null,\"ip\":null,\"user_agent\":null,\
         \"bot\":false,\"bot_reason\":null}}\n",
        "0".repeat(30),
        Utc::now().to_rfc3339(),
        token_on(today())
    )
}

#[tokio::test]
async fn a_segment_journaled_before_versioned_records_replays_after_the_upgrade() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let segment = dir.path().join("00000000000000000001.jsonl");
    let text: String = [("open", 1), ("click", 2), ("image", 3)]
        .iter()
        .map(|(kind, id)| old_format_line(kind, *id))
        .collect();
    std::fs::write(&segment, text).unwrap();
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let stored = wait_for_events(&db.pool, 3).await;
    let mut kinds: Vec<&str> = stored.iter().map(|e| e.kind.as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["click", "image", "open"], "{stored:?}");
    server.stop().await;
    assert!(!segment.exists(), "replayed, then deleted");
    assert!(!segment.with_extension("failed").exists());
}

#[tokio::test]
async fn a_corrupt_middle_line_quarantines_its_segment_and_loses_nothing() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let corrupt = dir.path().join("00000000000000000001.jsonl");
    // A flipped byte in the middle line: it has its newline, so it is not a
    // torn tail, and must not be skipped.
    let middle = old_format_line("click", 2).replacen("\"kind\"", "\"kimd\"", 1);
    let text = format!(
        "{}{middle}{}",
        old_format_line("open", 1),
        old_format_line("open", 3)
    );
    std::fs::write(&corrupt, &text).unwrap();
    // A later segment is not blocked by the quarantined one.
    std::fs::write(
        dir.path().join("00000000000000000002.jsonl"),
        old_format_line("image", 4),
    )
    .unwrap();
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let stored = wait_for_events(&db.pool, 3).await;
    server.stop().await;
    assert_eq!(
        stored.len(),
        3,
        "the readable events of both segments: {stored:?}"
    );
    let failed = corrupt.with_extension("failed");
    assert_eq!(
        std::fs::read_to_string(&failed).unwrap(),
        text,
        "the quarantined segment is kept byte for byte, bad line included"
    );
    assert!(segments(dir.path()).is_empty(), "nothing left to replay");
}
