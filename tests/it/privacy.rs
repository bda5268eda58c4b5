//! Privacy that holds everywhere (issue 38; docs/privacy.md), on real
//! MariaDB, Redis, webhook receivers and servers:
//! * `erase` leaves the address in no table, no Redis key and no journal
//!   file, with servers holding it in their caches and journals;
//! * an opt-out reaches the letters already sent, on every server, with
//!   no database read on the request path;
//! * `track: "last_open_day"` keeps the day of the last open and nothing else;
//! * both spellings of an IDN address are one person in every path.

use crate::common::build::{options, tracked_tokens, BASE};
use crate::common::privacy::{needles, sweep_database, sweep_files, sweep_redis};
use crate::common::webhooks::{endpoint, fast_retries, Receiver};
use crate::common::{
    build_app, client, days_ago, linktrack, quick, server_pool, test_settings, CountedUser, TestDb,
    TestServer,
};
use linktrack::builder::{self, Summary};
use linktrack::kind::LinkKind;
use linktrack::live::Live;
use linktrack::outbound::Outbound;
use linktrack::privacy::PrivacySettings;
use linktrack::server::image::AddressPolicy;
use linktrack::server::state::ServerSettings;
use linktrack::server::AppSettings;
use linktrack::store::{self, privacy, rollup, suppressions, tracking_optouts};
use linktrack::token::Token;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const REDIS: &str = "redis://127.0.0.1:6379";
/// The person to erase, in the spelling the recipients file has, and the other.
const TARGET: &str = "erase.me@bücher.example";
const TARGET_ASCII: &str = "erase.me@xn--bcher-kva.example";
/// Someone who stays.
const KEEP: &str = "keep@example.com";

/// A mailing file and a recipients file in `dir`; `fields` are the JSON
/// objects of the recipients.
fn write_mailing(dir: &Path, mailing: Value, recipients: &[Value]) -> (PathBuf, PathBuf) {
    let (m, r) = (dir.join("m.json"), dir.join("r.jsonl"));
    std::fs::write(&m, mailing.to_string()).unwrap();
    let lines: Vec<String> = recipients.iter().map(Value::to_string).collect();
    std::fs::write(&r, lines.join("\n")).unwrap();
    (m, r)
}

async fn build(
    db: &TestDb,
    dir: &Path,
    mailing: Value,
    recipients: &[Value],
) -> (Summary, Vec<Value>) {
    let (m, r) = write_mailing(dir, mailing, recipients);
    let summary = builder::run(&db.pool, &options(dir, m, r)).await.unwrap();
    let letters = std::fs::read_to_string(dir.join("letters.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (summary, letters)
}

/// The letter to `email` (as the output spells it).
fn letter<'a>(letters: &'a [Value], email: &str) -> &'a Value {
    letters
        .iter()
        .find(|l| l["email"] == email)
        .unwrap_or_else(|| panic!("no letter to {email}: {letters:?}"))
}

/// A letter's tokens of `kind`, in order (HTML and headers).
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

/// The token of the letter's "stop tracking me" link.
fn stop_token(letter: &Value) -> String {
    let html = letter["html"].as_str().unwrap();
    let at = html
        .find(&format!("{BASE}/t/"))
        .expect("a stop-tracking link")
        + BASE.len()
        + 3;
    html[at..at + 32].to_owned()
}

/// Server settings for these tests: clicks right after the build are
/// people's, images from a loopback upstream are proxied.
fn server_settings() -> ServerSettings {
    let mut settings = test_settings();
    settings.bots.min_click_delay = Duration::ZERO;
    settings.bots.burst_links = 1_000;
    settings.images.policy = AddressPolicy::AllowLoopback;
    settings
}

/// The privacy view refreshed every 100 ms (tests wait for it by its
/// acknowledgement, never by the clock).
fn fast_privacy() -> PrivacySettings {
    PrivacySettings {
        refresh_every: Duration::from_millis(100),
        ..PrivacySettings::default()
    }
}

/// `quick`, with [`server_settings`] and [`fast_privacy`].
fn configured(settings: AppSettings) -> AppSettings {
    AppSettings {
        server: server_settings(),
        privacy: fast_privacy(),
        ..quick(settings)
    }
}

/// Verdict rules under which the tests' clicks are people's.
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

/// Poll `probe` until it is true (20 s at most), failing with `what`.
async fn until<F, Fut>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while !probe().await {
        assert!(Instant::now() < deadline, "waited 20 s for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn count(pool: &sqlx::MySqlPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// The newest change of the privacy change log.
async fn last_change(pool: &sqlx::MySqlPool) -> u64 {
    privacy::last_change_id(pool, privacy::ChangeLog::Privacy)
        .await
        .unwrap()
}

/// Wait until every server in `privacy_servers` has taken in change `id`.
async fn acknowledged_by(pool: &sqlx::MySqlPool, servers: usize, id: u64) {
    until("the servers to acknowledge the change", || async {
        let acks = privacy::live_servers(pool, Duration::from_secs(60))
            .await
            .unwrap();
        acks.len() >= servers && acks.iter().all(|a| a.applied_id >= id)
    })
    .await;
}

fn unreplayed(dir: &Path) -> usize {
    linktrack::journal::segments::unreplayed_segments(dir)
        .map(|s| s.len())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erase_leaves_the_address_in_no_table_no_redis_key_and_no_journal() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let up = crate::common::image_upstream::upstream().await;
    let prefix = format!("lt:test:{}:", db.name);
    let live = Live::new(REDIS, &prefix).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A personalised link carries the address twice (as it is, and
    // URL-encoded); a tagged link puts the letter in a Redis segment.
    let html = format!(
        "<p>Hi</p><a href=\"https://shop.example/?u={{{{ email }}}}&e={{{{ email|urlencode }}}}\">your account</a>\
         <a href=\"https://example.com/spring\" data-linktrack-tag=\"ruby\">spring</a>\
         <img src=\"{}/img.png\" alt=\"\"><a href=\"{{{{ stop_tracking_url }}}}\">stop tracking me</a></body>",
        up.base
    );
    let mailing = json!({"mailing_id": "m38", "subject": "Spring", "from": "news@example.com",
        "html": html, "tags": ["spring"], "honeypot": false});
    let (summary, letters) = build(
        &db,
        dir.path(),
        mailing,
        &[json!({"email": TARGET}), json!({"email": KEEP})],
    )
    .await;
    assert_eq!(summary.letters_built, 2, "{summary}");
    let target = letter(&letters, TARGET_ASCII).clone();
    let keep = letter(&letters, KEEP).clone();
    // A last_open_day letter too (its open keeps the day).
    let days_dir = tempfile::tempdir().unwrap();
    let (_, day_letters) = build(
        &db,
        days_dir.path(),
        json!({"mailing_id": "m38-days", "subject": "S", "from": "news@example.com",
            "html": "<p>Hi</p></body>", "track": "last_open_day"}),
        &[json!({"email": TARGET})],
    )
    .await;
    let day_pixel = tokens(&day_letters[0], LinkKind::Pixel)[0];
    // An MTA refused the target's letter, quoting the address.
    let letter_id = target["letter_id"].as_u64().unwrap();
    let writes = store::deliveries::LedgerWrites {
        sending: vec![letter_id],
        outcomes: vec![(
            letter_id,
            store::deliveries::DeliveryStatus::Rejected,
            format!("550 5.1.1 <{TARGET}>: Recipient address rejected"),
        )],
        forgotten: vec![],
    };
    let mut conn = db.pool.acquire().await.unwrap();
    store::deliveries::write_ledger(&mut conn, "m38", &writes)
        .await
        .unwrap();
    drop(conn);

    // Server A: events out to a receiver that keeps failing (the outbox
    // holds the rows) and one that refuses for good (dead letters), the
    // rollup publishing to Redis.
    let failing = Receiver::start("127.0.0.1:0".parse().unwrap(), usize::MAX, 503).await;
    let refusing = Receiver::start("127.0.0.1:0".parse().unwrap(), usize::MAX, 400).await;
    let outbound = Outbound::new(
        vec![
            endpoint("failing", &failing.url()),
            endpoint("refusing", &refusing.url()),
        ],
        fast_retries(),
    );
    let (dir_a, dir_b, dir_c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let a = TestServer::start_in(server_pool(&db).await, dir_a.path(), |settings| {
        AppSettings {
            outbound,
            live: Some(live.clone()),
            rollup_every: Some(Duration::from_millis(200)),
            rollup: lenient_rollup(),
            ..configured(settings)
        }
    })
    .await;
    let http = client();
    let hit = |base: String, path: String| {
        let http = http.clone();
        async move { http.get(format!("{base}{path}")).send().await.unwrap() }
    };
    for person in [&target, &keep] {
        for click in tokens(person, LinkKind::Click) {
            assert_eq!(
                hit(a.base.clone(), format!("/c/{click}")).await.status(),
                302
            );
        }
        let pixel = tokens(person, LinkKind::Pixel)[0];
        assert_eq!(
            hit(a.base.clone(), format!("/o/{pixel}.gif"))
                .await
                .status(),
            200
        );
        let image = tokens(person, LinkKind::Image)[0];
        assert_eq!(
            hit(a.base.clone(), format!("/i/{image}")).await.status(),
            200
        );
    }
    assert_eq!(
        hit(a.base.clone(), format!("/o/{day_pixel}.gif"))
            .await
            .status(),
        200
    );
    until(
        "the target's events, outbox rows, dead letters and segment",
        || async {
            count(
                &db.pool,
                "SELECT COUNT(*) FROM events WHERE email IS NOT NULL",
            )
            .await
                >= 6
                && count(
                    &db.pool,
                    "SELECT COUNT(*) FROM outbox WHERE endpoint = 'failing'",
                )
                .await
                    >= 6
                && count(&db.pool, "SELECT COUNT(*) FROM outbox_dead").await >= 6
                && count(&db.pool, "SELECT COUNT(*) FROM last_open_days").await == 1
                && !sweep_redis(REDIS, &prefix, &[letter_id.to_string().into_bytes()])
                    .await
                    .is_empty()
        },
    )
    .await;
    // Server B: the target's links in its cache (the unsubscribe page's
    // link holds the address).
    let b = TestServer::start_in(server_pool(&db).await, dir_b.path(), configured).await;
    let unsubscribe = tokens(&target, LinkKind::Unsubscribe)[0];
    let page = hit(b.base.clone(), format!("/u/{unsubscribe}")).await;
    assert!(page.text().await.unwrap().contains("e***@bücher.example"));
    let spring = tokens(&target, LinkKind::Click)[1];
    assert_eq!(
        hit(b.base.clone(), format!("/c/{spring}")).await.status(),
        302
    );

    // Server C: hits journaled and never replayed (its database went away),
    // then it dies.
    let c_pool = server_pool(&db).await;
    let c = build_app(c_pool.clone(), dir_c.path(), configured).await;
    let c_base = format!("http://{}", c.local_addr().unwrap());
    let handles = c.spawn_abortable();
    assert_eq!(
        hit(c_base.clone(), format!("/c/{spring}")).await.status(),
        302
    );
    until("C's first click stored", || async {
        unreplayed(dir_c.path()) == 0
            && count(&db.pool, "SELECT COUNT(*) FROM events WHERE kind = 'click'").await >= 5
    })
    .await;
    c_pool.close().await;
    for _ in 0..3 {
        assert_eq!(
            hit(c_base.clone(), format!("/c/{spring}")).await.status(),
            302
        );
    }
    let pixel = tokens(&target, LinkKind::Pixel)[0];
    assert_eq!(
        hit(c_base.clone(), format!("/o/{pixel}.gif"))
            .await
            .status(),
        200
    );
    for handle in handles {
        handle.abort();
    }
    assert!(
        unreplayed(dir_c.path()) > 0,
        "C's journal waits for a replay"
    );
    let c_journal: String = linktrack::journal::segments::unreplayed_segments(dir_c.path())
        .unwrap()
        .iter()
        .map(|segment| std::fs::read_to_string(segment).unwrap())
        .collect();
    assert_eq!(
        c_journal.matches(&hex::encode(spring.as_bytes())).count(),
        3,
        "{c_journal}"
    );

    // On both lists, in clear.
    for list in ["suppressions", "tracking-optouts"] {
        let out = linktrack(&db, &[list, "add", TARGET]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Erase, by the other spelling, through the command line with Redis.
    let erased = std::process::Command::new(env!("CARGO_BIN_EXE_linktrack"))
        .args([
            "erase",
            "--email",
            "Erase.Me@XN--BCHER-KVA.example",
            "--wait-secs",
            "15",
        ])
        .env("DATABASE_URL", &db.url)
        .env("REDIS_URL", REDIS)
        .env("LINKTRACK_REDIS_PREFIX", &prefix)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&erased.stdout).to_string();
    assert!(
        erased.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&erased.stderr)
    );
    for line in [
        "erase: erasures: recorded as the address's keyed hash",
        "erase: servers: 2 confirmed",
        "did not confirm",
        "erase: outbox_dead: ",
        "erase: deliveries: 1 row with the address in the MTA's reply cleaned",
        "erase: last_open_days: 1 row deleted",
        "erase: suppressions: entry kept as a keyed hash, no longer readable",
        "erase: tracking_optouts: entry kept as a keyed hash, no longer readable",
    ] {
        assert!(said.contains(line), "{line:?} in {said}");
    }
    let number = |label: &str| -> u64 {
        let rest = &said[said
            .find(label)
            .unwrap_or_else(|| panic!("{label} in {said}"))
            + label.len()..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    // Two letters (the m38 one: two links, pixel, unsubscribe, stop
    // link; the last-open-day one: pixel, unsubscribe); A's, B's and C's
    // stored hits (the image is a shared row: nobody's already); A's three
    // sent out, to both endpoints.
    assert_eq!(number("erase: links: "), 7, "{said}");
    assert!(
        said.contains("(2 letters; 1 with the address in a URL or tag cleaned)"),
        "{said}"
    );
    assert_eq!(number("erase: events: "), 5, "{said}");
    assert_eq!(number("erase: outbox: "), 3, "{said}");
    assert_eq!(number("erase: outbox_dead: "), 3, "{said}");
    assert!(number("erase: redis: ") >= 1, "{said}");
    assert_eq!(
        said.lines()
            .filter(|l| l.contains("did not confirm"))
            .count(),
        1,
        "C, dead, could not: {said}"
    );

    // After it: B's cached links are gone (the unsubscribe page names
    // nobody), a click on A and B still redirects (the personalised link
    // without the address), and C's journal is replayed by its successor.
    let page = hit(b.base.clone(), format!("/u/{unsubscribe}")).await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(!page.contains("e***@"), "{page}");
    assert_eq!(
        hit(b.base.clone(), format!("/c/{spring}")).await.status(),
        302
    );
    let personal = tokens(&target, LinkKind::Click)[0];
    let moved = hit(a.base.clone(), format!("/c/{personal}")).await;
    assert_eq!(moved.status(), 302);
    assert_eq!(moved.headers()["location"], "https://shop.example/?u=&e=");
    let c_again = TestServer::start_in(server_pool(&db).await, dir_c.path(), configured).await;
    until("C's journal replayed by its successor", || async {
        unreplayed(dir_c.path()) == 0
    })
    .await;
    c_again.stop().await;
    b.stop().await;
    a.stop().await;

    // The sweep: every column of every table, every Redis key, every journal.
    let target_needles = needles(TARGET, Some(TARGET_ASCII));
    assert_eq!(sweep_database(&db.pool, &target_needles).await, vec![]);
    assert_eq!(
        sweep_redis(REDIS, &prefix, &target_needles).await,
        Vec::<String>::new()
    );
    for journal in [dir_a.path(), dir_b.path(), dir_c.path()] {
        assert_eq!(sweep_files(journal, &target_needles), Vec::<String>::new());
    }
    // The sweep would have seen it: the one who stays is everywhere.
    let kept = sweep_database(&db.pool, &needles(KEEP, None)).await;
    for column in [
        "links.email",
        "events.email",
        "outbox.payload",
        "outbox_dead.payload",
    ] {
        assert!(
            kept.iter().any(|(c, _)| c == column),
            "{column} in {kept:?}"
        );
    }
    // C's replayed events and the clicks after the erase: stored, nobody's.
    let after: i64 = count(
        &db.pool,
        &format!("SELECT COUNT(*) FROM events WHERE letter_id = {letter_id} AND email IS NULL AND ip IS NULL AND user_agent IS NULL"),
    )
    .await;
    assert_eq!(after, 11, "the target's events, every one anonymised");

    // The suppression and the opt-out outlive the readable address, in
    // both spellings; a second erase changes nothing.
    let again_dir = tempfile::tempdir().unwrap();
    let (summary, _) = build(
        &db,
        again_dir.path(),
        json!({"mailing_id": "m38-again", "subject": "S", "from": "news@example.com", "html": "<p>x</p>"}),
        &[json!({"email": TARGET_ASCII})],
    )
    .await;
    assert_eq!(
        (summary.letters_built, summary.suppressed),
        (0, 1),
        "{summary}"
    );
    assert!(tracking_optouts::opted_out_among(&db.pool, &[TARGET_ASCII])
        .await
        .unwrap()
        .contains(TARGET_ASCII));
    assert!(privacy::withheld_among(&db.pool, &[TARGET_ASCII])
        .await
        .unwrap()
        .contains(TARGET_ASCII));
    let again = linktrack(&db, &["erase", "--email", TARGET, "--wait-secs", "0"]);
    let said = String::from_utf8_lossy(&again.stdout).to_string();
    assert!(again.status.success(), "{said}");
    for line in [
        "erased before",
        "erase: links: 0 rows",
        "erase: events: 0 rows",
        "erase: outbox: 0 rows",
        "erase: outbox_dead: 0 rows",
        "erase: deliveries: 0 rows",
        "entry kept as a keyed hash (already)",
    ] {
        assert!(said.contains(line), "{line:?} in {said}");
    }
    failing.stop();
    refusing.stop();
    let _ = live.clear().await;
}

/// An event as stored: kind, address, letter, token (hex), network, user agent.
type StoredRow = (
    String,
    Option<String>,
    Option<u64>,
    String,
    Option<String>,
    Option<String>,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opt_out_reaches_the_letters_already_sent_on_every_server() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let up = crate::common::image_upstream::upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let html = format!(
        "<p>Hi</p><a href=\"https://example.com/a\">a</a><a href=\"https://example.com/b\">b</a>\
         <img src=\"{}/img.png\" alt=\"\"><a href=\"{{{{ stop_tracking_url }}}}\">stop</a></body>",
        up.base
    );
    let (_, letters) = build(
        &db,
        dir.path(),
        json!({"mailing_id": "m-opt", "subject": "S", "from": "news@example.com", "html": html, "honeypot": false}),
        &[json!({"email": "ann@example.com"}), json!({"email": "bob@example.com"})],
    )
    .await;
    let (ann, bob) = (
        letter(&letters, "ann@example.com"),
        letter(&letters, "bob@example.com"),
    );
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap(), 0, 200).await;
    let with_webhooks = |settings: AppSettings| AppSettings {
        outbound: Outbound::new(vec![endpoint("crm", &receiver.url())], fast_retries()),
        ..configured(settings)
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = TestServer::start_in(server_pool(&db).await, dir_a.path(), with_webhooks).await;
    let b = TestServer::start_in(server_pool(&db).await, dir_b.path(), with_webhooks).await;
    let http = client();
    let [ann_a, ann_b] = [
        tokens(ann, LinkKind::Click)[0],
        tokens(ann, LinkKind::Click)[1],
    ];
    // Before: Ann's click is hers.
    let before = http
        .get(a.url(&format!("/c/{ann_a}")))
        .send()
        .await
        .unwrap();
    assert_eq!(before.status(), 302);
    receiver.wait_for(1, Duration::from_secs(20)).await;

    // Ann withdraws on A: A honours it at once; B once it acknowledges.
    let stop = http
        .post(a.url(&format!("/t/{}", stop_token(ann))))
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status(), 200);
    let (pixel, image) = (
        tokens(ann, LinkKind::Pixel)[0],
        tokens(ann, LinkKind::Image)[0],
    );
    let answers = [
        http.get(a.url(&format!("/c/{ann_a}")))
            .send()
            .await
            .unwrap(),
        http.get(a.url(&format!("/o/{pixel}.gif")))
            .send()
            .await
            .unwrap(),
        http.get(a.url(&format!("/i/{image}")))
            .send()
            .await
            .unwrap(),
    ];
    let statuses: Vec<u16> = answers.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(statuses, [302, 200, 200], "answered as before");
    assert_eq!(answers[0].headers()["location"], "https://example.com/a");
    acknowledged_by(&db.pool, 2, last_change(&db.pool).await).await;
    assert_eq!(
        http.get(b.url(&format!("/c/{ann_b}")))
            .send()
            .await
            .unwrap()
            .status(),
        302
    );
    assert_eq!(
        http.get(b.url(&format!("/o/{pixel}.gif")))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // Bob has not withdrawn.
    let bob_click = tokens(bob, LinkKind::Click)[0];
    assert_eq!(
        http.get(b.url(&format!("/c/{bob_click}")))
            .send()
            .await
            .unwrap()
            .status(),
        302
    );
    a.stop().await;
    b.stop().await;

    // Stored: Ann's one click before, and after it nothing naming her:
    // no address, token, letter, network or user agent.
    let rows: Vec<StoredRow> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), email, letter_id, LOWER(HEX(uuid)), ip, user_agent \
             FROM events WHERE mailing_id = 'm-opt' ORDER BY occurred_at, id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let ann_id = ann["letter_id"].as_u64();
    let named: Vec<_> = rows
        .iter()
        .filter(|r| r.1.as_deref() == Some("ann@example.com"))
        .collect();
    assert_eq!(named.len(), 1, "{rows:?}");
    assert_eq!(named[0].0, "click");
    let nobodys: Vec<_> = rows.iter().filter(|r| r.3 == "0".repeat(32)).collect();
    assert_eq!(
        nobodys.len(),
        4,
        "A's click and open, B's click and open: {rows:?}"
    );
    for row in &nobodys {
        assert_eq!(
            (&row.1, row.2, &row.4, &row.5),
            (&None, Some(0), &None, &None),
            "{row:?}"
        );
    }
    assert!(
        rows.iter().all(|r| r.2 != ann_id || r.1.is_some()),
        "{rows:?}"
    );
    let images: Vec<_> = rows.iter().filter(|r| r.0 == "image").collect();
    assert_eq!(images.len(), 1);
    assert_eq!(
        (&images[0].4, &images[0].5),
        (&None, &None),
        "a shared image names no one"
    );
    // Counted all the same, per mailing and link.
    rollup::rollup_with(&db.pool, &lenient_rollup())
        .await
        .unwrap();
    let clicks = count(&db.pool, "SELECT CAST(SUM(total) AS SIGNED) FROM stats_totals WHERE mailing_id = 'm-opt' AND kind = 'click'").await;
    assert_eq!(clicks, 4, "Ann's three clicks and Bob's");
    // Sent out: Ann's first click, Bob's click, the image load (nobody's);
    // nothing else, and nothing naming Ann after her choice.
    until("the webhooks", || async {
        receiver.acknowledged().len() >= 3
    })
    .await;
    let bodies: Vec<Value> = receiver.deliveries().into_iter().map(|d| d.body).collect();
    let naming_ann = bodies
        .iter()
        .filter(|b| b["data"]["email"] == "ann@example.com")
        .count();
    assert_eq!(naming_ann, 1, "{bodies:?}");
    assert_eq!(receiver.acknowledged().len(), 3, "{bodies:?}");
    receiver.stop();
}

#[tokio::test]
async fn an_opted_out_readers_click_is_withheld_without_a_database_read() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let dir = tempfile::tempdir().unwrap();
    let (_, letters) = build(
        &db,
        dir.path(),
        json!({"mailing_id": "m-hot", "subject": "S", "from": "news@example.com",
            "html": "<a href=\"https://example.com/a\">a</a><a href=\"{{ stop_tracking_url }}\">stop</a>", "honeypot": false}),
        &[json!({"email": "ann@example.com"})],
    )
    .await;
    let click = tokens(&letters[0], LinkKind::Click)[0];
    let user = CountedUser::new(&db).await;
    let app = crate::hot_path::counted_app(&user).await;
    let http = client();
    // The link into the cache, then the choice, on this server.
    assert_eq!(
        http.get(app.url(&format!("/c/{click}")))
            .send()
            .await
            .unwrap()
            .status(),
        302
    );
    let stop = http
        .post(app.url(&format!("/t/{}", stop_token(&letters[0]))))
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status(), 200);
    let before = user.settled_statements().await;
    for _ in 0..5 {
        let answer = http
            .get(app.url(&format!("/c/{click}")))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 302);
    }
    assert_eq!(
        user.statements().await.since(before).total(),
        0,
        "no statement per click"
    );
    app.stop().await;
    let named = count(
        &db.pool,
        "SELECT COUNT(*) FROM events WHERE email = 'ann@example.com'",
    )
    .await;
    let nobodys = count(
        &db.pool,
        "SELECT COUNT(*) FROM events WHERE letter_id = 0 AND email IS NULL AND ip IS NULL",
    )
    .await;
    // The journal is replayed at the stop, with the choice in view: the
    // click before it is withheld too (the replay screens again).
    assert_eq!((named, nobodys), (0, 6));
}

#[tokio::test]
async fn last_open_day_keeps_the_day_of_the_last_open_and_nothing_else() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let up = crate::common::image_upstream::upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let html = format!(
        "<p>Hi</p><a href=\"https://example.com/a\">a</a><img src=\"{}/img.png\" alt=\"\"></body>",
        up.base
    );
    let (summary, letters) = build(
        &db,
        dir.path(),
        json!({"mailing_id": "m-day", "subject": "S", "from": "news@example.com", "html": html,
            "track": "last_open_day"}),
        &[
            json!({"email": "ann@example.com"}),
            json!({"email": "bob@example.com"}),
            json!({"email": "cy@example.com", "linktrack_track": "all"}),
        ],
    )
    .await;
    assert_eq!(summary.letters_last_open_day, 2, "{summary}");
    let ann = letter(&letters, "ann@example.com");
    let html = ann["html"].as_str().unwrap();
    assert!(html.contains(&format!("{BASE}/o/")), "the pixel: {html}");
    assert!(
        html.contains("href=\"https://example.com/a\""),
        "links as written: {html}"
    );
    assert!(
        html.contains(&format!("src=\"{}/img.png\"", up.base)),
        "images not proxied"
    );
    let untracked = count(
        &db.pool,
        "SELECT CAST(untracked AS SIGNED) FROM stats_letters WHERE mailing_id = 'm-day'",
    )
    .await;
    assert_eq!(untracked, 2, "rates do not count them");
    // An older day is overwritten; Bob withdrew, so his stays as it was.
    for who in ["ann@example.com", "bob@example.com"] {
        sqlx::query("INSERT INTO last_open_days (email, day) VALUES (?, '2020-01-01')")
            .bind(who)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    tracking_optouts::add(&db.pool, &["bob@example.com".into()], "manual")
        .await
        .unwrap();
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap(), 0, 200).await;
    let app = TestServer::start(server_pool(&db).await, |settings| AppSettings {
        outbound: Outbound::new(vec![endpoint("crm", &receiver.url())], fast_retries()),
        ..configured(settings)
    })
    .await;
    let http = client();
    for person in ["ann@example.com", "bob@example.com", "cy@example.com"] {
        let pixel = tokens(letter(&letters, person), LinkKind::Pixel)[0];
        for _ in 0..2 {
            let answer = http
                .get(app.url(&format!("/o/{pixel}.gif")))
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 200);
        }
    }
    // Sent while the server runs: its senders stop with it, and a last pass
    // bounded by the flush deadline may not reach a loaded machine's
    // receiver (seen in CI: 1 run in 6 under load waited in vain).
    until("Cy's opens sent", || async {
        receiver.acknowledged().len() >= 2
    })
    .await;
    app.stop().await;
    let days: Vec<(String, chrono::NaiveDate)> =
        sqlx::query_as("SELECT CONVERT(email USING utf8mb4), day FROM last_open_days ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let today = chrono::Utc::now().date_naive();
    let twenty = chrono::NaiveDate::from_ymd_opt(2020, 1, 1).unwrap();
    assert_eq!(
        days,
        [
            ("ann@example.com".to_owned(), today),
            ("bob@example.com".to_owned(), twenty)
        ],
        "one row per address, overwritten; a withdrawn reader's left alone"
    );
    // No event for their opens; Cy's letter tracks as before.
    let events: Vec<Option<String>> = sqlx::query_scalar("SELECT email FROM events")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(events, vec![Some("cy@example.com".to_owned()); 2]);
    assert_eq!(
        receiver.acknowledged().len(),
        2,
        "Cy's two opens, nobody else's"
    );
    assert!(receiver
        .deliveries()
        .iter()
        .all(|d| d.body["data"]["email"] == "cy@example.com"));
    // A late replay of an older open never moves the day back.
    privacy::note_last_opens(&db.pool, &[("ann@example.com".into(), twenty)])
        .await
        .unwrap();
    assert_eq!(
        privacy::last_open_day(&db.pool, "ann@example.com")
            .await
            .unwrap(),
        Some(today)
    );
    receiver.stop();
}

#[tokio::test]
async fn both_spellings_of_an_idn_address_are_one_person_in_every_path() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let ok = |args: &[&str]| {
        let out = linktrack(&db, args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    ok(&["suppressions", "add", "carol@xn--bcher-kva.example"]);
    ok(&["tracking-optouts", "add", "erin@bücher.example"]);
    let dir = tempfile::tempdir().unwrap();
    let (summary, letters) = build(
        &db,
        dir.path(),
        json!({"mailing_id": "m-idn", "subject": "S", "from": "news@example.com",
            "html": "<a href=\"https://example.com/a\">a</a></body>"}),
        &[
            json!({"email": "carol@bücher.example"}),
            json!({"email": "dan@bücher.example"}),
            json!({"email": "DAN@XN--BCHER-KVA.EXAMPLE"}),
            json!({"email": "erin@xn--bcher-kva.example"}),
        ],
    )
    .await;
    assert_eq!(
        (
            summary.letters_built,
            summary.suppressed,
            summary.rejected,
            summary.letters_untracked
        ),
        (2, 1, 1, 1),
        "{summary}"
    );
    assert_eq!(
        summary.rejected_by_reason.get("duplicate address"),
        Some(&1)
    );
    let dan = letter(&letters, "dan@xn--bcher-kva.example");
    assert!(!dan["html"].as_str().unwrap().is_empty());
    let erin = letter(&letters, "erin@xn--bcher-kva.example");
    assert!(
        !erin["html"]
            .as_str()
            .unwrap()
            .contains(&format!("{BASE}/c/")),
        "untracked"
    );
    // Erase by the other spelling: Dan's rows go.
    let said = ok(&["erase", "--email", "Dan@Bücher.example", "--wait-secs", "0"]);
    assert!(said.contains("erase: links: "), "{said}");
    assert_eq!(
        count(
            &db.pool,
            "SELECT COUNT(*) FROM links WHERE email LIKE 'dan@%'"
        )
        .await,
        0
    );
    // Rows and entries an older release stored with the Unicode domain:
    // `migrate` moves the list entries, erase finds the rows.
    sqlx::query("INSERT INTO suppressions (email, reason) VALUES ('frank@bücher.example', 'old')")
        .execute(&db.pool)
        .await
        .unwrap();
    let token = crate::common::settled_token(&db.pool, LinkKind::Click).await;
    let row = store::links::NewLink {
        token,
        kind: LinkKind::Click,
        mailing_id: "m-old".into(),
        letter_id: 999,
        email: "frank@bücher.example".into(),
        position: 1,
        url: "https://example.com/".into(),
        meta: None,
    };
    store::links::insert(&db.pool, &[row]).await.unwrap();
    ok(&["migrate"]);
    let listed = suppressions::list(&db.pool, None, 10).await.unwrap();
    let emails: Vec<&str> = listed.iter().map(|s| s.email.as_str()).collect();
    assert_eq!(
        emails,
        ["carol@xn--bcher-kva.example", "frank@xn--bcher-kva.example"]
    );
    let said = ok(&[
        "erase",
        "--email",
        "frank@xn--bcher-kva.example",
        "--wait-secs",
        "0",
    ]);
    assert!(said.contains("erase: links: 1 row anonymised"), "{said}");
    assert!(
        said.contains("erase: suppressions: entry kept as a keyed hash"),
        "{said}"
    );
    // Both spellings still suppressed, and removed again by either.
    let both = ["frank@xn--bcher-kva.example", "frank@bücher.example"];
    for spelling in both {
        assert!(
            privacy::is_suppressed(&db.pool, spelling).await.unwrap(),
            "{spelling}"
        );
    }
    let removed = ok(&["suppressions", "remove", "frank@bücher.example"]);
    assert!(removed.contains("removed 1"), "{removed}");
    assert!(!privacy::is_suppressed(&db.pool, both[0]).await.unwrap());
}

/// Issue 43, item 8: another site's page cannot opt a reader out of
/// tracking with a POST to `/t/` (it gets this site's confirmation page,
/// 403, nothing recorded), while `/u/` keeps taking RFC 8058 one-click
/// POSTs, which mailbox providers send from their own origin.
#[tokio::test]
async fn a_cross_site_post_to_stop_tracking_records_nothing() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let dir = tempfile::tempdir().unwrap();
    let (_, letters) = build(
        &db,
        dir.path(),
        json!({"mailing_id": "m-xs", "subject": "S", "from": "news@example.com",
            "html": "<a href=\"https://example.com/a\">a</a><a href=\"{{ stop_tracking_url }}\">stop</a>", "honeypot": false}),
        &[json!({"email": "ann@example.com"})],
    )
    .await;
    let app = TestServer::start(db.pool.clone(), configured).await;
    let http = client();
    let stop_url = app.url(&format!("/t/{}", stop_token(&letters[0])));
    let opted_out = "SELECT COUNT(*) FROM tracking_optouts";
    for (name, value) in [
        ("sec-fetch-site", "cross-site"),
        ("origin", "https://evil.example"),
        ("origin", "null"),
    ] {
        let refused = http
            .post(&stop_url)
            .header(name, value)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 403, "{name}: {value}");
        let page = refused.text().await.unwrap();
        assert!(page.contains("came from another website"), "{page}");
        assert!(
            page.contains("<form method=\"post\">"),
            "the confirm button: {page}"
        );
        assert_eq!(count(&db.pool, opted_out).await, 0, "{name}: {value}");
    }
    // The button of this site's page (same origin) records it.
    let origin = server_settings().base_url;
    let confirmed = http
        .post(&stop_url)
        .header("sec-fetch-site", "same-origin")
        .header("origin", origin.trim_end_matches('/'))
        .send()
        .await
        .unwrap();
    assert_eq!(confirmed.status(), 200);
    assert_eq!(count(&db.pool, opted_out).await, 1);

    // A one-click unsubscribe from a mailbox provider is still taken.
    let unsubscribe = tokens(&letters[0], LinkKind::Unsubscribe)[0];
    let one_click = http
        .post(app.url(&format!("/u/{unsubscribe}")))
        .header("sec-fetch-site", "cross-site")
        .header("origin", "https://mail.provider.example")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    assert_eq!(one_click.status(), 200);
    assert_eq!(
        count(&db.pool, "SELECT COUNT(*) FROM suppressions").await,
        1
    );
    app.stop().await;
}
