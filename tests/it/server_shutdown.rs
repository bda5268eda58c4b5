//! The `linktrack serve` binary's shutdown: SIGTERM flushes what the
//! journal holds.

use crate::common::{add_link, client, db, events, Serving, TestDb};
use linktrack::store::links::LinkKind;
use reqwest::StatusCode;
use std::path::Path;

/// `linktrack serve` on 127.0.0.1:0 with `journal`, logging the server's
/// start line, its shutdown and each replayed segment (debug).
fn serve(db: &TestDb, journal: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_linktrack"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--journal"])
        .arg(journal)
        .env("LINKTRACK_ADMIN_LISTEN", "127.0.0.1:0")
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn,linktrack=debug");
    command
}

/// The events each `replayed events=N` line of `log` counts, summed.
fn replayed(log: &str) -> u64 {
    log.lines()
        .filter(|line| line.contains(" replayed "))
        .filter_map(|line| {
            let count = line.split(" events=").nth(1)?;
            count.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// The events can only be in the database through the shutdown flush: the
/// server's own log shows no segment replayed before it began to flush
/// ("stopped accepting requests; flushing events") and all three replayed
/// after. The binary has no setting for the journal's seal interval
/// (250 ms), so the SIGTERM comes right after the hits; a run in which the
/// writer sealed and the replayer stored them first proves nothing about
/// the flush and is run again (three tries) rather than passed.
#[tokio::test]
async fn the_binary_flushes_journaled_events_on_sigterm() {
    for _ in 0..3 {
        if sigterm_run().await {
            return;
        }
    }
    panic!("three runs in a row replayed the events before the SIGTERM");
}

/// One run; `false` when the normal replay stored the events before the
/// shutdown began (the run proves nothing).
async fn sigterm_run() -> bool {
    let db = db().await;
    let token = add_link(&db.pool, LinkKind::Pixel, "", 0).await;
    let dir = tempfile::tempdir().unwrap();
    let mut server = Serving::spawn(serve(&db, dir.path())).await;
    let http = client();
    let base = server.base();
    // A second server on the same journal would lose events: it is refused.
    let second = serve(&db, dir.path()).output().unwrap();
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("is in use by another server"), "{stderr}");
    for _ in 0..3 {
        let response = http
            .get(format!("{base}/o/{token}.gif"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    drop(http);
    // At once, before the writer seals its segment (250 ms).
    let status = server.terminate().await;
    assert!(status.success(), "{status}: {}", server.log());
    let log = server.log();
    let flushing = log
        .find("flushing events")
        .unwrap_or_else(|| panic!("no shutdown flush in the log: {log}"));
    if replayed(&log[..flushing]) > 0 {
        return false;
    }
    assert_eq!(
        replayed(&log[flushing..]),
        3,
        "the flush replayed the three events: {log}"
    );
    assert_eq!(events(&db.pool).await.len(), 3, "flushed before exit");
    // Only the lock file stays (an flock: free once the process is gone).
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "lock")
        .collect();
    assert_eq!(left.len(), 0, "journal emptied: {left:?}");
    true
}
