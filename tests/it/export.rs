//! Engagement data out (issue 42) on letters the builder made and hits a
//! real server took. The recipients export: the API's CSV and JSON lines
//! and the command's output agree with a brute-force count over `events`,
//! pages are crossed, and nobody who may not be shown appears with an
//! address. The breakdowns: real-shaped user agents and recipients of
//! every provider, the rollup's table against a count over `events`.

use crate::common::build::{options, tracked_tokens};
use crate::common::client as api_client;
use crate::common::stats_api::TOKEN;
use crate::common::{client, days_ago, linktrack, quick, server_pool, test_settings, TestDb};
use crate::common::{wait_for_events, TestServer};
use futures_util::TryStreamExt;
use linktrack::builder;
use linktrack::export::{self, Format};
use linktrack::kind::LinkKind;
use linktrack::server::AppSettings;
use linktrack::store::{privacy, rollup, tracking_optouts};
use linktrack::token::Token;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const MAILING: &str = "m-export";
/// A reader whose address holds a formula, not at its start: the builder
/// refuses an address that starts like one (issue 43), so what reaches an
/// export is written as it is (the neutralising of a value that does start
/// so is `export::tests`').
const FORMULA: &str = "x=1+1@example.com";

/// Build the mailing for `recipients`; the letters as the output has them.
async fn build(db: &TestDb, dir: &std::path::Path, recipients: &[Value]) -> Vec<Value> {
    build_mailing(db, dir, MAILING, recipients).await
}

/// Build mailing `id` for `recipients`.
async fn build_mailing(
    db: &TestDb,
    dir: &std::path::Path,
    id: &str,
    recipients: &[Value],
) -> Vec<Value> {
    let html = "<p>Hi</p><a href=\"https://example.com/one\">one</a> \
                <a href=\"https://example.com/two\">two</a></body>";
    let mailing = json!({"mailing_id": id, "subject": "S", "from": "news@example.com",
        "html": html});
    let (m, r) = (dir.join("m.json"), dir.join("r.jsonl"));
    std::fs::write(&m, mailing.to_string()).unwrap();
    let lines: Vec<String> = recipients.iter().map(Value::to_string).collect();
    std::fs::write(&r, lines.join("\n")).unwrap();
    let summary = builder::run(&db.pool, &options(dir, m, r)).await.unwrap();
    assert_eq!(summary.rejected, 0, "{summary}");
    std::fs::read_to_string(dir.join("letters.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn letter<'a>(letters: &'a [Value], email: &str) -> &'a Value {
    letters
        .iter()
        .find(|l| l["email"] == email)
        .unwrap_or_else(|| panic!("no letter to {email}"))
}

fn tokens(letter: &Value, kind: LinkKind) -> Vec<Token> {
    let text = format!(
        "{} {}",
        letter["html"], letter["headers"]["List-Unsubscribe"]
    );
    tracked_tokens(&text)
        .into_iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, t)| t)
        .collect()
}

/// The rollup with verdicts under which the tests' quick clicks are people's.
fn lenient_rollup() -> rollup::RollupOptions {
    let verdicts = linktrack::bots::letter_judgement::VerdictRules {
        min_click_delay: Duration::ZERO,
        burst_links: 1_000,
        ..Default::default()
    };
    rollup::RollupOptions {
        verdicts: std::sync::Arc::new(verdicts),
        ..Default::default()
    }
}

/// Per letter, what `events` says by brute force: (opens, clicks, clicked
/// positions, bot opens, bot clicks, unsubscribed, first human open).
type Expected = (u64, u64, Vec<u32>, u64, u64, bool, Option<String>);

async fn brute_force(pool: &sqlx::MySqlPool) -> BTreeMap<u64, Expected> {
    let rows: Vec<(u64, String, Option<u32>, i8, i64, String)> = sqlx::query_as(
        "SELECT letter_id, CAST(kind AS CHAR), IF(kind = 'click', position, NULL), \
           (bot <> 0 AND kind <> 'unsubscribe'), COUNT(*), \
           DATE_FORMAT(MIN(occurred_at), '%Y-%m-%dT%H:%i:%s.%fZ') \
         FROM events WHERE mailing_id = ? AND letter_id > 0 \
         GROUP BY 1, 2, 3, 4",
    )
    .bind(MAILING)
    .fetch_all(pool)
    .await
    .unwrap();
    let mut out: BTreeMap<u64, Expected> = BTreeMap::new();
    for (letter, kind, position, bot, n, first) in rows {
        let e = out.entry(letter).or_default();
        let n = n as u64;
        match (kind.as_str(), bot != 0) {
            ("open", false) => {
                e.0 += n;
                // Microseconds to milliseconds, as the export writes them.
                e.6 = Some(format!("{}Z", &first[..23]));
            }
            ("open", true) => e.3 += n,
            ("click", false) => {
                e.1 += n;
                e.2.extend(position);
                e.2.sort();
            }
            ("click", true) => e.4 += n,
            ("unsubscribe", _) => e.5 = true,
            _ => {}
        }
    }
    out
}

fn expected_of(row: &Value) -> Expected {
    (
        row["opens"].as_u64().unwrap(),
        row["clicks"].as_u64().unwrap(),
        row["links_clicked"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_u64().unwrap() as u32)
            .collect(),
        row["bot_opens"].as_u64().unwrap(),
        row["bot_clicks"].as_u64().unwrap(),
        row["unsubscribed"].as_bool().unwrap(),
        row["first_open"].as_str().map(str::to_owned),
    )
}

async fn get(app: &TestServer, path: &str, token: Option<&str>) -> reqwest::Response {
    let request = api_client().get(app.url(path));
    let request = match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    };
    request.send().await.unwrap()
}

/// Server settings under which every click the test makes is a human's
/// (no minimum delay after delivery, no burst rule).
fn humans_only() -> linktrack::server::state::ServerSettings {
    let mut settings = test_settings();
    settings.bots.min_click_delay = Duration::ZERO;
    settings.bots.burst_links = 1_000;
    settings
}

/// A server on the test's database with `settings` and the stats API on.
async fn api_server(db: &TestDb, settings: linktrack::server::state::ServerSettings) -> TestServer {
    TestServer::start(server_pool(db).await, |s| AppSettings {
        server: settings,
        api_token: Some(TOKEN.into()),
        ..quick(s)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipients_export_agrees_with_the_events_and_shows_nobody_withheld() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let dir = tempfile::tempdir().unwrap();
    let mut recipients = vec![
        json!({"email": "ann@example.com"}),
        json!({"email": FORMULA}),
        json!({"email": "bob@example.com"}),
        json!({"email": "cy@example.com", "linktrack_track": "anonymous"}),
        json!({"email": "dee@example.com"}),
        json!({"email": "eve@example.com"}),
    ];
    recipients.extend((0..7).map(|i| json!({"email": format!("quiet{i}@example.com")})));
    let letters = build(&db, dir.path(), &recipients).await;

    let app = api_server(&db, humans_only()).await;
    let http = client();
    let hit = |path: String| {
        let http = http.clone();
        let url = app.url(&path);
        async move {
            let status = http.get(url).send().await.unwrap().status();
            assert!(
                status.is_success() || status.is_redirection(),
                "{path}: {status}"
            );
        }
    };
    let ann = letter(&letters, "ann@example.com");
    let ann_clicks = tokens(ann, LinkKind::Click);
    hit(format!("/o/{}.gif", tokens(ann, LinkKind::Pixel)[0])).await;
    hit(format!("/o/{}.gif", tokens(ann, LinkKind::Pixel)[0])).await;
    hit(format!("/c/{}", ann_clicks[0])).await;
    hit(format!("/c/{}", ann_clicks[0])).await;
    hit(format!("/c/{}", ann_clicks[1])).await;
    // A link scanner (curl) clicks Ann's second link: a bot, beside.
    let scanner = reqwest::Client::builder()
        .user_agent("curl/8.5.0")
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    scanner
        .get(app.url(&format!("/c/{}", ann_clicks[1])))
        .send()
        .await
        .unwrap();
    let formula = letter(&letters, FORMULA);
    hit(format!("/c/{}", tokens(formula, LinkKind::Click)[1])).await;
    for who in ["bob@example.com", "cy@example.com", "dee@example.com"] {
        let l = letter(&letters, who);
        hit(format!("/o/{}.gif", tokens(l, LinkKind::Pixel)[0])).await;
        hit(format!("/c/{}", tokens(l, LinkKind::Click)[0])).await;
    }
    let eve = letter(&letters, "eve@example.com");
    let unsubscribe = http
        .post(app.url(&format!("/u/{}", tokens(eve, LinkKind::Unsubscribe)[0])))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    assert!(
        unsubscribe.status().is_success(),
        "{}",
        unsubscribe.status()
    );
    let stored = wait_for_events(&db.pool, 14).await;
    assert_eq!(stored.len(), 14, "{stored:?}");
    rollup::rollup_with(&db.pool, &lenient_rollup())
        .await
        .unwrap();

    // After the hits: Bob withdraws from tracking, Dee is erased (her
    // erasure recorded; her letter's rows still name her), and the MTA
    // had refused Eve's letter.
    tracking_optouts::add(&db.pool, &["bob@example.com".into()], "manual")
        .await
        .unwrap();
    let key = privacy::load_key(&db.pool).await.unwrap();
    privacy::record_erasure(&db.pool, &key.digest("dee@example.com"))
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO deliveries (mailing_id, letter_id, status, reply, at) \
         VALUES (?, ?, 'rejected', '550 5.1.1 no such user', UTC_TIMESTAMP())",
    )
    .bind(MAILING)
    .bind(eve["letter_id"].as_u64().unwrap())
    .execute(&db.pool)
    .await
    .unwrap();

    // The API: access, unknown mailing, bad format.
    let path = format!("/api/mailings/{MAILING}/recipients");
    assert_eq!(
        get(&app, &path, None).await.status(),
        StatusCode::UNAUTHORIZED
    );
    let unknown = get(&app, "/api/mailings/nope/recipients", Some(TOKEN)).await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let bad = get(&app, &format!("{path}?format=xlsx"), Some(TOKEN)).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert!(bad.text().await.unwrap().contains("\\\"xlsx\\\""));

    let jsonl = get(&app, &format!("{path}?format=jsonl"), Some(TOKEN)).await;
    assert_eq!(jsonl.status(), StatusCode::OK);
    assert_eq!(jsonl.headers()["content-type"], "application/x-ndjson");
    let jsonl = jsonl.text().await.unwrap();
    let rows: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();

    // Nobody withheld, every other letter once, in letter order.
    let addresses: Vec<&str> = rows
        .iter()
        .map(|r| r["address"].as_str().unwrap())
        .collect();
    for gone in ["bob@example.com", "cy@example.com", "dee@example.com"] {
        assert!(!addresses.contains(&gone), "{gone} listed: {addresses:?}");
        assert!(!jsonl.contains(gone));
    }
    assert_eq!(rows.len(), 10, "{addresses:?}");
    let ids: Vec<u64> = rows
        .iter()
        .map(|r| r["letter_id"].as_u64().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // Every figure is the events' own, by brute force.
    let truth = brute_force(&db.pool).await;
    for row in &rows {
        let id = row["letter_id"].as_u64().unwrap();
        let expected = truth.get(&id).cloned().unwrap_or_default();
        assert_eq!(expected_of(row), expected, "letter {id}: {row}");
    }
    let row_of = |email: &str| rows.iter().find(|r| r["address"] == email).unwrap();
    let ann_row = row_of("ann@example.com");
    assert_eq!(
        (ann_row["opens"].as_u64(), ann_row["clicks"].as_u64()),
        (Some(2), Some(3))
    );
    assert_eq!(ann_row["links_clicked"], json!([1, 2]));
    assert_eq!(ann_row["bot_clicks"], 1);
    let eve_row = row_of("eve@example.com");
    assert_eq!(
        (&eve_row["unsubscribed"], &eve_row["bounced"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(row_of(FORMULA)["links_clicked"], json!([2]));

    // CSV: the same rows; an address with `=` inside it is written as it is.
    let csv = get(&app, &path, Some(TOKEN)).await;
    assert_eq!(csv.headers()["content-type"], "text/csv; charset=utf-8");
    let csv = csv.text().await.unwrap();
    assert!(csv.starts_with(export::CSV_HEADER), "{csv}");
    assert_eq!(csv.lines().count(), 11);
    assert!(csv.contains(",x=1+1@example.com,"), "{csv}");
    assert!(!csv.contains(",'x=1+1"), "{csv}");
    let ann_line = csv
        .lines()
        .find(|l| l.contains(",ann@example.com,"))
        .unwrap();
    assert!(
        ann_line.ends_with(
            ",2,3,1 2,0,1,false,false,,false,https://example.com/one https://example.com/two,\
             1@0 2@0"
        ),
        "{ann_line}"
    );
    // Read as a spreadsheet reads it: by the header's names, each column
    // where the contract puts it.
    let mut sheet = csv::Reader::from_reader(csv.as_bytes());
    let header: Vec<String> = sheet.headers().unwrap().iter().map(str::to_owned).collect();
    assert_eq!(
        header,
        [
            "letter_id",
            "address",
            "first_open",
            "opens",
            "clicks",
            "links_clicked",
            "bot_opens",
            "bot_clicks",
            "unsubscribed",
            "bounced",
            "delivered",
            "complained",
            "urls_clicked",
            "targets_clicked"
        ]
    );
    let records: Vec<csv::StringRecord> = sheet.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), 10);
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    let record_of = |email: &str| {
        records
            .iter()
            .find(|r| &r[column("address")] == email)
            .unwrap()
    };
    let ann_record = record_of("ann@example.com");
    assert_eq!(&ann_record[column("links_clicked")], "1 2");
    assert_eq!(
        &ann_record[column("urls_clicked")],
        "https://example.com/one https://example.com/two"
    );
    assert_eq!(
        &record_of(FORMULA)[column("urls_clicked")],
        "https://example.com/two"
    );
    assert_eq!(&record_of("eve@example.com")[column("urls_clicked")], "");
    assert_eq!(&ann_record[column("targets_clicked")], "1@0 2@0");
    assert_eq!(
        ann_row["targets_clicked"],
        json!([{"position": 1, "version": 0, "clicks": 2}, {"position": 2, "version": 0, "clicks": 1}])
    );
    assert_eq!(
        ann_row["urls_clicked"],
        json!(["https://example.com/one", "https://example.com/two"])
    );

    // Pages of two letters give the same bytes as the API's one page.
    let paged: Vec<export::Chunk> = export::recipients_paged(
        db.pool.clone(),
        crate::common::mailing_id(MAILING),
        Format::Jsonl,
        2,
    )
    .try_collect()
    .await
    .unwrap();
    assert!(paged.len() >= 7, "{} pages", paged.len());
    let bytes: Vec<u8> = paged.iter().flat_map(|c| c.bytes.clone()).collect();
    assert_eq!(String::from_utf8(bytes).unwrap(), jsonl);
    assert_eq!(paged.iter().map(|c| c.withheld).sum::<u64>(), 2);

    // The command writes what the API answers.
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
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), jsonl);
    assert!(stderr.contains("exported 10 letters"), "{stderr}");
    let missing = linktrack(&db, &["export", "recipients", "--mailing", "nope"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("mailing \"nope\" not found"));
    app.stop().await;

    // An install upgraded with events already rolled: the migration's
    // backfill makes the same table the rollup made.
    let migration = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations/20261205000001_letter_engagement.sql"),
    )
    .unwrap();
    let backfill = &migration[migration.find("INSERT INTO stats_letter_events").unwrap()..];
    let table = "SELECT mailing_id, letter_id, CAST(kind AS CHAR), position, bot, n, \
                 DATE_FORMAT(first_at, '%f') FROM stats_letter_events ORDER BY 1, 2, 3, 4, 5";
    type TableRow = (String, u64, String, u32, i8, u64, String);
    let rolled: Vec<TableRow> = sqlx::query_as(table).fetch_all(&db.pool).await.unwrap();
    assert!(rolled.len() >= 10, "{rolled:?}");
    sqlx::query("DELETE FROM stats_letter_events")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(backfill.trim_end().trim_end_matches(';'))
        .execute(&db.pool)
        .await
        .unwrap();
    let backfilled: Vec<TableRow> = sqlx::query_as(table).fetch_all(&db.pool).await.unwrap();
    assert_eq!(backfilled, rolled);
}

/// Real-shaped user agents of mail clients, proxies and browsers.
const AGENTS: [&str; 8] = [
    "Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)",
    "Mozilla/5.0",
    "Microsoft Office/16.0 (Windows NT 10.0; Microsoft Outlook 16.0.17231; Pro)",
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Thunderbird/128.3.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 GmailApp/6.0.240310",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36",
];

/// (dimension, value, kind, bot) -> events, as `stats_breakdowns` keys them.
type Counts = BTreeMap<(String, String, String, bool), u64>;

/// The breakdowns by brute force: every open and click of `mailing` read
/// back, its user agent classified and its address's provider looked up
/// here, counted here.
async fn breakdowns_by_brute_force(pool: &sqlx::MySqlPool, mailing: &str) -> Counts {
    type Row = (String, i8, Option<String>, Option<String>, Option<String>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), bot, user_agent, email, country FROM events \
         WHERE mailing_id = ? AND kind IN ('open', 'click') AND COALESCE(link_id, 1) <> 0",
    )
    .bind(mailing)
    .fetch_all(pool)
    .await
    .unwrap();
    let classifier = linktrack::bots::clients::Classifier::default();
    let mut counts = Counts::new();
    for (kind, bot, agent, email, country) in rows {
        let class = classifier.classify(agent.as_deref());
        let provider = email
            .as_deref()
            .map_or("unknown", linktrack::address::mailbox_provider);
        for (dimension, value) in [
            ("client", class.client.clone()),
            ("client_type", class.client_type.as_str().to_owned()),
            ("os", class.os.clone()),
            ("device", class.device.as_str().to_owned()),
            ("provider", provider.to_owned()),
            ("country", country.unwrap_or_else(|| "unknown".to_owned())),
        ] {
            *counts
                .entry((dimension.into(), value, kind.clone(), bot != 0))
                .or_default() += 1;
        }
    }
    counts
}

async fn rolled_breakdowns(pool: &sqlx::MySqlPool, mailing: &str) -> Counts {
    let rows: Vec<(String, String, String, i8, u64)> = sqlx::query_as(
        "SELECT CAST(dimension AS CHAR), value, CAST(kind AS CHAR), bot, n \
         FROM stats_breakdowns WHERE mailing_id = ?",
    )
    .bind(mailing)
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(d, v, k, b, n)| ((d, v, k, b != 0), n))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakdowns_by_client_os_device_and_provider_agree_with_the_events() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let dir = tempfile::tempdir().unwrap();
    let people = [
        "ann@gmail.com",
        "bob@hotmail.com",
        "cy@yahoo.com",
        "dee@icloud.com",
        "eve@example.org",
        "fay@outlook.com",
        "gus@googlemail.com",
        "hal@me.com",
    ];
    let mut recipients: Vec<Value> = people.iter().map(|p| json!({ "email": p })).collect();
    recipients.push(json!({"email": "ivy@gmail.com", "linktrack_track": "anonymous"}));
    let letters = build_mailing(&db, dir.path(), "m-clients", &recipients).await;
    let other_dir = tempfile::tempdir().unwrap();
    let other = build_mailing(
        &db,
        other_dir.path(),
        "m-other",
        &[json!({"email": "zed@gmail.com"})],
    )
    .await;

    let app = api_server(&db, humans_only()).await;
    let send = |agent: &'static str, path: String| {
        let url = app.url(&path);
        async move {
            let http = reqwest::Client::builder()
                .user_agent(agent)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap();
            let status = http.get(url).send().await.unwrap().status();
            assert!(
                status.is_success() || status.is_redirection(),
                "{path}: {status}"
            );
        }
    };
    // Each person reads with one client; browsers also click.
    let mut expected_events = 0;
    for (i, person) in people.iter().enumerate() {
        let l = letter(&letters, person);
        let agent = AGENTS[i % AGENTS.len()];
        send(agent, format!("/o/{}.gif", tokens(l, LinkKind::Pixel)[0])).await;
        expected_events += 1;
        if agent.contains("Chrome") || agent.contains("Safari") || agent.contains("Thunderbird") {
            send(agent, format!("/c/{}", tokens(l, LinkKind::Click)[0])).await;
            expected_events += 1;
        }
    }
    // The anonymous reader (no address, no provider) and a scanner.
    let ivy = letter(&letters, "ivy@gmail.com");
    send(
        AGENTS[5],
        format!("/o/{}.gif", tokens(ivy, LinkKind::Pixel)[0]),
    )
    .await;
    send(
        "curl/8.5.0",
        format!("/c/{}", tokens(ivy, LinkKind::Click)[1]),
    )
    .await;
    let zed = letter(&other, "zed@gmail.com");
    send(
        AGENTS[2],
        format!("/o/{}.gif", tokens(zed, LinkKind::Pixel)[0]),
    )
    .await;
    expected_events += 3;
    let stored = wait_for_events(&db.pool, expected_events).await;
    assert_eq!(stored.len(), expected_events, "{stored:?}");
    // Two rollups: the second batch meets user agents already classified.
    let options = rollup::RollupOptions {
        limit: 7,
        ..lenient_rollup()
    };
    let report = rollup::rollup_with(&db.pool, &options).await.unwrap();
    assert!(report.batches.len() >= 2, "{report}");

    let truth = breakdowns_by_brute_force(&db.pool, "m-clients").await;
    assert_eq!(rolled_breakdowns(&db.pool, "m-clients").await, truth);
    let classes: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM user_agent_classes")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let agents: i64 = sqlx::query_scalar(
        "SELECT COUNT(DISTINCT user_agent) FROM events WHERE kind IN ('open', 'click')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(agents >= AGENTS.len() as i64, "{agents}");
    assert_eq!(classes, agents, "each user agent classified once");

    // The API: humans' counts, bots beside, most first.
    let answer = get(&app, "/api/mailings/m-clients/breakdowns", Some(TOKEN))
        .await
        .text()
        .await
        .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let share = |side: &str, dimension: &str, value: &str| -> (u64, u64) {
        answer[side][dimension]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["value"] == value)
            .map(|s| (s["n"].as_u64().unwrap(), s["bots"].as_u64().unwrap()))
            .unwrap_or_else(|| panic!("no {side}/{dimension}/{value}: {answer}"))
    };
    assert_eq!(share("opens", "client", "Outlook"), (1, 0));
    assert_eq!(share("opens", "client", "Gmail image proxy").0, 1);
    assert_eq!(
        share("opens", "client", "Apple Mail Privacy Protection"),
        (0, 1)
    );
    assert_eq!(share("opens", "client", "Thunderbird"), (1, 0));
    assert_eq!(share("opens", "client", "Gmail app"), (1, 0));
    assert_eq!(share("clicks", "client_type", "webmail").0, 3);
    assert_eq!(share("opens", "provider", "Gmail"), (2, 0));
    assert_eq!(
        share("opens", "provider", "Microsoft"),
        (1, 1),
        "Bob's prefetch, beside"
    );
    assert_eq!(share("opens", "provider", "Apple"), (2, 0));
    assert_eq!(
        share("opens", "provider", "unknown"),
        (1, 0),
        "the anonymous reader"
    );
    assert_eq!(
        share("clicks", "provider", "unknown").1,
        1,
        "the scanner, beside"
    );
    assert_eq!(share("opens", "device", "mobile"), (2, 0), "{answer}");
    // No GeoIP database: no country.
    assert_eq!(share("opens", "country", "unknown"), (8, 1), "{answer}");
    assert_eq!(answer["opens"]["country"].as_array().unwrap().len(), 1);
    let opens = answer["opens"]["client"].as_array().unwrap();
    assert!(opens
        .windows(2)
        .all(|w| w[0]["n"].as_u64() >= w[1]["n"].as_u64()));

    // Every mailing together: the other mailing's Outlook open is added.
    let overall = get(&app, "/api/breakdowns", Some(TOKEN))
        .await
        .text()
        .await
        .unwrap();
    let overall: Value = serde_json::from_str(&overall).unwrap();
    assert_eq!(overall["mailing_id"], Value::Null);
    let outlook = overall["opens"]["client"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["value"] == "Outlook")
        .unwrap();
    assert_eq!(outlook["n"], 2);
    let unknown = get(&app, "/api/mailings/nope/breakdowns", Some(TOKEN)).await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    app.stop().await;
}

/// A country database the test writes: two loopback addresses of one /24
/// in different countries (the lookup is made before the address is
/// truncated), another network in a third; 127.0.0.1 is in none.
fn loopback_countries(dir: &std::path::Path) -> std::path::PathBuf {
    let networks = [
        ("127.0.0.2".parse().unwrap(), 32, "SE"),
        ("127.0.0.3".parse().unwrap(), 32, "JP"),
        ("127.0.9.0".parse().unwrap(), 24, "BR"),
    ];
    let path = dir.join("countries.mmdb");
    std::fs::write(&path, crate::common::mmdb::country_database(&networks)).unwrap();
    path
}

/// A client whose connections come from `from` (a loopback address).
fn client_from(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(from.parse::<std::net::IpAddr>().unwrap())
        .user_agent(AGENTS[5])
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_from_loopback_addresses_are_counted_by_their_country() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let dir = tempfile::tempdir().unwrap();
    let recipients: Vec<Value> = (0..6)
        .map(|n| json!({ "email": format!("r{n}@example.org") }))
        .collect();
    let letters = build_mailing(&db, dir.path(), "m-geo", &recipients).await;
    let geoip = linktrack::server::geoip::GeoIp::open(&loopback_countries(dir.path())).unwrap();
    assert_eq!(
        geoip.country("127.0.0.3".parse().unwrap()).as_deref(),
        Some("JP")
    );
    assert_eq!(geoip.country("127.0.0.1".parse().unwrap()), None);

    let mut settings = humans_only();
    settings.geoip = Some(std::sync::Arc::new(geoip));
    let app = api_server(&db, settings).await;
    // (reader, from, opens, clicks)
    let plan = [
        (0, "127.0.0.2", 1, 2),
        (1, "127.0.0.2", 1, 1),
        (2, "127.0.0.3", 1, 1),
        (3, "127.0.9.77", 1, 2),
        (4, "127.0.0.1", 1, 1),
        (5, "127.0.9.5", 0, 1),
    ];
    let mut expected = 0;
    for (reader, from, opens, clicks) in plan {
        let l = letter(&letters, &format!("r{reader}@example.org"));
        let http = client_from(from);
        let mut paths = Vec::new();
        paths.extend((0..opens).map(|_| format!("/o/{}.gif", tokens(l, LinkKind::Pixel)[0])));
        paths.extend((0..clicks).map(|n| format!("/c/{}", tokens(l, LinkKind::Click)[n % 2])));
        for path in paths {
            let status = http.get(app.url(&path)).send().await.unwrap().status();
            assert!(
                status.is_success() || status.is_redirection(),
                "{path}: {status}"
            );
            expected += 1;
        }
    }
    let stored = wait_for_events(&db.pool, expected).await;
    assert_eq!(stored.len(), expected);
    // Only the code is kept: the network stays truncated, one /24 for SE and JP.
    let by_network: Vec<(Option<String>, Option<String>, i64)> = sqlx::query_as(
        "SELECT ip, country, COUNT(*) FROM events GROUP BY ip, country ORDER BY ip, country",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        by_network,
        vec![
            (Some("127.0.0.0".into()), None, 2),
            (Some("127.0.0.0".into()), Some("JP".into()), 2),
            (Some("127.0.0.0".into()), Some("SE".into()), 5),
            (Some("127.0.9.0".into()), Some("BR".into()), 4),
        ]
    );

    let options = rollup::RollupOptions {
        limit: 5,
        ..lenient_rollup()
    };
    let report = rollup::rollup_with(&db.pool, &options).await.unwrap();
    assert!(report.batches.len() >= 2, "{report}");
    let truth = breakdowns_by_brute_force(&db.pool, "m-geo").await;
    assert_eq!(rolled_breakdowns(&db.pool, "m-geo").await, truth);
    // The same again with the database's own GROUP BY over `events`.
    let grouped: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), COALESCE(country, 'unknown'), COUNT(*) FROM events \
         WHERE mailing_id = 'm-geo' GROUP BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let rolled: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), value, CAST(SUM(n) AS SIGNED) FROM stats_breakdowns \
         WHERE mailing_id = 'm-geo' AND dimension = 'country' GROUP BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let as_map = |rows: Vec<(String, String, i64)>| -> BTreeMap<(String, String), i64> {
        rows.into_iter().map(|(k, v, n)| ((k, v), n)).collect()
    };
    assert_eq!(as_map(rolled), as_map(grouped));

    let answer = get(&app, "/api/mailings/m-geo/breakdowns", Some(TOKEN))
        .await
        .text()
        .await
        .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let countries = |side: &str| -> Vec<(String, u64)> {
        answer[side]["country"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["value"].as_str().unwrap().to_owned(),
                    s["n"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        countries("clicks"),
        vec![
            ("BR".to_owned(), 3),
            ("SE".to_owned(), 3),
            ("JP".to_owned(), 1),
            ("unknown".to_owned(), 1),
        ],
        "{answer}"
    );
    assert_eq!(
        countries("opens"),
        vec![
            ("SE".to_owned(), 2),
            ("BR".to_owned(), 1),
            ("JP".to_owned(), 1),
            ("unknown".to_owned(), 1),
        ],
        "{answer}"
    );
    app.stop().await;
}

#[test]
fn serve_names_a_geoip_file_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let not_mmdb = dir.path().join("countries.csv");
    std::fs::write(&not_mmdb, "127.0.0.2,SE\n").unwrap();
    for path in [not_mmdb, dir.path().join("missing.mmdb")] {
        let out = std::process::Command::new(crate::common::linktrack_binary())
            .args(["serve", "--listen", "127.0.0.1:0", "--geoip"])
            .arg(&path)
            .env("DATABASE_URL", "mysql://root@127.0.0.1:1/none")
            .env("LINKTRACK_JOURNAL", dir.path().join("journal"))
            .output()
            .unwrap();
        assert!(!out.status.success());
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("--geoip"), "{said}");
        assert!(said.contains(&path.display().to_string()), "{said}");
    }
}

/// `export recipients --with FILE`: the recipients file's other columns
/// (which linktrack does not keep) joined by address, the address column
/// found and normalised as `build` finds it; the file's rows that are no
/// letter of the mailing are ignored. Read as a spreadsheet reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_with_the_recipients_file_appends_its_columns_by_address() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let dir = tempfile::tempdir().unwrap();
    let mailing = json!({"mailing_id": "m-join", "subject": "S", "from": "news@example.com",
        "html": "<p>Hi {{ first_name }}</p><a href=\"https://example.com/one\">one</a></body>"});
    let (m, r) = (dir.path().join("m.json"), dir.path().join("r.csv"));
    std::fs::write(&m, mailing.to_string()).unwrap();
    // A Mailchimp-shaped export: its address column is `Email Address`.
    std::fs::write(
        &r,
        "Email Address,First Name,Last Name\r\nann@example.com,Ann,Lee\r\n\
         bob@example.com,Bob,\"Ray, Jr.\"\r\ncy@example.com,Cy,Park\r\n",
    )
    .unwrap();
    let summary = builder::run(&db.pool, &options(dir.path(), m, r.clone()))
        .await
        .unwrap();
    assert_eq!(
        (summary.rejected, summary.letters_built),
        (0, 3),
        "{summary}"
    );

    // The file the marketer has now: the same people (Ann's address in
    // another case), one who got no letter, one line without an address,
    // one formula in a field.
    let with = dir.path().join("crm.csv");
    std::fs::write(
        &with,
        "Email Address,First Name,Last Name,clicks\r\nANN@Example.com,Ann,Lee,x\r\n\
         bob@example.com,Bob,\"Ray, Jr.\",y\r\nnobody@example.com,No,Body,z\r\n\
         not-an-address,Q,Q,q\r\ncy@example.com,=1+1,Park,w\r\n",
    )
    .unwrap();
    let with_arg = with.to_str().unwrap();
    let out = linktrack(
        &db,
        &[
            "export",
            "recipients",
            "--mailing",
            "m-join",
            "--with",
            with_arg,
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("4 addresses to join"), "{stderr}");
    assert!(
        stderr.contains("1 line(s) without a usable address"),
        "{stderr}"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("nobody@example.com"), "{text}");
    let mut sheet = csv::Reader::from_reader(text.as_bytes());
    let header: Vec<String> = sheet.headers().unwrap().iter().map(str::to_owned).collect();
    // The contract's columns first, unchanged; then the file's, in its
    // order, a name the export has marked as the input's.
    let own: Vec<&str> = export::CSV_HEADER.trim_end().split(',').collect();
    assert_eq!(&header[..own.len()], own.as_slice());
    assert_eq!(
        &header[own.len()..],
        ["First Name", "Last Name", "input_clicks"]
    );
    let records: Vec<csv::StringRecord> = sheet.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), 3, "{text}");
    let by_address: BTreeMap<String, Vec<String>> = records
        .iter()
        .map(|r| {
            (
                r[1].to_owned(),
                r.iter().skip(own.len()).map(str::to_owned).collect(),
            )
        })
        .collect();
    assert_eq!(by_address["ann@example.com"], ["Ann", "Lee", "x"]);
    assert_eq!(by_address["bob@example.com"], ["Bob", "Ray, Jr.", "y"]);
    // A value a spreadsheet would run as a formula is neutralised.
    assert_eq!(by_address["cy@example.com"], ["'=1+1", "Park", "w"]);

    // JSON lines: the same values under the same names.
    let out = linktrack(
        &db,
        &[
            "export",
            "recipients",
            "--mailing",
            "m-join",
            "--with",
            with_arg,
            "--format",
            "jsonl",
        ],
    );
    assert!(out.status.success());
    let rows: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let cy = rows
        .iter()
        .find(|r| r["address"] == "cy@example.com")
        .unwrap();
    assert_eq!(
        (&cy["First Name"], &cy["input_clicks"], &cy["clicks"]),
        (&json!("=1+1"), &json!("w"), &json!(0))
    );

    // A file that cannot be read is named; nothing is written.
    let out = linktrack(
        &db,
        &[
            "export",
            "recipients",
            "--mailing",
            "m-join",
            "--with",
            "/nonexistent.csv",
        ],
    );
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.csv"));
}
