//! Privacy that holds everywhere (issue 38; docs/privacy.md), on real
//! MariaDB, Redis, webhook receivers and servers:
//! * `erase` leaves the address in no table, no Redis key and no journal
//!   file, with servers holding it in their caches and journals;
//! * both spellings of an IDN address are one person in every path.
//!
//! What a reader's own choices reach (an opt-out, `last_open_day`) is
//! `privacy_optouts`'.

use crate::common::build::BASE;
use crate::common::export::{build_letters, lenient_rollup, letter, tokens};
use crate::common::privacy::{
    configured, count, needles, sweep_database, sweep_files, sweep_redis,
};
use crate::common::wait::{self, PATIENCE};
use crate::common::webhooks::{endpoint, fast_retries, Receiver};
use crate::common::{build_app, client, days_ago, linktrack, server_pool, TestDb, TestServer};
use linktrack::kind::LinkKind;
use linktrack::live::Live;
use linktrack::outbound::Outbound;
use linktrack::server::AppSettings;
use linktrack::store::{self, privacy, suppressions, tracking_optouts};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const REDIS: &str = "redis://127.0.0.1:6379";
/// The person to erase, in the spelling the recipients file has, and the other.
const TARGET: &str = "erase.me@bücher.example";
const TARGET_ASCII: &str = "erase.me@xn--bcher-kva.example";
/// Someone who stays.
const KEEP: &str = "keep@example.com";

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
    let (summary, letters) = build_letters(
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
    let (_, day_letters) = build_letters(
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
    wait::eventually(
        PATIENCE,
        "the target's events, outbox rows, dead letters and segment",
        || async {
            let seen = (
                count(
                    &db.pool,
                    "SELECT COUNT(*) FROM events WHERE email IS NOT NULL",
                )
                .await,
                count(
                    &db.pool,
                    "SELECT COUNT(*) FROM outbox WHERE endpoint = 'failing'",
                )
                .await,
                count(&db.pool, "SELECT COUNT(*) FROM outbox_dead").await,
                count(&db.pool, "SELECT COUNT(*) FROM last_open_days").await,
                sweep_redis(REDIS, &prefix, &[letter_id.to_string().into_bytes()])
                    .await
                    .len(),
            );
            let (events, outbox, dead, days, segments) = seen;
            if events >= 6 && outbox >= 6 && dead >= 6 && days == 1 && segments > 0 {
                Ok(())
            } else {
                Err(format!(
                    "events {events}, outbox {outbox}, dead {dead}, \
                     last open days {days}, Redis keys {segments}"
                ))
            }
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
    wait::eventually(PATIENCE, "C's first click stored", || async {
        let segments = unreplayed(dir_c.path());
        let clicks = count(&db.pool, "SELECT COUNT(*) FROM events WHERE kind = 'click'").await;
        if segments == 0 && clicks >= 5 {
            Ok(())
        } else {
            Err(format!("{segments} segments unreplayed, {clicks} clicks"))
        }
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
    wait::eventually_eq(
        PATIENCE,
        "C's journal replayed by its successor",
        0,
        || async { unreplayed(dir_c.path()) },
    )
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
    let (summary, _) = build_letters(
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
    let (summary, letters) = build_letters(
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
