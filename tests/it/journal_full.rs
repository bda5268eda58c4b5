//! A journal on a filesystem that fills up: the clicks are still answered,
//! and every answered click still has its event, through the fallback
//! (memory, then the database directly); `/readyz` is unready meanwhile.
//!
//! The filesystem is a small tmpfs the test mounts itself (it needs root,
//! as `scripts/test` runs here); where mounting is refused the test says
//! so and stops.

use crate::common::wait::{self, PATIENCE};
use crate::common::{add_link, client, db, events, quick, TestServer};
use crate::common::{metric_value, metrics_text};
use linktrack::journal::segments::JournalSettings;
use linktrack::server::AppSettings;
use linktrack::store::links::LinkKind;
use reqwest::StatusCode;
use std::io::Write;
use std::path::{Path, PathBuf};

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

/// How many clicks `events` holds once it holds `n` or more (the caller
/// asserts it is exactly `n`: none lost, none twice).
async fn wait_for_clicks(pool: &sqlx::MySqlPool, n: usize) -> usize {
    let what = format!("{n} clicks in events");
    wait::eventually(PATIENCE, &what, || async {
        let clicks = events(pool)
            .await
            .into_iter()
            .filter(|e| e.kind == "click")
            .count();
        if clicks >= n {
            Ok(clicks)
        } else {
            Err(clicks)
        }
    })
    .await
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
    // Free-space thresholds that fit a 256 KiB filesystem: this test is
    // about failing writes (the thresholds have their own test below).
    let server = TestServer::start_in(db.pool.clone(), &journal, |settings| {
        let settings = quick(settings);
        AppSettings {
            journal: JournalSettings {
                min_free_bytes: 16 << 10,
                resume_free_bytes: 32 << 10,
                ..settings.journal
            },
            ..settings
        }
    })
    .await;
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
    wait::eventually(PATIENCE, "ready again once space returned", || async {
        match readyz(&server).await {
            (StatusCode::OK, _) => Ok(()),
            unready => Err(unready),
        }
    })
    .await;
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

/// Bytes the filesystem at `path` has available (`stat -f`: what a user
/// process may still write).
fn available(path: &Path) -> u64 {
    let out = std::process::Command::new("stat")
        .args(["-f", "-c", "%a %S"])
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let (blocks, size) = text.trim().split_once(' ').unwrap();
    blocks.parse::<u64>().unwrap() * size.parse::<u64>().unwrap()
}

/// Write (or cut) `filler` so that about `free` bytes stay available.
fn leave_free(fs: &SmallFilesystem, filler: &Path, free: u64) {
    let current = std::fs::metadata(filler).map_or(0, |m| m.len());
    let now = available(fs.path());
    let target = (current + now).saturating_sub(free);
    // Rewritten with real bytes: tmpfs counts written pages, not length.
    std::fs::write(filler, vec![1u8; target as usize]).unwrap();
}

/// Issue 43, item 7: `/readyz` turns unready under the low threshold of
/// free space, says why with the figures, and stays unready until space
/// is back over the higher threshold: a node at the edge does not flap.
#[tokio::test]
async fn readyz_turns_unready_on_low_space_with_hysteresis_and_says_why() {
    let filesystem = match SmallFilesystem::mount("4m") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("SKIPPED: cannot mount a small tmpfs for the journal (needs root): {why}");
            return;
        }
    };
    let db = db().await;
    let journal = filesystem.path().join("journal");
    let (min, resume) = (1u64 << 20, 2u64 << 20);
    let server = TestServer::start_in(db.pool.clone(), &journal, |settings| {
        let settings = quick(settings);
        AppSettings {
            journal: JournalSettings {
                min_free_bytes: min,
                resume_free_bytes: resume,
                ..settings.journal
            },
            ..settings
        }
    })
    .await;
    assert_eq!(readyz(&server).await.0, StatusCode::OK);
    let filler = filesystem.path().join("filler");

    // Under the low threshold: unready, and why.
    leave_free(&filesystem, &filler, min / 2);
    let (status, body) = readyz(&server).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["journal"], "low_space", "{body}");
    assert_eq!(body["journal_space"]["unready_under_bytes"], min, "{body}");
    assert_eq!(body["journal_space"]["ready_over_bytes"], resume, "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("unready until over"), "{detail}");

    // Between the thresholds: still unready (it was low), many times over.
    leave_free(&filesystem, &filler, (min + resume) / 2);
    for _ in 0..20 {
        assert_eq!(readyz(&server).await.0, StatusCode::SERVICE_UNAVAILABLE);
    }
    // Over the higher one: ready, and between them it stays ready.
    leave_free(&filesystem, &filler, resume + (512 << 10));
    assert_eq!(readyz(&server).await.0, StatusCode::OK);
    leave_free(&filesystem, &filler, (min + resume) / 2);
    for _ in 0..20 {
        assert_eq!(readyz(&server).await.0, StatusCode::OK);
    }
    server.stop().await;
}
