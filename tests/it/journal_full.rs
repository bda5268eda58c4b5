//! A journal on a filesystem that fills up: the clicks are still answered,
//! and every answered click still has its event, through the fallback
//! (memory, then the database directly); `/readyz` is unready meanwhile.
//!
//! The filesystem is a small tmpfs the test mounts itself (it needs root,
//! as `scripts/test` runs here); where mounting is refused the test says
//! so and stops.

use crate::common::{add_link, client, db, events, quick, TestServer};
use crate::common::{metric_value, metrics_text};
use linktrack::store::links::LinkKind;
use reqwest::StatusCode;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A tmpfs of `size` mounted on a fresh directory, unmounted on drop.
struct SmallFilesystem {
    dir: tempfile::TempDir,
}

impl SmallFilesystem {
    fn mount(size: &str) -> Result<SmallFilesystem, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let output = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).into_owned());
        }
        Ok(SmallFilesystem { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write a file until the filesystem is full; returns it.
    fn fill(&self) -> PathBuf {
        let filler = self.path().join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = [0u8; 4096];
        while file.write_all(&block).is_ok() {}
        filler
    }
}

impl Drop for SmallFilesystem {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

async fn readyz(server: &TestServer) -> (StatusCode, serde_json::Value) {
    let response = client()
        .get(server.admin_url("/readyz"))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap())
}

/// Poll until `events` holds `n` clicks (30 s at most).
async fn wait_for_clicks(pool: &sqlx::MySqlPool, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let clicks = events(pool)
            .await
            .into_iter()
            .filter(|e| e.kind == "click")
            .count();
        if clicks >= n || Instant::now() > deadline {
            return clicks;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn click_times(server: &TestServer, path: &str, n: usize) {
    let http = client();
    for _ in 0..n {
        let response = http.get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::FOUND);
    }
}

#[tokio::test]
async fn a_full_journal_disk_loses_no_answered_click_and_makes_the_node_unready() {
    let filesystem = match SmallFilesystem::mount("256k") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("SKIPPED: cannot mount a small tmpfs for the journal (needs root): {why}");
            return;
        }
    };
    let db = db().await;
    let token = add_link(&db.pool, LinkKind::Click, "https://example.com/", 1).await;
    let journal = filesystem.path().join("journal");
    let server = TestServer::start_in(db.pool.clone(), &journal, quick).await;
    let path = format!("/c/{token}");
    assert_eq!(readyz(&server).await.0, StatusCode::OK);

    let filler = filesystem.fill();
    click_times(&server, &path, 200).await;
    let (status, body) = readyz(&server).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["journal"], "unwritable", "{body}");
    let metrics = metrics_text(&server.admin_url("")).await;
    assert_eq!(
        metric_value(&metrics, "linktrack_journal_writable"),
        Some(0.0)
    );
    assert_eq!(
        wait_for_clicks(&db.pool, 200).await,
        200,
        "every click answered while the disk was full has its event"
    );

    // Space returns: the node is ready again (nothing needs to be clicked
    // for it to notice) and the journal takes events again.
    std::fs::remove_file(filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while readyz(&server).await.0 != StatusCode::OK {
        assert!(Instant::now() < deadline, "ready again once space returned");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    click_times(&server, &path, 50).await;
    assert_eq!(wait_for_clicks(&db.pool, 250).await, 250);
    let metrics = metrics_text(&server.admin_url("")).await;
    assert_eq!(
        metric_value(&metrics, "linktrack_journal_writable"),
        Some(1.0)
    );
    assert_eq!(metric_value(&metrics, "linktrack_events_lost_total"), None);
    server.stop().await;
    assert_eq!(wait_for_clicks(&db.pool, 250).await, 250, "none twice");
}
