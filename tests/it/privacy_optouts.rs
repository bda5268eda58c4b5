//! A reader's own choices reach every letter already sent (issue 38;
//! docs/privacy.md), on real MariaDB, webhook receivers and servers:
//! * an opt-out reaches the letters already sent, on every server, with
//!   no database read on the request path, and another site cannot make
//!   one for the reader;
//! * `track: "last_open_day"` keeps the day of the last open and nothing else.
//!
//! Erasure and IDN spellings are `privacy`'s.

use crate::common::build::BASE;
use crate::common::export::{build_letters, lenient_rollup, letter, tokens};
use crate::common::privacy::{
    acknowledged_by, configured, count, last_change, server_settings, stop_token,
};
use crate::common::wait::{self, PATIENCE};
use crate::common::webhooks::{endpoint, fast_retries, Receiver};
use crate::common::{client, days_ago, server_pool, CountedUser, TestDb, TestServer};
use linktrack::kind::LinkKind;
use linktrack::outbound::Outbound;
use linktrack::server::AppSettings;
use linktrack::store::{privacy, rollup, tracking_optouts};
use serde_json::{json, Value};

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
    let (_, letters) = build_letters(
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
    receiver.wait_for(1, PATIENCE).await;

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
    // The servers send the events out while they run: wait for the three
    // before stopping them (a stopped server sends nothing more, and on a
    // loaded machine the last one can still be queued at the stop).
    wait::eventually(PATIENCE, "three webhooks acknowledged", || async {
        match receiver.acknowledged().len() {
            sent if sent >= 3 => Ok(()),
            sent => Err(sent),
        }
    })
    .await;
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
    let (_, letters) = build_letters(
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
    let (summary, letters) = build_letters(
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
    wait::eventually(PATIENCE, "Cy's opens sent", || async {
        match receiver.acknowledged().len() {
            sent if sent >= 2 => Ok(()),
            sent => Err(sent),
        }
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

/// Issue 43, item 8: another site's page cannot opt a reader out of
/// tracking with a POST to `/t/` (it gets this site's confirmation page,
/// 403, nothing recorded), while `/u/` keeps taking RFC 8058 one-click
/// POSTs, which mailbox providers send from their own origin.
#[tokio::test]
async fn a_cross_site_post_to_stop_tracking_records_nothing() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let dir = tempfile::tempdir().unwrap();
    let (_, letters) = build_letters(
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
