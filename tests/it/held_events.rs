//! Events out carry the settled verdict (issue 24): clicks and opens wait in
//! the outbox, held, until the rollup settles their verdict, and then go
//! with it (`"settled": true`); unsubscribes go at once; with settle 0
//! everything goes at once with its first verdict; a held event no rollup
//! settles goes anyway after settle + grace (the safety net). Real server,
//! real receiver on a socket, real MariaDB.

use crate::common::wait::{eventually, eventually_eq, PATIENCE};
use crate::common::webhooks::{endpoint, fast_retries, http, letter, metric, Delivery, Receiver};
use crate::common::{days_ago, TestDb, TestServer};
use linktrack::bots::letter_judgement::VerdictRules;
use linktrack::outbound::{Hold, Outbound};
use linktrack::store::rollup::RollupOptions;
use linktrack::token::Token;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// A scanner's address and a person's: the honeypot rule holds whatever the address.
const SCANNER: &str = "198.51.100.7";
const PERSON: &str = "203.0.113.9";

/// A server whose events go to `receiver` as endpoint `name`, holding
/// clicks and opens for `settle` (safety net: `grace` later), with the
/// rollup settling verdicts every `rollup_every` (`None`: no rollup).
async fn app(
    db: &TestDb,
    receiver: &Receiver,
    name: &str,
    hold: Hold,
    rollup_every: Option<Duration>,
) -> TestServer {
    let outbound = Outbound::new(vec![endpoint(name, &receiver.url())], fast_retries());
    TestServer::start(db.pool.clone(), |settings| {
        let mut journal = settings.journal.clone();
        journal.seal_after = Duration::from_millis(50);
        linktrack::server::AppSettings {
            journal,
            server: linktrack::server::state::ServerSettings {
                trust_forwarded_for: true,
                ..settings.server
            },
            rollup_every,
            rollup: RollupOptions {
                verdicts: Arc::new(VerdictRules {
                    settle: hold.settle,
                    ..VerdictRules::default()
                }),
                ..RollupOptions::default()
            },
            outbound: outbound.holding(hold),
            ..settings
        }
    })
    .await
}

/// A unique endpoint name: tests share one metrics recorder.
fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

/// Follow `token` from `ip` (a browser's user agent).
async fn click(base: &str, token: Token, ip: &str) {
    let r = http()
        .get(format!("{base}/c/{token}"))
        .header("x-forwarded-for", ip)
        .send()
        .await
        .unwrap();
    assert!(r.status().as_u16() < 400, "{}", r.status());
}

/// The outbox row of the event on `token` as first seen, once queued:
/// (held, not due yet, payload).
async fn queued(db: &TestDb, token: Token) -> (i8, bool, Value) {
    let what = format!("the outbox row for {token}");
    eventually(PATIENCE, &what, || async {
        let rows: Vec<(i8, i64, String)> = sqlx::query_as(
            "SELECT held, CAST(next_attempt_at > NOW(3) AS SIGNED), payload FROM outbox",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        let queued = rows.len();
        for (held, waiting, payload) in rows {
            let body: Value = serde_json::from_str(&payload).unwrap();
            if body["data"]["token"] == token.to_string().as_str() {
                return Ok((held, waiting != 0, body));
            }
        }
        Err(format!("{queued} rows queued, none for it"))
    })
    .await
}

/// What the receiver got for the event on `token`.
fn deliveries_of(receiver: &Receiver, token: Token) -> Vec<Delivery> {
    receiver
        .deliveries()
        .into_iter()
        .filter(|d| d.body["data"]["token"] == token.to_string().as_str())
        .collect()
}

/// Wait until the event on `token` was acknowledged; every delivery of it.
async fn delivered(receiver: &Receiver, token: Token) -> Vec<Delivery> {
    let what = format!("{token} delivered");
    eventually(PATIENCE, &what, || async {
        let seen = deliveries_of(receiver, token);
        if seen.iter().any(|d| d.status == 200) {
            Ok(seen)
        } else {
            Err(receiver.deliveries())
        }
    })
    .await
}

/// `body` without its `bot` object.
fn without_bot(body: &Value) -> Value {
    let mut body = body.clone();
    body["data"].as_object_mut().unwrap().remove("bot");
    body
}

/// The stored verdict of the event on `token`.
async fn stored_verdict(db: &TestDb, token: Token) -> Option<(i8, Option<String>)> {
    sqlx::query_as("SELECT bot, NULLIF(bot_reason, '') FROM events WHERE uuid = ?")
        .bind(token.as_bytes().to_vec())
        .fetch_optional(&db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_near_the_honeypot_goes_out_once_settled_as_a_bot() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let letter = letter(&db, 11).await;
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap(), 0, 200).await;
    let hold = Hold {
        settle: Duration::from_secs(3),
        grace: Duration::from_secs(120),
    };
    let app = app(
        &db,
        &receiver,
        &unique("held"),
        hold,
        Some(Duration::from_millis(250)),
    )
    .await;

    // A scanner follows the invisible link, then a "person" (another
    // address, a browser) clicks a real link of the same letter.
    click(&app.base, letter.honeypot, SCANNER).await;
    click(&app.base, letter.clicks[0], PERSON).await;

    // Queued held, with its first verdict (a person's), not due: nothing
    // of it was sent.
    let (held, waiting, first) = queued(&db, letter.clicks[0]).await;
    assert_eq!(held, 1, "{first}");
    assert!(waiting, "a held row is not due before its safety net");
    assert_eq!(
        first["data"]["bot"],
        json!({"verdict": false, "reasons": [], "settled": false})
    );
    assert!(deliveries_of(&receiver, letter.clicks[0]).is_empty());

    // The settle pass releases it with the settled verdict: every delivery
    // of it (there was no unsettled one) says bot, honeypot_window, settled.
    let sent = delivered(&receiver, letter.clicks[0]).await;
    for delivery in &sent {
        let bot = &delivery.body["data"]["bot"];
        assert_eq!(bot["verdict"], true, "{bot}");
        assert_eq!(bot["reasons"], json!(["honeypot_window"]), "{bot}");
        assert_eq!(bot["settled"], true, "{bot}");
        assert_eq!(
            without_bot(&delivery.body),
            without_bot(&first),
            "everything but the verdict as queued"
        );
    }
    assert_eq!(
        stored_verdict(&db, letter.clicks[0]).await,
        Some((1, Some("honeypot_window".into()))),
        "the verdict sent is the verdict stored"
    );
    // The honeypot's own click waited too, and says why it is a bot.
    let trap = delivered(&receiver, letter.honeypot).await;
    assert_eq!(
        trap[0].body["data"]["bot"],
        json!({"verdict": true, "reasons": ["honeypot"], "settled": true})
    );
    receiver.assert_all_verified();
    app.stop().await;
    receiver.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_settle_0_a_click_goes_at_once_with_its_first_verdict() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let letter = letter(&db, 12).await;
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap(), 0, 200).await;
    let app = app(
        &db,
        &receiver,
        &unique("unheld"),
        Hold::until_settled(Duration::ZERO),
        Some(Duration::from_millis(250)),
    )
    .await;

    click(&app.base, letter.honeypot, SCANNER).await;
    click(&app.base, letter.clicks[0], PERSON).await;
    let sent = delivered(&receiver, letter.clicks[0]).await;
    // Nothing held it: the first verdict, a person's, not settled.
    for delivery in &sent {
        assert_eq!(
            delivery.body["data"]["bot"],
            json!({"verdict": false, "reasons": [], "settled": false})
        );
    }
    // The trade-off: the rollup revises it afterwards; the receiver was told
    // the verdict might change.
    eventually_eq(
        PATIENCE,
        "the stored verdict revised",
        Some((1, Some("honeypot_window".into()))),
        || stored_verdict(&db, letter.clicks[0]),
    )
    .await;
    assert_eq!(
        deliveries_of(&receiver, letter.clicks[0]).len(),
        sent.len(),
        "a revised verdict is not sent again"
    );
    app.stop().await;
    receiver.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_click_no_rollup_settles_goes_after_the_safety_net_unsettled() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let letter = letter(&db, 13).await;
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap(), 0, 200).await;
    let name = unique("net");
    let hold = Hold {
        settle: Duration::from_secs(2),
        grace: Duration::from_secs(1),
    };
    // No rollup runs here.
    let app = app(&db, &receiver, &name, hold, None).await;

    click(&app.base, letter.clicks[1], PERSON).await;
    let (held, waiting, first) = queued(&db, letter.clicks[1]).await;
    assert_eq!(held, 1, "{first}");
    assert!(waiting);
    assert!(deliveries_of(&receiver, letter.clicks[1]).is_empty());

    let sent = delivered(&receiver, letter.clicks[1]).await;
    for delivery in &sent {
        assert_eq!(
            delivery.body, first,
            "sent as queued: first verdict, unsettled"
        );
        assert_eq!(delivery.body["data"]["bot"]["settled"], false);
    }
    let unsettled = metric(&app.admin, "linktrack_outbound_unsettled_total", &name, "").await;
    assert_eq!(unsettled, Some(1.0));
    app.stop().await;
    receiver.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsubscribe_is_never_held() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let letter = letter(&db, 14).await;
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap(), 0, 200).await;
    // Held for a minute at least: nothing but the unsubscribe can arrive
    // during this test.
    let hold = Hold {
        settle: Duration::from_secs(60),
        grace: Duration::from_secs(600),
    };
    let app = app(
        &db,
        &receiver,
        &unique("unsub"),
        hold,
        Some(Duration::from_millis(250)),
    )
    .await;

    let http = http();
    let r = http
        .get(format!("{}/o/{}.gif", app.base, letter.pixel))
        .header("x-forwarded-for", PERSON)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http
        .post(format!("{}/u/{}", app.base, letter.unsubscribe))
        .header("x-forwarded-for", PERSON)
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());

    let sent = delivered(&receiver, letter.unsubscribe).await;
    assert_eq!(sent[0].body["type"], "email.unsubscribed");
    assert_eq!(sent[0].body["data"]["bot"]["settled"], true);
    // The open of the same letter waits for its verdict.
    let (held, waiting, open) = queued(&db, letter.pixel).await;
    assert_eq!((held, waiting), (1, true), "{open}");
    assert_eq!(open["data"]["bot"]["settled"], false);
    assert!(deliveries_of(&receiver, letter.pixel).is_empty());
    app.stop().await;
    receiver.stop();
}
