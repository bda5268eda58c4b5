//! Tracking modes: per mailing (`track`), per recipient (`linktrack_track`)
//! and the recipient's own opt-out list, built against a real database.

use crate::common::TestDb;
use linktrack::builder::{self, BuildOptions};
use linktrack::store::tracking_optouts;
use serde_json::{json, Value};
use std::path::Path;

use crate::common::build::BASE;
const HTML: &str = "<p>Hi</p><a href=\"https://example.com/a\">a</a><a href=\"https://example.com/b\">b</a><img src=\"https://example.com/i.png\"></body>";

fn options(dir: &Path) -> BuildOptions {
    BuildOptions {
        batch_size: 2,
        ..crate::common::build::options(dir, dir.join("m.json"), dir.join("r.jsonl"))
    }
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .map(|text| {
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        })
        .unwrap_or_default()
}

/// Build `recipients` (JSON objects) in a mailing with `track` (absent when null).
async fn build_with(
    db: &TestDb,
    dir: &Path,
    track: Value,
    recipients: &[Value],
) -> (builder::Summary, Vec<Value>) {
    let mut mailing =
        json!({"mailing_id": "m31", "subject": "s", "from": "f@example.com", "html": HTML});
    if !track.is_null() {
        mailing["track"] = track;
    }
    std::fs::write(dir.join("m.json"), mailing.to_string()).unwrap();
    let lines: Vec<String> = recipients.iter().map(Value::to_string).collect();
    std::fs::write(dir.join("r.jsonl"), lines.join("\n")).unwrap();
    let summary = builder::run(&db.pool, &options(dir)).await.unwrap();
    (summary, read_jsonl(&dir.join("letters.jsonl")))
}

fn html(letter: &Value) -> &str {
    letter["html"].as_str().unwrap()
}

/// Rows of the mailing as (kind, letter_id > 0, email), sorted.
async fn rows(db: &TestDb) -> Vec<(String, bool, String)> {
    let mut rows: Vec<(String, bool, String)> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), letter_id > 0, CONVERT(email USING utf8mb4) FROM links",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    rows.sort();
    rows
}

fn unsubscribe_header_works(letter: &Value) {
    let header = letter["headers"]["List-Unsubscribe"].as_str().unwrap();
    assert!(header.starts_with(&format!("<{BASE}/u/")), "{header}");
    assert_eq!(
        letter["headers"]["List-Unsubscribe-Post"],
        "List-Unsubscribe=One-Click"
    );
}

#[tokio::test]
async fn clicks_tracks_links_without_a_pixel_and_opens_the_pixel_without_links() {
    let ann = json!({"email": "ann@example.com"});
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let (_, letters) =
        build_with(&db, dir.path(), json!("clicks"), std::slice::from_ref(&ann)).await;
    assert!(html(&letters[0]).contains(&format!("{BASE}/c/")));
    assert!(!html(&letters[0]).contains(&format!("{BASE}/o/")));
    assert!(
        html(&letters[0]).contains(&format!("{BASE}/i/")),
        "images still proxied"
    );
    unsubscribe_header_works(&letters[0]);

    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let (_, letters) = build_with(&db, dir.path(), json!("opens"), &[ann]).await;
    assert!(html(&letters[0]).contains("href=\"https://example.com/a\""));
    assert!(html(&letters[0]).contains(&format!("{BASE}/o/")));
    unsubscribe_header_works(&letters[0]);
    let kinds: Vec<String> = rows(&db).await.into_iter().map(|r| r.0).collect();
    assert_eq!(kinds, ["image", "pixel", "unsubscribe"]);
}

#[tokio::test]
async fn anonymous_letters_share_their_rows_and_only_the_unsubscribe_row_names_them() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let recipients = [
        json!({"email": "ann@example.com"}),
        json!({"email": "bob@example.com"}),
        json!({"email": "cy@example.com"}),
    ];
    let (summary, letters) = build_with(&db, dir.path(), json!("anonymous"), &recipients).await;
    assert_eq!((summary.letters_built, summary.letters_anonymous), (3, 3));
    // Every letter links and counts through the same tokens.
    let strip_unsubscribe = |letter: &Value| html(letter).to_owned();
    assert_eq!(
        strip_unsubscribe(&letters[0]),
        strip_unsubscribe(&letters[1])
    );
    assert!(html(&letters[0]).contains(&format!("{BASE}/c/")));
    assert!(html(&letters[0]).contains(&format!("{BASE}/o/")));
    let stored = rows(&db).await;
    for (kind, per_letter, email) in &stored {
        if kind == "unsubscribe" {
            assert!(*per_letter && !email.is_empty());
        } else {
            assert!(!*per_letter && email.is_empty(), "{kind} names {email}");
        }
    }
    let shared: Vec<&str> = stored
        .iter()
        .filter(|r| r.0 != "unsubscribe")
        .map(|r| r.0.as_str())
        .collect();
    assert_eq!(shared, ["click", "click", "image", "pixel"]);
    for letter in &letters {
        unsubscribe_header_works(letter);
    }
    // A re-run finds the shared rows and stores nothing new.
    let (again, letters_again) = build_with(&db, dir.path(), json!("anonymous"), &recipients).await;
    assert_eq!(again.links_stored, 0);
    assert_eq!(letters_again, letters);
    let counts: (u64, u64, u64) =
        sqlx::query_as("SELECT letters, untracked, anonymous FROM stats_letters")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(counts, (3, 0, 3));
}

#[tokio::test]
async fn a_recipients_column_overrides_the_mailing_and_an_unknown_value_is_rejected() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let recipients = [
        json!({"email": "ann@example.com", "linktrack_track": "none"}),
        json!({"email": "bob@example.com", "linktrack_track": "Anonymous"}),
        json!({"email": "cy@example.com", "linktrack_track": "cliks"}),
        json!({"email": "di@example.com", "linktrack_track": ""}),
        json!({"email": "ed@example.com", "linktrack_track": false}),
    ];
    let (summary, letters) = build_with(&db, dir.path(), Value::Null, &recipients).await;
    assert_eq!(
        (
            summary.letters_built,
            summary.letters_untracked,
            summary.letters_anonymous
        ),
        (4, 2, 1),
        "{summary}"
    );
    let rejects = read_jsonl(&dir.path().join("rejects.jsonl"));
    assert_eq!(rejects.len(), 1, "{rejects:?}");
    assert_eq!(rejects[0]["line"], 3);
    let reason = rejects[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("linktrack_track") && reason.contains("\"cliks\""),
        "{reason}"
    );
    let by_email = |email: &str| letters.iter().find(|l| l["email"] == email).unwrap();
    assert!(html(by_email("ann@example.com")).contains("href=\"https://example.com/a\""));
    assert!(!html(by_email("ann@example.com")).contains(BASE));
    assert!(!html(by_email("ed@example.com")).contains(BASE));
    assert!(html(by_email("di@example.com")).contains(&format!("{BASE}/c/")));
    for letter in &letters {
        unsubscribe_header_works(letter);
    }
    // The mailing's own mode is kept for the stats.
    let mode: Option<String> = sqlx::query_scalar("SELECT track_mode FROM mailings")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(mode.as_deref(), Some("all"));
}

#[tokio::test]
async fn an_opted_out_address_is_sent_untracked() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    tracking_optouts::add(&db.pool, &["bob@example.com".into()], "manual")
        .await
        .unwrap();
    let recipients = [
        json!({"email": "ann@example.com"}),
        // The column cannot override the recipient's own choice.
        json!({"email": " Bob@Example.com", "linktrack_track": "all"}),
    ];
    let (summary, letters) = build_with(&db, dir.path(), Value::Null, &recipients).await;
    assert_eq!((summary.letters_built, summary.letters_untracked), (2, 1));
    let bob = letters
        .iter()
        .find(|l| l["email"] == "bob@example.com")
        .unwrap();
    assert!(!html(bob).contains(&format!("{BASE}/c/")));
    assert!(!html(bob).contains(&format!("{BASE}/o/")));
    unsubscribe_header_works(bob);
    let ann = letters
        .iter()
        .find(|l| l["email"] == "ann@example.com")
        .unwrap();
    assert!(html(ann).contains(&format!("{BASE}/o/")));
}

#[tokio::test]
async fn the_cli_adds_imports_lists_and_removes_tracking_optouts() {
    use crate::common::linktrack;
    let db = TestDb::new().await;
    let added = linktrack(&db, &["tracking-optouts", "add", " Ann@Example.COM "]);
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("optouts.txt");
    std::fs::write(
        &file,
        "# consent withdrawn\nbob@example.com\n\nnot an address\n",
    )
    .unwrap();
    let refused = linktrack(&db, &["tracking-optouts", "import", file.to_str().unwrap()]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("optouts.txt: line 4"), "{stderr}");
    // The refused line is named; the file's addresses are still imported.
    let summary = String::from_utf8_lossy(&refused.stdout);
    assert!(summary.contains("1 new, 0 already listed"), "{summary}");
    std::fs::write(&file, "bob@example.com\nann@example.com\n").unwrap();
    let imported = linktrack(&db, &["tracking-optouts", "import", file.to_str().unwrap()]);
    let summary = String::from_utf8_lossy(&imported.stdout);
    assert!(summary.contains("0 new, 2 already listed"), "{summary}");
    let list = linktrack(&db, &["tracking-optouts", "list"]);
    let list = String::from_utf8_lossy(&list.stdout).to_string();
    let rows: Vec<Vec<&str>> = list.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 2, "{list}");
    assert_eq!(&rows[0][..2], ["ann@example.com", "manual"]);
    assert_eq!(&rows[1][..2], ["bob@example.com", "import"]);
    let removed = linktrack(&db, &["tracking-optouts", "remove", "ANN@example.com"]);
    assert!(String::from_utf8_lossy(&removed.stdout).contains("removed 1"));
    let left = tracking_optouts::list(&db.pool, None, 10).await.unwrap();
    assert_eq!(left.len(), 1);
}

/// The 32 hex digits after `{BASE}{route}` in `text`.
fn token_after<'a>(text: &'a str, route: &str) -> &'a str {
    let needle = format!("{BASE}{route}");
    let at = text
        .find(&needle)
        .unwrap_or_else(|| panic!("no {needle} in {text}"))
        + needle.len();
    &text[at..at + 32]
}

#[tokio::test]
async fn stop_tracking_me_confirms_on_get_records_on_post_and_later_letters_go_untracked() {
    use crate::common::{client, quick, server_pool, TestServer};
    use reqwest::StatusCode;
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let creative = format!("{HTML}<a href=\"{{{{ stop_tracking_url }}}}\">stop tracking me</a>");
    let mailing = json!({"mailing_id": "m31", "subject": "s", "from": "f@example.com",
        "html": creative, "stop_tracking_footer": true});
    std::fs::write(dir.path().join("m.json"), mailing.to_string()).unwrap();
    std::fs::write(
        dir.path().join("r.jsonl"),
        "{\"email\":\"Ann@Example.com\"}\n{\"email\":\"bob@example.com\",\"linktrack_track\":\"none\"}\n",
    )
    .unwrap();
    builder::run(&db.pool, &options(dir.path())).await.unwrap();
    let letters = read_jsonl(&dir.path().join("letters.jsonl"));
    let ann = html(&letters[0]);
    // The placed link and the footer's: the same token, never rewritten.
    assert_eq!(ann.matches(&format!("{BASE}/t/")).count(), 2, "{ann}");
    assert!(
        ann.contains("Stop tracking me</a></p><img"),
        "footer, then pixel: {ann}"
    );
    // An untracked letter keeps the placed link (it leads somewhere) but no footer.
    let bob = html(&letters[1]);
    assert_eq!(bob.matches(&format!("{BASE}/t/")).count(), 1, "{bob}");

    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();
    let url = server.url(&format!("/t/{}", token_after(ann, "/t/")));
    let optouts = || async { tracking_optouts::list(&db.pool, None, 10).await.unwrap() };
    let page = http.get(&url).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("<form method=\"post\""));
    assert!(optouts().await.is_empty(), "a GET records nothing");
    for _ in 0..2 {
        let done = http.post(&url).send().await.unwrap();
        assert_eq!(done.status(), StatusCode::OK);
    }
    let listed = optouts().await;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].email.as_str(), listed[0].source.as_str()),
        ("ann@example.com", "link")
    );

    // Another kind's token is unknown on /t/ (it would record a choice no
    // one made), and the unsubscribe link still unsubscribes.
    let unsubscribe = token_after(
        letters[0]["headers"]["List-Unsubscribe"].as_str().unwrap(),
        "/u/",
    );
    let wrong = http
        .post(server.url(&format!("/t/{unsubscribe}")))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::NOT_FOUND);
    // Bob's letter is untracked; his one-click unsubscribe works all the same.
    let bob_header = letters[1]["headers"]["List-Unsubscribe"].as_str().unwrap();
    let unsubscribed = http
        .post(server.url(&format!("/u/{}", token_after(bob_header, "/u/"))))
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    assert_eq!(unsubscribed.status(), StatusCode::OK);
    let suppressed =
        linktrack::store::suppressions::suppressed_among(&db.pool, &["bob@example.com"])
            .await
            .unwrap();
    assert!(suppressed.contains("bob@example.com"));
    server.stop().await;

    // The next mailing sends Ann her letter, untracked.
    let next = json!({"mailing_id": "m32", "subject": "s", "from": "f@example.com", "html": HTML});
    std::fs::write(dir.path().join("m.json"), next.to_string()).unwrap();
    std::fs::write(
        dir.path().join("r.jsonl"),
        "{\"email\":\"ann@example.com\"}\n",
    )
    .unwrap();
    let summary = builder::run(&db.pool, &options(dir.path())).await.unwrap();
    let letters = read_jsonl(&dir.path().join("letters.jsonl"));
    assert_eq!((summary.letters_built, summary.letters_untracked), (1, 1));
    assert!(!html(&letters[0]).contains(&format!("{BASE}/c/")));
}

#[tokio::test]
async fn the_stats_api_and_dashboard_say_the_mode_and_the_untracked_and_anonymous_letters() {
    use crate::common::TestServer;
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let recipients = [
        json!({"email": "ann@example.com"}),
        json!({"email": "bob@example.com", "linktrack_track": "none"}),
        json!({"email": "cy@example.com", "linktrack_track": "anonymous"}),
        json!({"email": "di@example.com", "linktrack_track": "anonymous"}),
    ];
    build_with(&db, dir.path(), json!("clicks"), &recipients).await;
    let token = "test-token-0123456789";
    let app = TestServer::with_stats(db.pool.clone(), Some(token), None, None).await;
    let http = reqwest::Client::new();
    let get = |path: &str| {
        http.get(format!("{}{path}", app.base))
            .bearer_auth(token)
            .send()
    };
    let api: Value = serde_json::from_str(
        &get("/api/mailings/m31/stats")
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(api["letters_built"], 4);
    assert_eq!(
        api["tracking"],
        json!({"mode": "clicks", "untracked": 1, "anonymous": 2})
    );
    let page = get("/mailings/m31").await.unwrap().text().await.unwrap();
    assert!(
        page.contains("Tracking: clicks · 1 letters untracked, 2 anonymous"),
        "{page}"
    );
}
