//! Links the sender controls after sending, end to end on real MariaDB: a
//! mailing built with UTM tags and a named link, served by two servers
//! (one with the link in its cache), repointed from the command line and
//! the API; the bad inputs refused naming what is wrong.

use crate::common::build::{options, tracked_tokens};
use crate::common::wait::{self, PATIENCE};
use crate::common::{client, linktrack, quick, server_pool, TestDb, TestServer};
use linktrack::builder;
use linktrack::server::AppSettings;
use linktrack::store::links::LinkKind;
use linktrack::store::repoint::{self, LinkSelector, RepointRequest};
use linktrack::token::Token;
use reqwest::{header, StatusCode};
use std::time::Duration;

const MAILING: &str = "m-links-56";
const API_TOKEN: &str = "links-test-token";
const CTA: &str = "https://shop.example/spring?utm_source=partner#buy";
const OTHER: &str = "https://shop.example/about";
const FIXED: &str = "https://shop.example/fixed";

/// Build the mailing for `readers` and return each letter's click tokens
/// (in position order) and HTML.
async fn build(db: &TestDb, dir: &std::path::Path, readers: &[&str]) -> Vec<(Vec<Token>, String)> {
    let html = format!(
        "<p>Hi <a href=\"{CTA}\" data-linktrack-name=\"cta\">Buy</a> \
         <a data-linktrack-utm=\"off\" href=\"{OTHER}\">About</a></p>"
    );
    let lines: Vec<String> = readers
        .iter()
        .map(|r| format!("{{\"email\":\"{r}\"}}"))
        .collect();
    build_with(db, dir, &html, &lines).await
}

/// Build `html` for the recipients file's `lines` (JSON objects).
async fn build_with(
    db: &TestDb,
    dir: &std::path::Path,
    html: &str,
    lines: &[String],
) -> Vec<(Vec<Token>, String)> {
    let mailing = dir.join("mailing.json");
    let file = serde_json::json!({
        "mailing_id": MAILING,
        "subject": "Spring",
        "from": "News <news@example.com>",
        "html": html,
        "honeypot": false,
        "utm": {"source": "newsletter", "medium": "email", "campaign": "m{{ mailing_id }}-{{ name }}-{{ position }}"},
    });
    std::fs::write(&mailing, file.to_string()).unwrap();
    let recipients = dir.join("r.jsonl");
    std::fs::write(&recipients, lines.join("\n") + "\n").unwrap();
    let summary = builder::run(&db.pool, &options(dir, mailing, recipients))
        .await
        .unwrap();
    assert_eq!(summary.letters_built, lines.len() as u64);
    std::fs::read_to_string(dir.join("letters.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            let letter: serde_json::Value = serde_json::from_str(line).unwrap();
            let html = letter["html"].as_str().unwrap().to_owned();
            let clicks = tracked_tokens(&html)
                .into_iter()
                .filter(|(kind, _)| *kind == LinkKind::Click)
                .map(|(_, token)| token)
                .collect();
            (clicks, html)
        })
        .collect()
}

async fn location(server: &TestServer, token: Token) -> String {
    let answer = client()
        .get(server.url(&format!("/c/{token}")))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::FOUND);
    answer.headers()[header::LOCATION]
        .to_str()
        .unwrap()
        .to_owned()
}

/// Poll `server` until `token` redirects to `want` (a deadline, no timing
/// asserted: the servers poll every 2 s).
async fn wait_for_location(server: &TestServer, token: Token, want: &str) {
    let what = format!("{token} leads to {want:?}");
    wait::eventually_eq(PATIENCE, &what, want.to_owned(), || location(server, token)).await;
}

/// `PATCH` a mailing's link through the API with the operator's key.
async fn patch_link(
    http: &reqwest::Client,
    url: String,
    body: serde_json::Value,
) -> reqwest::Response {
    http.patch(url)
        .bearer_auth(API_TOKEN)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

async fn start(db: &TestDb) -> TestServer {
    TestServer::start(server_pool(db).await, |settings| AppSettings {
        api_token: Some(API_TOKEN.to_owned()),
        ..quick(settings)
    })
    .await
}

fn tagged(url_without_fragment: &str, fragment: &str, position: u32, name: &str) -> String {
    let separator = if url_without_fragment.contains('?') {
        '&'
    } else {
        '?'
    };
    format!(
        "{url_without_fragment}{separator}utm_medium=email&utm_campaign=m{MAILING}-{name}-{position}{fragment}"
    )
}

#[tokio::test]
async fn repointed_links_reach_every_server_and_keep_utm_tags_at_the_redirect() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build(&db, dir.path(), &["ann@example.com", "bob@example.com"]).await;
    let (ann, html) = &letters[0];
    let bob = &letters[1].0;
    assert_eq!(ann.len(), 2, "two click links: {html}");
    // The letter carries no tags and none of our attributes.
    assert!(
        !html.contains("utm_medium") && !html.contains("data-linktrack"),
        "{html}"
    );

    // Server A has the links in its cache before the repoint; B is cold.
    let a = start(&db).await;
    // The link's own utm_source stays, the mailing's other tags are added
    // before the fragment; the link marked utm="off" gets none.
    let cta_tagged = tagged(
        "https://shop.example/spring?utm_source=partner",
        "#buy",
        1,
        "cta",
    );
    assert_eq!(location(&a, ann[0]).await, cta_tagged);
    assert_eq!(location(&a, ann[1]).await, OTHER);

    let out = linktrack(
        &db,
        &[
            "links",
            "repoint",
            "--mailing",
            MAILING,
            "--position",
            "1",
            "--to",
            FIXED,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b = start(&db).await;
    let fixed_tagged =
        format!("{FIXED}?utm_source=newsletter&utm_medium=email&utm_campaign=m{MAILING}-cta-1");
    for server in [&a, &b] {
        for letter in [ann, bob] {
            wait_for_location(server, letter[0], &fixed_tagged).await;
            assert_eq!(
                location(server, letter[1]).await,
                OTHER,
                "position 2 untouched"
            );
        }
    }

    // By name through the API, then one recipient's link only.
    let http = client();
    let patched = patch_link(
        &http,
        a.url(&format!("/api/mailings/{MAILING}/links/cta")),
        serde_json::json!({"to": "https://shop.example/v2"}),
    )
    .await;
    assert_eq!(
        patched.status(),
        StatusCode::OK,
        "{}",
        patched.text().await.unwrap()
    );
    let out = linktrack(
        &db,
        &[
            "links",
            "repoint",
            "--mailing",
            MAILING,
            "--name",
            "cta",
            "--recipient",
            "Bob@Example.com",
            "--to",
            "https://shop.example/bob",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v2 = format!(
        "https://shop.example/v2?utm_source=newsletter&utm_medium=email&utm_campaign=m{MAILING}-cta-1"
    );
    let bobs = format!(
        "https://shop.example/bob?utm_source=newsletter&utm_medium=email&utm_campaign=m{MAILING}-cta-1"
    );
    for server in [&a, &b] {
        wait_for_location(server, ann[0], &v2).await;
        wait_for_location(server, bob[0], &bobs).await;
    }

    // The history: who, from, to, in order.
    let listed: serde_json::Value = http
        .get(b.url(&format!("/api/mailings/{MAILING}/links")))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .map(|text| serde_json::from_str(&text).unwrap())
        .unwrap();
    let cta = &listed["links"][0];
    assert_eq!(cta["name"], "cta");
    assert_eq!(cta["built"], CTA);
    assert_eq!(cta["current"], "https://shop.example/v2");
    let history: Vec<(String, String, String, Option<u64>)> = cta["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["who"].as_str().unwrap().to_owned(),
                r["from"].as_str().unwrap().to_owned(),
                r["to"].as_str().unwrap().to_owned(),
                r["letter_id"].as_u64(),
            )
        })
        .collect();
    assert_eq!(history.len(), 3, "{history:?}");
    assert_eq!(history[0], ("cli".into(), CTA.into(), FIXED.into(), None));
    assert_eq!(
        history[1],
        (
            "LINKTRACK_API_TOKEN".into(),
            FIXED.into(),
            "https://shop.example/v2".into(),
            None
        )
    );
    assert_eq!(history[2].0, "cli");
    assert_eq!(history[2].1, "https://shop.example/v2");
    assert!(
        history[2].3.is_some(),
        "one letter's repoint names its letter"
    );
    assert_eq!(listed["links"][1]["utm"], false);
    let printed = linktrack(&db, &["links", "list", "--mailing", MAILING]);
    let printed = String::from_utf8_lossy(&printed.stdout);
    assert!(
        printed.contains("1 \"cta\": https://shop.example/v2"),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("by cli: {CTA} -> {FIXED}")),
        "{printed}"
    );

    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn bad_repoints_are_refused_naming_what_is_wrong_and_record_nothing() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    build(&db, dir.path(), &["ann@example.com"]).await;
    for (args, says) in [
        (
            vec!["--position", "1", "--to", "javascript:alert(1)"],
            "must be an http:// or https:// URL",
        ),
        (
            vec!["--position", "1", "--to", "data:text/html,hi"],
            "must be an http:// or https:// URL",
        ),
        (
            vec!["--position", "9", "--to", FIXED],
            "has no link at position 9 (its links are 1–2)",
        ),
        (
            vec!["--name", "nope", "--to", FIXED],
            "has no link named \"nope\" (its names: \"cta\")",
        ),
        (
            vec!["--from", "https://elsewhere.example/", "--to", FIXED],
            "no link of mailing",
        ),
        (
            vec![
                "--position",
                "1",
                "--recipient",
                "zed@example.com",
                "--to",
                FIXED,
            ],
            "has no letter",
        ),
    ] {
        let mut all = vec!["links", "repoint", "--mailing", MAILING];
        all.extend(args.iter().copied());
        let out = linktrack(&db, &all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let out = linktrack(
        &db,
        &[
            "links",
            "repoint",
            "--mailing",
            "no-such",
            "--position",
            "1",
            "--to",
            FIXED,
        ],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("mailing \"no-such\" not found"));
    let recorded: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM link_repoints")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(recorded, 0);

    // The API says the same as JSON {"error": {"code", "message"}}.
    let server = start(&db).await;
    let http = client();
    for (path, body, status, code) in [
        (
            "/api/mailings/no-such/links/1",
            FIXED,
            StatusCode::NOT_FOUND,
            "unknown_mailing",
        ),
        (
            &*format!("/api/mailings/{MAILING}/links/7"),
            FIXED,
            StatusCode::NOT_FOUND,
            "unknown_position",
        ),
        (
            &*format!("/api/mailings/{MAILING}/links/nope"),
            FIXED,
            StatusCode::NOT_FOUND,
            "unknown_name",
        ),
        (
            &*format!("/api/mailings/{MAILING}/links/cta"),
            "javascript:alert(1)",
            StatusCode::UNPROCESSABLE_ENTITY,
            "target_refused",
        ),
    ] {
        let answer = patch_link(&http, server.url(path), serde_json::json!({ "to": body })).await;
        assert_eq!(answer.status(), status, "{path}");
        let json: serde_json::Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
        assert_eq!(json["error"]["code"], code, "{path}: {json}");
        assert!(json["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    let unauthorised = http
        .patch(server.url(&format!("/api/mailings/{MAILING}/links/1")))
        .header(header::CONTENT_TYPE, "application/json")
        .body(serde_json::json!({ "to": FIXED }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorised.status(), StatusCode::UNAUTHORIZED);
    server.stop().await;
}

#[tokio::test]
async fn ten_thousand_repoints_in_a_row_leave_the_last_one_in_force() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build(&db, dir.path(), &["ann@example.com"]).await;
    let server = start(&db).await;
    let mailing = linktrack::mailing_id::MailingId::parse(MAILING).unwrap();
    const N: u32 = 10_000;
    for n in 1..=N {
        let request = RepointRequest {
            links: LinkSelector::Position(2),
            recipient: None,
            to: format!("https://shop.example/n/{n}"),
            who: "test".into(),
        };
        let done = repoint::repoint(&db.pool, &mailing, &request)
            .await
            .unwrap();
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].version, n);
    }
    wait_for_location(
        &server,
        letters[0].0[1],
        &format!("https://shop.example/n/{N}"),
    )
    .await;
    let listed = repoint::list(&db.pool, &mailing).await.unwrap();
    assert_eq!(listed[1].version, N);
    assert_eq!(listed[1].history.len(), N as usize);
    assert_eq!(listed[1].history[1].from, "https://shop.example/n/1");
    server.stop().await;
}

#[tokio::test]
async fn two_links_of_one_name_are_a_build_error_naming_both() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let mailing = dir.path().join("mailing.json");
    let file = serde_json::json!({
        "mailing_id": "m-clash",
        "subject": "S",
        "from": "news@example.com",
        "html": "<a href=\"https://a.example/\" data-linktrack-name=\"cta\">a</a>\
                 <a href=\"https://b.example/\" data-linktrack-name=\"cta\">b</a>",
    });
    std::fs::write(&mailing, file.to_string()).unwrap();
    let recipients = dir.path().join("r.jsonl");
    std::fs::write(&recipients, "{\"email\":\"ann@example.com\"}\n").unwrap();
    let err = builder::run(&db.pool, &options(dir.path(), mailing, recipients))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "links 1 (https://a.example/) and 2 (https://b.example/) are both named \"cta\""
        ),
        "{err}"
    );
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, 0, "nothing built");
}

/// The export says which target each click went to: clicks before a
/// repoint count for version 0 (the built URL), after it for version 1;
/// each counted by the click's recorded time against the repoint's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_export_shows_clicks_before_and_after_a_repoint() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build(&db, dir.path(), &["ann@example.com", "bob@example.com"]).await;
    let (ann, bob) = (&letters[0].0, &letters[1].0);
    let mut settings = crate::common::test_settings();
    settings.bots.min_click_delay = Duration::ZERO;
    settings.bots.burst_links = 1_000;
    let server = TestServer::start(server_pool(&db).await, |s| AppSettings {
        api_token: Some(API_TOKEN.to_owned()),
        ..crate::common::quick_with(settings)(s)
    })
    .await;
    // Before the fix: Ann clicks the button twice and the other link once.
    location(&server, ann[0]).await;
    location(&server, ann[0]).await;
    location(&server, ann[1]).await;
    crate::common::wait_for_events(&db.pool, 3).await;
    let request = RepointRequest {
        links: LinkSelector::Name("cta".into()),
        recipient: None,
        to: FIXED.into(),
        who: "test".into(),
    };
    let mailing = crate::common::mailing_id(MAILING);
    let recorded = repoint::repoint(&db.pool, &mailing, &request)
        .await
        .unwrap();
    assert_eq!(recorded[0].version, 1);
    // After it: every click the wait makes reaches the fixed target.
    let fixed =
        format!("{FIXED}?utm_source=newsletter&utm_medium=email&utm_campaign=m{MAILING}-cta-1");
    wait_for_location(&server, bob[0], &fixed).await;
    wait_for_location(&server, ann[0], &fixed).await;
    server.stop().await;
    let verdicts = linktrack::bots::letter_judgement::VerdictRules {
        min_click_delay: Duration::ZERO,
        burst_links: 1_000,
        ..Default::default()
    };
    linktrack::store::rollup::rollup_with(
        &db.pool,
        &linktrack::store::rollup::RollupOptions {
            verdicts: std::sync::Arc::new(verdicts),
            ..Default::default()
        },
    )
    .await
    .unwrap();

    // What the events say, by brute force against the repoint's time.
    let events: Vec<(u64, u32, chrono::NaiveDateTime)> = sqlx::query_as(
        "SELECT letter_id, position, occurred_at FROM events WHERE kind = 'click' AND bot = 0",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(events.len() >= 5, "{events:?}");
    let fixed_at = recorded[0].at.naive_utc();
    let mut expected: std::collections::BTreeMap<(u64, u32, u32), u64> = Default::default();
    for (letter, position, at) in &events {
        let version = u32::from(*position == 1 && *at >= fixed_at);
        *expected.entry((*letter, *position, version)).or_default() += 1;
    }

    let out = linktrack(
        &db,
        &[
            "export",
            "recipients",
            "--mailing",
            MAILING,
            "--format",
            "jsonl",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut exported: std::collections::BTreeMap<(u64, u32, u32), u64> = Default::default();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        for target in row["targets_clicked"].as_array().unwrap() {
            exported.insert(
                (
                    row["letter_id"].as_u64().unwrap(),
                    target["position"].as_u64().unwrap() as u32,
                    target["version"].as_u64().unwrap() as u32,
                ),
                target["clicks"].as_u64().unwrap(),
            );
        }
        if row["address"] == "ann@example.com" {
            let versions: Vec<(u64, u64)> = row["targets_clicked"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    (
                        t["position"].as_u64().unwrap(),
                        t["version"].as_u64().unwrap(),
                    )
                })
                .collect();
            assert_eq!(versions, [(1, 0), (1, 1), (2, 0)], "{row}");
            assert_eq!(row["targets_clicked"][0]["clicks"], 2, "{row}");
        }
        if row["address"] == "bob@example.com" {
            let versions: Vec<u64> = row["targets_clicked"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["version"].as_u64().unwrap())
                .collect();
            assert_eq!(versions, [1], "{row}");
        }
    }
    assert_eq!(exported, expected);

    // The CSV says the same as POSITION@VERSION.
    let out = linktrack(&db, &["export", "recipients", "--mailing", MAILING]);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut sheet = csv::Reader::from_reader(text.as_bytes());
    let header = sheet.headers().unwrap().clone();
    let at = header.iter().position(|h| h == "targets_clicked").unwrap();
    let ann_row = sheet
        .records()
        .map(Result::unwrap)
        .find(|r| &r[1] == "ann@example.com")
        .unwrap();
    assert_eq!(&ann_row[at], "1@0 1@1 2@0");
}

/// `GET /api/mailings`: every mailing by id, a page at a time after a
/// cursor, with its campaign and counts; `?utm_campaign=` keeps one
/// campaign's (its `{{ mailing_id }}` filled in).
#[tokio::test]
async fn the_mailings_list_pages_by_id_and_filters_by_utm_campaign() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    build(&db, dir.path(), &["ann@example.com"]).await;
    let other = tempfile::tempdir().unwrap();
    let mailing = other.path().join("mailing.json");
    let file = serde_json::json!({
        "mailing_id": "m-other",
        "subject": "Launch",
        "from": "News <news@example.com>",
        "html": format!("<p><a href=\"{OTHER}\">About</a></p>"),
        "utm": {"source": "newsletter", "campaign": "{{ mailing_id }}-launch"},
    });
    std::fs::write(&mailing, file.to_string()).unwrap();
    let recipients = other.path().join("r.jsonl");
    std::fs::write(&recipients, "{\"email\":\"cy@example.com\"}\n").unwrap();
    builder::run(&db.pool, &options(other.path(), mailing, recipients))
        .await
        .unwrap();
    let server = start(&db).await;
    let get = |query: &str| {
        let url = server.url(&format!("/api/mailings{query}"));
        async move {
            let answer = client()
                .get(url)
                .bearer_auth(API_TOKEN)
                .send()
                .await
                .unwrap();
            let status = answer.status();
            (
                status,
                serde_json::from_str::<serde_json::Value>(&answer.text().await.unwrap()).unwrap(),
            )
        }
    };
    let ids = |page: &serde_json::Value| -> Vec<String> {
        page["mailings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mailing_id"].as_str().unwrap().to_owned())
            .collect()
    };

    let (status, all) = get("").await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert_eq!(ids(&all), [MAILING, "m-other"]);
    assert_eq!(all["mailings"][1]["utm_campaign"], "m-other-launch");
    assert_eq!(all["mailings"][1]["subject"], "Launch");
    assert!(all["next"].is_null());

    let (_, first) = get("?limit=1").await;
    assert_eq!(ids(&first), [MAILING]);
    assert_eq!(first["next"], MAILING);
    let (_, second) = get(&format!("?limit=1&after={MAILING}")).await;
    assert_eq!(ids(&second), ["m-other"]);

    let (_, launch) = get("?utm_campaign=m-other-launch").await;
    assert_eq!(ids(&launch), ["m-other"], "{launch}");
    let (_, none) = get("?utm_campaign=spring").await;
    assert!(ids(&none).is_empty(), "{none}");

    let (status, bad) = get("?limit=0").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        bad["error"]["message"].as_str().unwrap().contains("limit"),
        "{bad}"
    );
    let anonymous = client()
        .get(server.url("/api/mailings"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

/// A personalised link repointed with its fields: each reader's link leads
/// to the new target filled with the values their own link was built with;
/// one recipient's is filled at once; a field the built URL lacks is
/// refused naming the ones it has; a later repoint for every letter
/// replaces a letter's own.
#[tokio::test]
async fn a_personalised_link_is_repointed_with_each_readers_own_fields() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let html = "<p><a href=\"https://shop.example/u/{{ id }}?e={{ email|urlencode }}\" \
                data-linktrack-name=\"mine\" data-linktrack-utm=\"off\">Yours</a></p>";
    let readers = [("ann+news@example.com", "a-1"), ("bob@example.com", "b/2")];
    let lines: Vec<String> = readers
        .iter()
        .map(|(email, id)| serde_json::json!({"email": email, "id": id}).to_string())
        .collect();
    let letters = build_with(&db, dir.path(), html, &lines).await;
    let server = start(&db).await;
    assert_eq!(
        location(&server, letters[0].0[0]).await,
        "https://shop.example/u/a-1?e=ann%2Bnews%40example.com"
    );

    let repoint = |args: &[&str]| {
        let mut all = vec!["links", "repoint", "--mailing", MAILING];
        all.extend(args);
        linktrack(&db, &all)
    };
    let out = repoint(&[
        "--name",
        "mine",
        "--to",
        "https://shop.example/account/{{id}}?from=news&e={{ email | urlencode }}",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for_location(
        &server,
        letters[0].0[0],
        "https://shop.example/account/a-1?from=news&e=ann%2Bnews%40example.com",
    )
    .await;
    wait_for_location(
        &server,
        letters[1].0[0],
        "https://shop.example/account/b/2?from=news&e=bob%40example.com",
    )
    .await;

    // A field the link was not built with, and fields for --from: refused.
    for (args, says) in [
        (
            vec!["--position", "1", "--to", "https://shop.example/{{ first_name }}"],
            "field {{ first_name }} is not in the link's URL (its fields: {{ id }}, {{ email|urlencode }})",
        ),
        (
            vec!["--from", "https://shop.example/u/a-1?e=ann%2Bnews%40example.com", "--to", "https://shop.example/{{ id }}"],
            "not --from",
        ),
        (
            vec!["--position", "1", "--to", "{{ id }}"],
            "must be an http:// or https:// URL",
        ),
    ] {
        let out = repoint(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }

    // One reader's link, through the API: filled in and stored complete.
    let patched = patch_link(
        &client(),
        server.url(&format!("/api/mailings/{MAILING}/links/mine")),
        serde_json::json!({"recipient": "bob@example.com", "to": "https://help.example/{{ id }}"}),
    )
    .await;
    assert_eq!(
        patched.status(),
        StatusCode::OK,
        "{}",
        patched.text().await.unwrap()
    );
    let body: serde_json::Value = serde_json::from_str(&patched.text().await.unwrap()).unwrap();
    assert_eq!(
        body["repointed"][0]["to"], "https://help.example/b/2",
        "{body}"
    );
    wait_for_location(&server, letters[1].0[0], "https://help.example/b/2").await;
    assert_eq!(
        location(&server, letters[0].0[0]).await,
        "https://shop.example/account/a-1?from=news&e=ann%2Bnews%40example.com"
    );

    // Then every letter again: the newest repoint wins over bob's own.
    let out = repoint(&["--position", "1", "--to", FIXED]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for letter in &letters {
        wait_for_location(&server, letter.0[0], FIXED).await;
    }
    let mailing = linktrack::mailing_id::MailingId::parse(MAILING).unwrap();
    let listed = repoint::list(&db.pool, &mailing).await.unwrap();
    assert_eq!(listed[0].current, FIXED);
    assert_eq!(listed[0].history.len(), 3);
    server.stop().await;
}
