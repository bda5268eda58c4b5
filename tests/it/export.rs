//! Engagement data out (issue 42) on letters the builder made and hits a
//! real server took: the recipients export. The API's CSV and JSON lines
//! and the command's output agree with a brute-force count over `events`,
//! pages are crossed, nobody who may not be shown appears with an address,
//! and `--with FILE` joins the recipients file's columns. The breakdowns
//! are `export_breakdowns`'.

use crate::common::build::options;
use crate::common::export::{
    api_server, build_mailing, get, humans_only, lenient_rollup, letter, tokens,
};
use crate::common::stats_api::TOKEN;
use crate::common::wait_for_events;
use crate::common::{client, days_ago, linktrack, TestDb};
use futures_util::TryStreamExt;
use linktrack::builder;
use linktrack::export::{self, Format};
use linktrack::kind::LinkKind;
use linktrack::store::{privacy, rollup, tracking_optouts};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::BTreeMap;

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
