//! What a marketer and an operator meet after the demo (the first hour,
//! second round): the recipients export agrees with the stats API about
//! bounces and complaints, read as a spreadsheet reads the CSV; a pipe
//! transport's `bounces ingest -` without the secret is refused for good,
//! not retried.

use crate::bounces::{addressed, build_letters, Built, BOUNCE_DOMAIN};
use crate::common::stats_api::TOKEN;
use crate::common::{build, client, linktrack, linktrack_binary, TestDb, TestServer};
use linktrack::builder;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Ingest one message; its exit status.
fn ingest(db: &TestDb, dir: &Path, name: &str, text: &str) -> i32 {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let out = linktrack(db, &["bounces", "ingest", &path.display().to_string()]);
    eprintln!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.status.code().unwrap_or(-1)
}

async fn only_mailing(db: &TestDb) -> String {
    sqlx::query_scalar("SELECT mailing_id FROM mailings LIMIT 1")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// The CSV as a spreadsheet reads it: one map of header to cell per row.
fn spreadsheet(csv_text: &[u8]) -> Vec<HashMap<String, String>> {
    let mut reader = csv::Reader::from_reader(csv_text);
    let headers = reader.headers().unwrap().clone();
    reader
        .records()
        .map(|record| {
            let record = record.unwrap();
            headers
                .iter()
                .zip(record.iter())
                .map(|(h, v)| (h.to_owned(), v.to_owned()))
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_export_says_what_the_stats_api_counts_as_bounced_and_complained() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    let mailing = only_mailing(&db).await;
    let delivered: Vec<u64> = letters[..4].iter().map(|l| l.letter_id).collect();
    linktrack::store::deliveries::mark_delivered_now(
        &db.pool,
        &crate::common::mailing_id(&mailing),
        &delivered,
        "250 ok",
    )
    .await
    .unwrap();
    // Two 5.1.1 bounces from Postfix and one complaint.
    let (first, second, complained) = (&letters[0], &letters[1], &letters[2]);
    for (n, letter) in [first, second].into_iter().enumerate() {
        let dsn = addressed(
            "postfix-dsn-user-unknown.eml",
            letter,
            &letter.email,
            &format!("hard-{n}"),
        );
        assert_eq!(ingest(&db, dir.path(), &format!("hard-{n}.eml"), &dsn), 0);
    }
    let arf = addressed(
        "arf-abuse-redacted.eml",
        complained,
        "x@isp.example.net",
        "arf-1",
    );
    assert_eq!(ingest(&db, dir.path(), "arf.eml", &arf), 0);

    let app = TestServer::start(db.pool.clone(), |settings| linktrack::server::AppSettings {
        api_token: Some(TOKEN.into()),
        ..settings
    })
    .await;
    let url = format!("{}/api/mailings/{mailing}/stats", app.base);
    let response = client().get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    let bounces = &body["bounces"];
    assert_eq!(
        (
            &bounces["hard"],
            &bounces["complaints"],
            &bounces["delivered"]
        ),
        (&2.into(), &1.into(), &4.into()),
        "{body}"
    );
    app.stop().await;

    let out = linktrack(&db, &["export", "recipients", "--mailing", &mailing]);
    assert!(out.status.success(), "{out:?}");
    let rows = spreadsheet(&out.stdout);
    assert_eq!(rows.len(), letters.len(), "{rows:?}");
    let cell = |email: &str, column: &str| -> String {
        let row = rows.iter().find(|r| r["address"] == email).unwrap();
        row.get(column)
            .unwrap_or_else(|| panic!("no column {column}: {row:?}"))
            .clone()
    };
    let count = |column: &str| rows.iter().filter(|r| r[column] == "true").count();
    assert_eq!(count("bounced"), 2);
    assert_eq!(count("complained"), 1);
    assert_eq!(count("delivered"), 4);
    for letter in [first, second] {
        assert_eq!(cell(&letter.email, "bounced"), "true");
        assert_eq!(cell(&letter.email, "complained"), "false");
    }
    assert_eq!(cell(&complained.email, "complained"), "true");
    assert_eq!(cell(&complained.email, "bounced"), "false");
    assert_eq!(cell(&letters[3].email, "delivered"), "true");
    // Not sent by linktrack: unknown, an empty cell rather than "false".
    assert_eq!(cell(&letters[4].email, "delivered"), "");
}

const SECRET: &str = "first-hour-secret";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// `bounces ingest -` as a pipe transport runs it: the message on standard
/// input, the environment `env` gives it and nothing else of ours.
fn ingest_piped(database_url: &str, secret: Option<&str>, message: &str) -> Output {
    let mut command = Command::new(linktrack_binary());
    command
        .args(["bounces", "ingest", "-"])
        .env("DATABASE_URL", database_url)
        .env("RUST_LOG", "warn")
        .env_remove("LINKTRACK_SECRET")
        .env_remove("LINKTRACK_PREVIOUS_SECRETS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(secret) = secret {
        command.env("LINKTRACK_SECRET", secret);
    }
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(message.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    eprintln!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A port nothing listens on: bound, then released.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_pipe_without_the_secret_is_a_permanent_failure_and_a_database_away_a_retry() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let options = builder::BuildOptions {
        secret: Some(SECRET.to_owned()),
        bounce_domain: Some(BOUNCE_DOMAIN.into()),
        ..build::options(
            dir.path(),
            fixture("mailing.json"),
            fixture("recipients.csv"),
        )
    };
    builder::run(&db.pool, &options).await.unwrap();
    let text = std::fs::read_to_string(dir.path().join("letters.jsonl")).unwrap();
    let letter: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let built = Built {
        email: letter["email"].as_str().unwrap().to_owned(),
        envelope_from: letter["envelope_from"].as_str().unwrap().to_owned(),
        message_id: letter["message_id"].as_str().unwrap().to_owned(),
        letter_id: letter["letter_id"].as_u64().unwrap(),
    };
    let dsn = addressed(
        "postfix-dsn-user-unknown.eml",
        &built,
        &built.email,
        "pipe-1",
    );

    // The master.cf line without LINKTRACK_SECRET: a setting, not a retry.
    let out = ingest_piped(&db.url, None, &dsn);
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("LINKTRACK_SECRET"), "{said}");
    assert!(said.contains("not retried"), "{said}");

    // A database that is away: try again later.
    let away = format!("mysql://root@127.0.0.1:{}/nothing", closed_port());
    let out = ingest_piped(&away, Some(SECRET), &dsn);
    assert_eq!(out.status.code(), Some(75), "{out:?}");

    // With the secret the same message is decided.
    let out = ingest_piped(&db.url, Some(SECRET), &dsn);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("hard bounce"),
        "{out:?}"
    );
}

const REDIS: &str = "redis://127.0.0.1:6379";

/// `erase ADDRESS` with or without the servers' Redis; what it said.
fn erase(db: &TestDb, address: &str, redis_prefix: Option<&str>) -> String {
    let mut command = Command::new(linktrack_binary());
    command
        .args(["erase", address, "--wait-secs", "0"])
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .env_remove("REDIS_URL")
        .env_remove("LINKTRACK_REDIS_PREFIX");
    if let Some(prefix) = redis_prefix {
        command
            .env("REDIS_URL", REDIS)
            .env("LINKTRACK_REDIS_PREFIX", prefix);
    }
    let out = command.output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said
}

async fn tag_members(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<u64> {
    let mut members: Vec<u64> = redis::cmd("SMEMBERS")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap();
    members.sort();
    members
}

#[tokio::test]
async fn an_erase_without_redis_is_finished_by_the_next_one_with_it() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let options = build::options(
        dir.path(),
        fixture("mailing.json"),
        fixture("recipients.csv"),
    );
    builder::run(&db.pool, &options).await.unwrap();
    let letters: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("letters.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let (target, keep) = (&letters[0], &letters[1]);
    let id = |letter: &serde_json::Value| letter["letter_id"].as_u64().unwrap();
    let mailing = only_mailing(&db).await;
    // Both letters in a segment set, as the rollup of their clicks leaves them.
    let prefix = format!("lt:test:{}:", db.name);
    let tag_key = format!("{prefix}m:{mailing}:tag:spring");
    let client = redis::Client::open(REDIS).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: u64 = redis::cmd("SADD")
        .arg(&tag_key)
        .arg(id(target))
        .arg(id(keep))
        .query_async(&mut conn)
        .await
        .unwrap();
    let address = target["email"].as_str().unwrap();

    // Without REDIS_URL: the tables are scrubbed, the letter is kept as
    // pending work and Redis still has it.
    let said = erase(&db, address, None);
    assert!(
        said.contains("erase: redis: no live layer configured (REDIS_URL): 1 letter kept"),
        "{said}"
    );
    assert_eq!(
        tag_members(&mut conn, &tag_key).await,
        [id(target), id(keep)]
    );

    // The second run with the servers' Redis finishes it, though the
    // letter's rows no longer name the address.
    let said = erase(&db, address, Some(&prefix));
    assert!(
        said.contains("erase: redis: 1 letter ids removed from segment sets"),
        "{said}"
    );
    assert!(
        said.contains("(with 1 letter pending from earlier erases without Redis)"),
        "{said}"
    );
    assert_eq!(tag_members(&mut conn, &tag_key).await, [id(keep)]);
    let pending: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM erase_live_pending")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(pending, 0);
    // A third run has nothing left to do anywhere.
    let said = erase(&db, address, None);
    assert!(said.contains("nothing pending"), "{said}");
    let _: u64 = redis::cmd("DEL")
        .arg(&tag_key)
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// A copy of the fixture mailing in `dir` with `subject` and a creative
/// of its own (`html`).
fn mailing_file(dir: &Path, name: &str, subject: &str, html: &str) -> PathBuf {
    let mut mailing: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("mailing.json")).unwrap()).unwrap();
    mailing["subject"] = subject.into();
    mailing["html"] = html.into();
    mailing.as_object_mut().unwrap().remove("html_file");
    let path = dir.join(name);
    std::fs::write(&path, mailing.to_string()).unwrap();
    path
}

#[tokio::test]
async fn a_changed_creative_or_subject_under_the_same_mailing_id_is_refused_once_up_front() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let html = "<p>Hi {{ first_name }}</p><a href=\"https://shop.example.com/a\">Shop</a></body>";
    let original = mailing_file(dir.path(), "m1.json", "November", html);
    let build_from =
        |mailing: PathBuf| build::options(dir.path(), mailing, fixture("recipients.csv"));
    let first = builder::run(&db.pool, &build_from(original.clone()))
        .await
        .unwrap();
    assert!(first.letters_built >= 5, "{first}");

    let fixed_link = html.replace("/a\"", "/b\"");
    let cases = [
        (
            "m2.json",
            "November",
            fixed_link.as_str(),
            "link 1 is now \"https://shop.example.com/b\", was \"https://shop.example.com/a\"",
        ),
        (
            "m3.json",
            "December",
            html,
            "the subject is now \"December\", was \"November\"",
        ),
    ];
    for (name, subject, creative, changed) in cases {
        let changed_file = mailing_file(dir.path(), name, subject, creative);
        let _ = std::fs::remove_file(dir.path().join("rejects.jsonl"));
        let err = builder::run(&db.pool, &build_from(changed_file))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(changed), "{err}");
        assert!(err.contains("new mailing_id"), "{err}");
        assert!(err.contains("nothing was built"), "{err}");
        // Refused before any recipient: no rejects written, no row stored.
        let rejects = std::fs::read_to_string(dir.path().join("rejects.jsonl")).unwrap_or_default();
        assert_eq!(rejects.lines().count(), 0, "{rejects}");
    }
    let subject: String = sqlx::query_scalar("SELECT subject FROM mailings")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(subject, "November");

    // The unchanged mailing resumes as before, and so does one whose text
    // changed but not its links (the letters not yet built get the text).
    let again = builder::run(&db.pool, &build_from(original)).await.unwrap();
    assert_eq!(again.letters_resumed, first.letters_built, "{again}");
    let new_text = mailing_file(
        dir.path(),
        "m4.json",
        "November",
        &html.replace("Hi", "Hello"),
    );
    let again = builder::run(&db.pool, &build_from(new_text)).await.unwrap();
    assert_eq!(again.letters_resumed, first.letters_built, "{again}");
}

#[tokio::test]
async fn an_empty_merge_field_is_counted_and_warned_about_and_a_default_fills_it() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let html = "<p>Hi {{ first_name | default(\"there\") }}</p>\
                <a href=\"https://shop.example.com/a\">Shop</a></body>";
    let mailing = mailing_file(
        dir.path(),
        "m.json",
        "{{ first_name }}, your November update",
        html,
    );
    let recipients = dir.path().join("r.csv");
    std::fs::write(
        &recipients,
        "email,first_name\nann@example.com,Ann\nnoname@example.com,\nblank@example.com,  \n",
    )
    .unwrap();
    let summary = builder::run(&db.pool, &build::options(dir.path(), mailing, recipients))
        .await
        .unwrap();
    assert_eq!(summary.letters_built, 3, "{summary}");
    assert_eq!(summary.letters_with_empty_fields, 2, "{summary}");
    assert_eq!(
        summary.empty_fields.get("first_name"),
        Some(&2),
        "{summary}"
    );
    let said = summary.to_string();
    assert!(
        said.contains(
            "warning: 2 letters printed an empty merge field (empty in those rows: first_name 2)"
        ),
        "{said}"
    );
    assert!(said.contains("default(\"there\")"), "{said}");
    let letters: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("letters.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let of = |email: &str| letters.iter().find(|l| l["email"] == email).unwrap();
    let noname = of("noname@example.com");
    assert_eq!(noname["subject"], ", your November update");
    assert!(
        noname["html"].as_str().unwrap().contains("Hi there"),
        "{noname}"
    );
    assert!(of("ann@example.com")["html"]
        .as_str()
        .unwrap()
        .contains("Hi Ann"));
}

/// The mailing's page and index as a marketer meets them, right after a
/// send with a quiet stretch between two bursts, in headless Chromium:
/// the per-minute chart leaves the quiet minutes empty, rates name their
/// base, the page offers the CSV (which opens as a spreadsheet), and the
/// index lists the newest mailing first with its date.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_gaps_rates_of_a_count_a_csv_and_newest_mailings_first() {
    use crate::common::stats::{letters, record, Hit, MAILING};
    use crate::common::{days_ago, TestDb as Db};
    use crate::stats_http::{browser, run_chromium, saved_page};
    use linktrack::store::{rollup, stats};

    let browser = browser();
    let db = Db::with_days_since(days_ago(1)).await;
    let today = days_ago(0);
    let letters = letters(&db.pool, today, 3).await;
    let now = chrono::Utc::now().naive_utc();
    let minutes_ago = |m: i64| now - chrono::Duration::minutes(m);
    // Two bursts of opens and clicks, 20 to 19 and 10 to 9 minutes ago.
    let mut hits = Vec::new();
    for (n, ago) in [20, 20, 19, 10, 9].into_iter().enumerate() {
        let letter = &letters[n % 3];
        hits.push(Hit {
            link: &letter.pixel,
            kind: "open",
            at: minutes_ago(ago),
            bot: None,
            event_id: 100 + n as u128,
        });
        hits.push(Hit {
            link: &letter.clicks[0],
            kind: "click",
            at: minutes_ago(ago),
            bot: None,
            event_id: 200 + n as u128,
        });
    }
    record(&db.pool, &hits).await;
    rollup::rollup(&db.pool, 1000).await.unwrap();
    let html = std::fs::read_to_string(crate::common::stats_api::fixture_letter()).unwrap();
    let mailing = crate::common::mailing_id(MAILING);
    stats::save_mailing(&db.pool, &mailing, "November news", &html)
        .await
        .unwrap();
    // An older mailing whose id sorts first.
    let older = crate::common::mailing_id("a-older");
    stats::save_mailing(&db.pool, &older, "October news", "<p>Hi</p>")
        .await
        .unwrap();
    sqlx::query("UPDATE mailings SET created_at = created_at - INTERVAL 30 DAY WHERE mailing_id = 'a-older'")
        .execute(&db.pool)
        .await
        .unwrap();
    let ids: Vec<u64> = letters.iter().map(|l| l.pixel.letter_id).collect();
    linktrack::store::deliveries::mark_delivered_now(&db.pool, &mailing, &ids, "250 ok")
        .await
        .unwrap();

    let app = TestServer::with_stats(db.pool.clone(), Some(TOKEN), None, None).await;
    let get = |path: String| {
        let url = format!("{}{path}", app.base);
        async move {
            crate::common::client_without_user_agent()
                .get(url)
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap()
        }
    };
    let page = get(format!("/mailings/{MAILING}"))
        .await
        .text()
        .await
        .unwrap();
    let (url, png) = saved_page("first-hour-dashboard", "mailing", &page);
    run_chromium(
        &browser,
        &[format!("--screenshot={}", png.display()), url.clone()],
    );
    assert!(png.is_file(), "no screenshot");
    let dom = run_chromium(&browser, &["--dump-dom".to_owned(), url]);
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();

    // The per-minute chart: its lines never touch the zero line (the
    // quiet minutes are gaps), and both bursts are drawn.
    let chart = dom
        .split(r#"data-resolution="minute""#)
        .nth(1)
        .and_then(|rest| rest.split("</svg>").next())
        .unwrap_or_else(|| panic!("no per-minute chart: {dom}"));
    let zero_line: f64 = chart
        .split("<line ")
        .nth(1)
        .and_then(|line| line.split("y1=\"").nth(1))
        .and_then(|y| y.split('"').next())
        .and_then(|y| y.parse().ok())
        .unwrap_or_else(|| panic!("no axis: {chart}"));
    let lines: Vec<&str> = chart.split("<polyline").skip(1).collect();
    assert!(!lines.is_empty(), "{chart}");
    for line in &lines {
        let points = line.split("points=\"").nth(1).unwrap();
        for point in points[..points.find('"').unwrap()].split(' ') {
            let y: f64 = point.split(',').nth(1).unwrap().parse().unwrap();
            assert!(y < zero_line, "a line through a quiet minute: {line}");
        }
    }
    assert!(chart.matches("<circle").count() >= 8, "{chart}");

    // Rates say what they are of.
    assert!(dom.contains("(of 3 letters delivered)"), "{dom}");

    // The CSV link, and what it downloads reads as a spreadsheet.
    let href = dom
        .split(r#"id="download-csv" href=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no Download CSV link: {dom}"))
        .replace("&amp;", "&");
    let csv = get(href).await;
    assert_eq!(csv.status(), 200);
    let rows = spreadsheet(&csv.bytes().await.unwrap());
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.iter().all(|r| r["delivered"] == "true"), "{rows:?}");
    // Times as a spreadsheet reads a date and time.
    for row in &rows {
        let first_open = &row["first_open"];
        assert!(
            chrono::NaiveDateTime::parse_from_str(first_open, "%Y-%m-%d %H:%M:%S").is_ok(),
            "{first_open:?}"
        );
    }

    // The index: the newest mailing first, each with its build date.
    let index = get("/mailings".to_owned()).await.text().await.unwrap();
    let (url, _) = saved_page("first-hour-dashboard", "index", &index);
    let dom = run_chromium(&browser, &["--dump-dom".to_owned(), url]);
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    let (newer, older) = (dom.find(MAILING).unwrap(), dom.find("a-older").unwrap());
    assert!(newer < older, "newest first: {dom}");
    assert_eq!(dom.matches("<time datetime=").count(), 2, "{dom}");
    app.stop().await;
}

#[tokio::test]
async fn the_first_domain_says_what_stops_answering_and_own_pages_never_get_the_link_error() {
    let db = TestDb::new().await;
    // The first domain added names what the servers stop answering on.
    let first = linktrack(
        &db,
        &[
            "domains",
            "add",
            "click.brand.example",
            "--for",
            "brand.example",
        ],
    );
    assert!(first.status.success(), "{first:?}");
    let said = String::from_utf8_lossy(&first.stdout);
    assert!(said.contains("this is the first tracking domain"), "{said}");
    assert!(
        said.contains("127.0.0.1 (LINKTRACK_BASE_URL's host)"),
        "{said}"
    );
    assert!(said.contains("localhost"), "{said}");
    assert!(said.contains("http://127.0.0.1:8080/login"), "{said}");
    // The second does not say it again.
    let second = linktrack(
        &db,
        &[
            "domains",
            "add",
            "links.other.example",
            "--for",
            "other.example",
        ],
    );
    assert!(second.status.success(), "{second:?}");
    assert!(!String::from_utf8_lossy(&second.stdout).contains("first tracking domain"));

    let app = TestServer::with_stats(db.pool.clone(), Some(TOKEN), Some("s3cret"), None).await;
    let port = app.base.rsplit(':').next().unwrap().to_owned();
    let http = client();
    let on_localhost = |path: &str| {
        http.get(format!("{}{path}", app.base))
            .header(reqwest::header::HOST, format!("localhost:{port}"))
            .send()
    };
    // The dashboard's own pages: a page saying where the dashboard is.
    for path in ["/login", "/mailings", "/"] {
        let answer = on_localhost(path).await.unwrap();
        assert_eq!(answer.status(), 404, "{path}");
        assert!(answer.headers().get(reqwest::header::LOCATION).is_none());
        let page = answer.text().await.unwrap();
        assert!(!page.contains("This link is not valid"), "{path}: {page}");
        assert!(page.contains("Not served on this host"), "{path}: {page}");
        assert!(page.contains("/login\">"), "{path}: {page}");
    }
    // A link on the unknown host is still an invalid link.
    let link = on_localhost("/c/0123456789abcdef0123456789abcdef")
        .await
        .unwrap();
    assert_eq!(link.status(), 404);
    assert!(link
        .text()
        .await
        .unwrap()
        .contains("This link is not valid"));
    // On the base URL's host the login answers.
    let login = http
        .get(format!("{}/login", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 200);
    app.stop().await;
}
