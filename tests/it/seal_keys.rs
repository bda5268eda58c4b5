//! Seal keys that cannot silently disagree (issue 39, docs/token.md
//! "Rotating the secret"): the database knows every key's fingerprint, a
//! build or server with another secret is refused before it writes or
//! serves anything, and after a rotation every link of letters built
//! before it still answers as it did.

use crate::common::build::{build_command, options, tracked_tokens};
use crate::common::wait::{self, PATIENCE};
use crate::common::{client, linktrack, quick, TestDb, TestServer};
use linktrack::builder;
use linktrack::server::{App, AppSettings, ServeError};
use linktrack::store::links::LinkKind;
use linktrack::store::seal_keys::KeyRefusal;
use linktrack::token::Token;
use std::path::{Path, PathBuf};
use std::process::Command;

const OLD: &str = "old-secret-4f8a1c2e9b7d6a50";
const NEW: &str = "new-secret-0b3c7e1f5a9d2c84";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Build the fixture mailing into `dir` sealed with `secret`.
async fn build_with(db: &TestDb, dir: &Path, secret: &str) -> Vec<(LinkKind, Token)> {
    let options = builder::BuildOptions {
        secret: Some(secret.to_owned()),
        ..options(dir, fixture("mailing.json"), fixture("recipients.csv"))
    };
    builder::run(&db.pool, &options).await.expect("built");
    let letters = std::fs::read_to_string(dir.join("letters.jsonl")).unwrap();
    letters
        .lines()
        .flat_map(|line| {
            let letter: serde_json::Value = serde_json::from_str(line).unwrap();
            let html = letter["html"].as_str().unwrap().to_owned();
            tracked_tokens(&format!("{html} {}", letter["headers"]))
        })
        .collect()
}

/// The binary with the test's database and these secrets.
fn linktrack_with(db: &TestDb, secret: &str, previous: Option<&str>) -> Command {
    let mut command = Command::new(crate::common::linktrack_binary());
    command.env("DATABASE_URL", &db.url).env("RUST_LOG", "warn");
    with_secrets(command, secret, previous)
}

/// `command` with these secrets and no others from the environment.
fn with_secrets(mut command: Command, secret: &str, previous: Option<&str>) -> Command {
    command
        .env("LINKTRACK_SECRET", secret)
        .env_remove("LINKTRACK_PREVIOUS_SECRETS")
        .env_remove("LINKTRACK_PREVIOUS_SECRETS_FILE");
    if let Some(previous) = previous {
        command.env("LINKTRACK_PREVIOUS_SECRETS", previous);
    }
    command
}

fn server_with(secret: &str, previous: &[&str]) -> impl FnOnce(AppSettings) -> AppSettings {
    let secret = secret.to_owned();
    let previous: Vec<String> = previous.iter().map(|s| (*s).to_owned()).collect();
    move |settings| AppSettings {
        secret: Some(secret),
        previous_secrets: previous,
        ..quick(settings)
    }
}

async fn start_refused(db: &TestDb, secret: &str, previous: &[&str]) -> KeyRefusal {
    let journal = tempfile::tempdir().unwrap();
    let settings = server_with(secret, previous)(AppSettings::new(
        db.pool.clone(),
        linktrack::journal::segments::JournalSettings::new(journal.path()),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    match App::build(settings, listener).await {
        Err(ServeError::SealKey(refusal)) => refusal,
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("the server started"),
    }
}

/// The measurement, the other way round: a mailing built with one
/// secret, the secret rotated, the server restarted with the new one and
/// the old in its ring: every click redirects where it did, every pixel
/// answers the GIF and records an open, every unsubscribe page and
/// one-click POST works, and a link whose row is gone still leads to its
/// template's URL.
#[tokio::test]
async fn rotating_the_secret_between_build_and_click_keeps_every_link() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = build_with(&db, dir.path(), OLD).await;
    let of = |kind: LinkKind| -> Vec<Token> {
        let mut found: Vec<Token> = tokens
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, t)| *t)
            .collect();
        found.sort();
        found.dedup();
        found
    };
    // `/c/` serves the honeypot link too: the clicks are the rows of kind click.
    let mut clicks = Vec::new();
    for token in of(LinkKind::Click) {
        let (kind,): (String,) =
            sqlx::query_as("SELECT CAST(kind AS CHAR) FROM links WHERE uuid = ?")
                .bind(token.as_bytes().as_slice())
                .fetch_one(&db.pool)
                .await
                .unwrap();
        if kind == "click" {
            clicks.push(token);
        }
    }
    let (pixels, unsubscribes) = (of(LinkKind::Pixel), of(LinkKind::Unsubscribe));
    assert_eq!(
        (clicks.len(), pixels.len(), unsubscribes.len()),
        (56, 7, 7),
        "7 letters of 8 links each"
    );

    // The rotation: refused without the old secret in the ring (its links
    // live), done with it.
    let out = linktrack_with(&db, NEW, None)
        .args(["secrets", "rotate"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("LINKTRACK_PREVIOUS_SECRETS"), "{stderr}");
    let out = linktrack_with(&db, NEW, Some(OLD))
        .args(["secrets", "rotate"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A server with the new secret alone is refused: the old key's links live.
    let refusal = start_refused(&db, NEW, &[]).await;
    assert!(
        matches!(&refusal, KeyRefusal::MissingFromRing { why, .. } if why.contains("live until")),
        "{refusal}"
    );

    // One click link's row is gone (its day dropped): its template answers.
    let late = clicks[0];
    sqlx::query("DELETE FROM links WHERE uuid = ?")
        .bind(late.as_bytes().as_slice())
        .execute(&db.pool)
        .await
        .unwrap();

    let app = TestServer::start(db.pool.clone(), server_with(NEW, &[OLD])).await;
    let client = client();
    let mut redirected = 0;
    for token in &clicks {
        let response = client
            .get(format!("{}/c/{token}", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 302, "click {token}");
        let location = response.headers()["location"].to_str().unwrap();
        let url: Option<(String,)> = sqlx::query_as("SELECT url FROM links WHERE uuid = ?")
            .bind(token.as_bytes().as_slice())
            .fetch_optional(&db.pool)
            .await
            .unwrap();
        if let Some((url,)) = url {
            assert_eq!(location, url, "click {token}");
        } else {
            assert_eq!(*token, late);
            assert!(location.starts_with("https://"), "{location}");
        }
        redirected += 1;
    }
    assert_eq!(redirected, clicks.len());
    for token in &pixels {
        let response = client
            .get(format!("{}/o/{token}.gif", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "pixel {token}");
        assert_eq!(response.bytes().await.unwrap().len(), 43);
    }
    for token in &unsubscribes {
        let page = client
            .get(format!("{}/u/{token}", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200, "unsubscribe page {token}");
        let done = client
            .post(format!("{}/u/{token}", app.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("List-Unsubscribe=One-Click")
            .send()
            .await
            .unwrap();
        assert_eq!(done.status(), 200, "one-click unsubscribe {token}");
    }
    app.stop().await;
    // Every live click, every open and every unsubscribe was recorded
    // against its letter (the late click has none).
    let events = crate::common::wait_for_events(&db.pool, clicks.len() + 2 * pixels.len()).await;
    let with_letter = |kind: &str| {
        events
            .iter()
            .filter(|e| e.kind == kind && e.link_id.unwrap_or(0) > 0)
            .count()
    };
    assert_eq!(with_letter("click"), clicks.len() - 1, "{events:?}");
    assert_eq!(with_letter("open"), pixels.len(), "{events:?}");
    assert_eq!(with_letter("unsubscribe"), unsubscribes.len(), "{events:?}");
    let suppressed: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM suppressions")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(suppressed.0, 7);

    // New letters are sealed with the new key; a builder left with the old
    // secret (a cron job's environment) is refused, naming the fix.
    let again = tempfile::tempdir().unwrap();
    let options = builder::BuildOptions {
        secret: Some(OLD.to_owned()),
        ..options(
            again.path(),
            fixture("mailing.json"),
            fixture("recipients.csv"),
        )
    };
    let err = builder::run(&db.pool, &options).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("replaced on") && text.contains("--new-secret"),
        "{text}"
    );
}

/// A build whose secret the database has never seen exits 1 before it
/// writes anything: no letters, no rejects, no rows, no mailing.
#[tokio::test]
async fn a_build_with_a_stray_secret_exits_non_zero_before_writing_anything() {
    let db = TestDb::new().await;
    let first = tempfile::tempdir().unwrap();
    build_with(&db, first.path(), OLD).await;
    let count = |table: &'static str| {
        let pool = db.pool.clone();
        async move {
            let (n,): (i64,) = sqlx::query_as(&format!("SELECT COUNT(*) FROM {table}"))
                .fetch_one(&pool)
                .await
                .unwrap();
            n
        }
    };
    let before = (
        count("links").await,
        count("mailings").await,
        count("link_templates").await,
        count("seal_keys").await,
    );
    let dir = tempfile::tempdir().unwrap();
    let mailing = dir.path().join("mailing.json");
    std::fs::write(
        &mailing,
        std::fs::read_to_string(fixture("mailing.json"))
            .unwrap()
            .replace("weekly-2026-47", "stray-secret")
            .replace(
                "\"newsletter.html\"",
                &format!("{:?}", fixture("newsletter.html")),
            ),
    )
    .unwrap();
    let out = dir.path().join("letters.jsonl");
    let stray = "a-stray-secret-from-a-cron-env";
    let run = with_secrets(build_command(&db.url), stray, None)
        .arg("--mailing")
        .arg(&mailing)
        .arg("--recipients")
        .arg(fixture("recipients.csv"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("never seen"), "{stderr}");
    assert!(stderr.contains("linktrack secrets rotate"), "{stderr}");
    let written: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "mailing.json")
        .collect();
    assert_eq!(written, Vec::<String>::new(), "files written");
    let after = (
        count("links").await,
        count("mailings").await,
        count("link_templates").await,
        count("seal_keys").await,
    );
    assert_eq!(after, before, "rows written");
    // The same build with --new-secret starts a new key, and builds.
    let run = with_secrets(build_command(&db.url), stray, None)
        .args(["--new-secret", "--mailing"])
        .arg(&mailing)
        .arg("--recipients")
        .arg(fixture("recipients.csv"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(count("seal_keys").await, before.3 + 1);
}

/// A server with a secret the database has never seen does not start,
/// and says what to do; `secrets retire` gives a lost key's links up.
#[tokio::test]
async fn a_server_with_an_unknown_secret_does_not_start() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    build_with(&db, dir.path(), OLD).await;
    let refusal = start_refused(&db, NEW, &[]).await;
    assert!(matches!(refusal, KeyRefusal::Unknown { .. }), "{refusal}");
    // The binary: exit 1 before listening, the fix in the message (killed
    // when the test fails if it serves instead, so it fails rather than
    // hangs or leaves a server behind).
    let mut serve = linktrack_with(&db, NEW, None);
    serve
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = tokio::process::Command::from(serve)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait::eventually(PATIENCE, "the refused server exits", || {
        std::future::ready(match child.try_wait() {
            Ok(Some(status)) => Ok(status),
            Ok(None) => Err("still running".to_owned()),
            Err(e) => Err(e.to_string()),
        })
    })
    .await;
    let out = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("never seen") && stderr.contains("LINKTRACK_PREVIOUS_SECRETS"),
        "{stderr}"
    );
    // Rotated to NEW with OLD's secret lost: the server needs OLD until
    // its links are given up.
    let made_new = linktrack_with(&db, NEW, None)
        .args(["secrets", "list"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&made_new.stdout).into_owned();
    let old_fingerprint = listed
        .lines()
        .nth(1)
        .and_then(|line| line.split('\t').next())
        .unwrap()
        .to_owned();
    assert!(listed.contains("current"), "{listed}");
    let journal = tempfile::tempdir().unwrap();
    let settings = AppSettings {
        new_secret: true,
        ..server_with(NEW, &[])(AppSettings::new(
            db.pool.clone(),
            linktrack::journal::segments::JournalSettings::new(journal.path()),
        ))
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refused = App::build(settings, listener).await.err().unwrap();
    assert!(refused.to_string().contains(&old_fingerprint), "{refused}");
    let links: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let out = linktrack(
        &db,
        &[
            "secrets",
            "retire",
            &old_fingerprint,
            "--force",
            "--i-understand-links-break",
            &links.to_string(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let app = TestServer::start(db.pool.clone(), |settings| AppSettings {
        new_secret: true,
        ..server_with(NEW, &[])(settings)
    })
    .await;
    app.stop().await;
}

/// An installation from before seal keys were recorded: the first server
/// or build records its key only if that key opens the newest stored
/// tokens; any other secret is refused.
#[tokio::test]
async fn an_upgraded_installation_adopts_only_the_key_its_tokens_were_sealed_with() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    build_with(&db, dir.path(), OLD).await;
    // As the migration leaves an install that had links: no key recorded,
    // keys recorded from now.
    sqlx::query("DELETE FROM seal_keys")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE token_format SET keys_recorded_since_ms = FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) + 1",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let refusal = start_refused(&db, NEW, &[]).await;
    assert_eq!(
        refusal,
        KeyRefusal::OpensNoStoredToken {
            unset: false,
            opened: refusal_opened(&refusal),
            sampled: 16
        }
    );
    let app = TestServer::start(db.pool.clone(), server_with(OLD, &[])).await;
    app.stop().await;
    let how: (String,) = sqlx::query_as("SELECT how FROM seal_keys")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(how.0, "adopted");
}

fn refusal_opened(refusal: &KeyRefusal) -> usize {
    match refusal {
        KeyRefusal::OpensNoStoredToken { opened, .. } => {
            assert!(*opened < 16, "{refusal}");
            *opened
        }
        other => panic!("refused otherwise: {other}"),
    }
}

/// `secrets list`'s fingerprints, newest first.
fn fingerprints(db: &TestDb, secret: &str, previous: Option<&str>) -> Vec<String> {
    let out = linktrack_with(db, secret, previous)
        .args(["secrets", "list"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|line| line.split('\t').next().map(str::to_owned))
        .collect()
}

fn retire(db: &TestDb, fingerprint: &str, typed: Option<u64>) -> std::process::Output {
    let mut args = vec![
        "secrets".to_owned(),
        "retire".to_owned(),
        fingerprint.to_owned(),
    ];
    if let Some(typed) = typed {
        args.extend([
            "--force".to_owned(),
            "--i-understand-links-break".to_owned(),
        ]);
        args.push(typed.to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    linktrack(db, &args)
}

/// `secrets retire` gives no live link up by accident: the current key
/// and a key that sealed links within --keep-days are refused, naming the
/// count and the fix; `--force` needs that count typed back, and is
/// recorded; a retired key seals nothing more.
#[tokio::test]
async fn retiring_a_key_whose_links_live_needs_the_count_typed_back() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    build_with(&db, dir.path(), OLD).await;
    let links: u64 = sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap()
        .try_into()
        .unwrap();
    assert!(links > 0);
    let old = fingerprints(&db, OLD, None)[0].clone();

    // The current key: refused, whatever it sealed.
    let out = retire(&db, &old, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("current key"), "{stderr}");
    assert!(
        stderr.contains(&format!("breaks {links} live link")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("--force --i-understand-links-break {links}")),
        "{stderr}"
    );

    // Rotated: the old key is a previous one whose links live.
    let rotated = linktrack_with(&db, NEW, Some(OLD))
        .args(["secrets", "rotate"])
        .output()
        .unwrap();
    assert!(
        rotated.status.success(),
        "{}",
        String::from_utf8_lossy(&rotated.stderr)
    );
    let new = fingerprints(&db, NEW, Some(OLD))[0].clone();
    assert_ne!(new, old);
    let out = retire(&db, &old, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("within --keep-days"), "{stderr}");
    assert!(
        stderr.contains(&format!("breaks {links} live link")),
        "{stderr}"
    );
    // The new current key sealed nothing yet, and is refused all the same.
    let out = retire(&db, &new, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("breaks 0 live link"), "{stderr}");

    // A wrong count is refused; the right one retires, on record.
    let out = retire(&db, &old, Some(links + 1));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not match"));
    let retired = || async {
        sqlx::query_as::<_, (Option<chrono::NaiveDateTime>, Option<u64>)>(
            "SELECT retired_at, retired_live_links FROM seal_keys WHERE fingerprint = ?",
        )
        .bind(&old)
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    assert_eq!(retired().await, (None, None));
    let out = retire(&db, &old, Some(links));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (at, given_up) = retired().await;
    assert!(at.is_some());
    assert_eq!(given_up, Some(links));
}

/// A current key retired by force (its secret lost) seals nothing more:
/// a build with it is refused, naming the fix.
#[tokio::test]
async fn a_build_with_a_retired_key_is_refused() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    build_with(&db, dir.path(), OLD).await;
    let old = fingerprints(&db, OLD, None)[0].clone();
    let links: u64 = sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap()
        .try_into()
        .unwrap();
    let out = retire(&db, &old, Some(links));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again = tempfile::tempdir().unwrap();
    let options = builder::BuildOptions {
        secret: Some(OLD.to_owned()),
        ..options(
            again.path(),
            fixture("mailing.json"),
            fixture("recipients.csv"),
        )
    };
    let Err(refused) = builder::run(&db.pool, &options).await else {
        panic!("a build with a retired key was not refused");
    };
    let text = format!("{refused:#}");
    assert!(text.contains("retired") && text.contains(&old), "{text}");
}
