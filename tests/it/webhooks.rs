//! Events out over real sockets: a real HTTP receiver (axum on port 0) that
//! verifies every delivery with the reference `standardwebhooks` library,
//! the real server (in-process, or the binary for `kill -9`), real MariaDB.

use crate::common::wait::{eventually, PATIENCE};
use crate::common::webhooks::{
    endpoint, fast_retries, hit_everything, letter, metric, Delivery, Receiver, SECRET,
};
use crate::common::{days_ago, linktrack, TestDb, TestServer};
use linktrack::outbound::{Endpoint, Outbound, RetryPolicy};
use std::collections::BTreeSet;
use std::time::Duration;

async fn app_with(db: &TestDb, endpoints: Vec<Endpoint>, policy: RetryPolicy) -> TestServer {
    TestServer::start(db.pool.clone(), |settings| {
        let mut journal = settings.journal.clone();
        journal.seal_after = Duration::from_millis(50);
        linktrack::server::AppSettings {
            journal,
            outbound: Outbound::new(endpoints, policy),
            ..settings
        }
    })
    .await
}

/// A unique endpoint name: tests share one metrics recorder.
fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_is_signed_and_a_503_gets_the_same_id_until_200() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let letter = letter(&db, 7).await;
    // The first three deliveries are refused with 503.
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap(), 3, 503).await;
    let app = app_with(
        &db,
        vec![endpoint("default", &receiver.url())],
        fast_retries(),
    )
    .await;

    hit_everything(&app.base, &letter).await;
    let acknowledged = receiver.wait_for(4, PATIENCE).await;
    receiver.assert_all_verified();

    let deliveries = receiver.deliveries();
    let refused: Vec<&Delivery> = deliveries.iter().filter(|d| d.status == 503).collect();
    assert_eq!(refused.len(), 3);
    for delivery in &refused {
        assert!(
            acknowledged.contains(&delivery.id),
            "refused {} was sent again with the same webhook-id until acknowledged",
            delivery.id
        );
    }
    // The webhook-id is the event's own id, and every type arrived once acknowledged.
    let mut types = BTreeSet::new();
    for delivery in deliveries.iter().filter(|d| d.status == 200) {
        assert_eq!(delivery.body["data"]["event_id"], delivery.id.as_str());
        types.insert(delivery.body["type"].as_str().unwrap().to_owned());
        assert_eq!(delivery.body["data"]["mailing_id"], "spring");
        assert_eq!(delivery.body["data"]["letter_id"], 7);
        assert_eq!(delivery.body["data"]["email"], "r7@example.com");
        assert_eq!(delivery.body["data"]["tags"], serde_json::json!(["ruby"]));
        assert_eq!(delivery.body["data"]["bot"]["verdict"], false);
    }
    assert_eq!(
        types,
        ["email.clicked", "email.opened", "email.unsubscribed"]
            .map(String::from)
            .into()
    );
    let click = deliveries
        .iter()
        .find(|d| d.body["data"]["position"] == 1)
        .expect("the first link's click");
    assert_eq!(click.body["data"]["url"], "https://example.com/a?x=1&y=2");
    assert_eq!(
        click.body["data"]["token"],
        letter.clicks[0].to_string().as_str()
    );
    // Acknowledged events leave the outbox. The sender deletes them after it
    // reads the 200, so the receiver can see the last one before the delete.
    outbox_drained(&db).await;
    app.stop().await;
    receiver.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_made_while_the_receiver_is_down_survive_a_kill_9_and_arrive() {
    use crate::common::{down_socket, serve_command, Serving};
    let db = TestDb::with_days_since(days_ago(1)).await;
    let letters = [letter(&db, 1).await, letter(&db, 2).await];
    let (receiver_socket, receiver_addr) = down_socket(); // nothing listens there yet
    let hook = format!("http://{receiver_addr}/hook");
    let env = [
        ("LINKTRACK_WEBHOOK_URL", hook.as_str()),
        ("LINKTRACK_WEBHOOK_SECRET", SECRET),
        // The receiver is on loopback: allowed explicitly (issue 43).
        ("LINKTRACK_OUTBOUND_ALLOW_PRIVATE", "127.0.0.0/8"),
        ("LINKTRACK_WEBHOOK_TIMEOUT_MS", "1000"),
        ("LINKTRACK_OUTBOUND_RETRY_BASE_MS", "100"),
        ("LINKTRACK_OUTBOUND_RETRY_MAX_SECS", "1"),
        // This server runs no rollup (`--rollup-every 0`): hold nothing, or
        // the clicks and opens would wait for the safety net (held events
        // are tests/it/held_events.rs).
        ("LINKTRACK_VERDICT_SETTLE_SECS", "0"),
    ];
    let journal = tempfile::tempdir().unwrap();
    let mut server = Serving::spawn(serve_command(&db, journal.path(), &env)).await;
    let base = server.base();

    // The first letter's events reach the outbox and fail against the
    // receiver that is down...
    hit_everything(&base, &letters[0]).await;
    eventually(PATIENCE, "a delivery attempted", || async {
        match count(&db, "SELECT COUNT(*) FROM outbox WHERE attempts > 0").await {
            0 => Err("no outbox row has an attempt"),
            _ => Ok(()),
        }
    })
    .await;
    // ...the second letter's are answered, then the server dies at once,
    // most of them in the journal only.
    hit_everything(&base, &letters[1]).await;
    server.child.kill().unwrap(); // SIGKILL: no flush, no clean stop
    server.child.wait().unwrap();

    let receiver = Receiver::on(receiver_socket.listen(1024).unwrap(), 0, 200);
    let mut restarted = Serving::spawn(serve_command(&db, journal.path(), &env)).await;
    let acknowledged = receiver.wait_for(8, PATIENCE).await;
    receiver.assert_all_verified();
    let stored: Vec<Vec<u8>> = sqlx::query_scalar("SELECT event_id FROM events")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored.len(), 8, "four events per letter");
    let stored: BTreeSet<String> = stored.iter().map(hex::encode).collect();
    assert_eq!(acknowledged, stored, "every stored event arrived");
    restarted.terminate().await;
    receiver.stop();
}

/// Wait until the outbox is empty.
async fn outbox_drained(db: &TestDb) {
    eventually(PATIENCE, "the outbox drained", || async {
        match count(db, "SELECT COUNT(*) FROM outbox").await {
            0 => Ok(()),
            left => Err(format!("{left} rows left")),
        }
    })
    .await;
}

/// Wait until `/metrics`' `metric` for `endpoint` satisfies `ok`; its value.
async fn wait_for_metric(admin: &str, name: &str, endpoint: &str, ok: impl Fn(f64) -> bool) -> f64 {
    eventually(PATIENCE, &format!("{name} for {endpoint}"), || async {
        match metric(admin, name, endpoint, "").await {
            Some(value) if ok(value) => Ok(value),
            seen => Err(seen),
        }
    })
    .await
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&db.pool).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lag_metric_grows_while_the_receiver_is_down_and_falls_to_zero() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let letter = letter(&db, 3).await;
    let (receiver_socket, receiver_addr) = crate::common::down_socket(); // down for now
    let name = unique("lag");
    let hook = format!("http://{receiver_addr}/hook");
    let app = app_with(&db, vec![endpoint(&name, &hook)], fast_retries()).await;

    hit_everything(&app.base, &letter).await;
    let lag = wait_for_metric(&app.admin, "linktrack_outbound_lag_seconds", &name, |v| {
        v >= 1.0
    })
    .await;
    assert!(lag >= 1.0);
    let queued =
        wait_for_metric(&app.admin, "linktrack_outbound_queued", &name, |v| v == 4.0).await;
    assert_eq!(queued, 4.0);
    let retries = metric(
        &app.admin,
        "linktrack_outbound_deliveries_total",
        &name,
        "outcome=\"retry\"",
    )
    .await
    .unwrap_or(0.0);
    assert!(retries >= 1.0, "failed attempts are counted: {retries}");
    // `webhooks list` shows the backlog too (the endpoint is not configured
    // for the command: it is listed as such).
    let listed = linktrack(&db, &["webhooks", "list"]);
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success(), "{listed:?}");
    let line = stdout
        .lines()
        .find(|line| line.starts_with(&name))
        .unwrap_or_else(|| panic!("{name} in {stdout}"));
    assert!(line.contains("\t4\t"), "{line}");

    let receiver = Receiver::on(receiver_socket.listen(1024).unwrap(), 0, 200);
    receiver.wait_for(4, PATIENCE).await;
    receiver.assert_all_verified();
    wait_for_metric(&app.admin, "linktrack_outbound_lag_seconds", &name, |v| {
        v == 0.0
    })
    .await;
    wait_for_metric(&app.admin, "linktrack_outbound_queued", &name, |v| v == 0.0).await;
    app.stop().await;
    receiver.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_events_become_dead_letters_and_replay_sends_them_again() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let letter = letter(&db, 4).await;
    // 410 Gone: permanent, so each of the four events is dead-lettered at once.
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap(), 4, 410).await;
    let name = unique("dead");
    let app = app_with(&db, vec![endpoint(&name, &receiver.url())], fast_retries()).await;

    hit_everything(&app.base, &letter).await;
    wait_for_metric(&app.admin, "linktrack_outbound_dead_letters", &name, |v| {
        v == 4.0
    })
    .await;
    assert_eq!(count(&db, "SELECT COUNT(*) FROM outbox").await, 0);
    let dead = metric(
        &app.admin,
        "linktrack_outbound_deliveries_total",
        &name,
        "outcome=\"dead\"",
    )
    .await;
    assert_eq!(dead, Some(4.0));
    let reason: String = sqlx::query_scalar("SELECT MIN(reason) FROM outbox_dead")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(reason.contains("410"), "{reason}");
    assert!(receiver.acknowledged().is_empty());

    // Events since yesterday: all four go back and are delivered.
    let since = days_ago(1).to_string();
    let replayed = linktrack(
        &db,
        &["webhooks", "replay", "--endpoint", &name, "--since", &since],
    );
    assert!(replayed.status.success(), "{replayed:?}");
    assert!(
        String::from_utf8_lossy(&replayed.stdout).starts_with("4 dead letters"),
        "{replayed:?}"
    );
    let acknowledged = receiver.wait_for(4, PATIENCE).await;
    receiver.assert_all_verified();
    let refused: BTreeSet<String> = receiver
        .deliveries()
        .into_iter()
        .filter(|d| d.status == 410)
        .map(|d| d.id)
        .collect();
    assert_eq!(acknowledged, refused, "the same events, with the same ids");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM outbox_dead").await, 0);
    // A bad --since is named.
    let bad = linktrack(
        &db,
        &[
            "webhooks",
            "replay",
            "--endpoint",
            &name,
            "--since",
            "yesterday",
        ],
    );
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--since \"yesterday\""));
    app.stop().await;
    receiver.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_test_sends_one_signed_event_and_reports_the_answer() {
    let db = TestDb::new().await;
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap(), 0, 200).await;
    let url = receiver.url();
    let run = |secret: &str| {
        linktrack(
            &db,
            &[
                "webhooks",
                "test",
                "--webhook-url",
                &url,
                "--webhook-secret",
                secret,
                // The receiver is on loopback: allowed explicitly.
                "--outbound-allow-private",
                "127.0.0.1",
            ],
        )
    };
    let tested = tokio::task::block_in_place(|| run(SECRET));
    assert!(tested.status.success(), "{tested:?}");
    assert!(String::from_utf8_lossy(&tested.stdout).contains("default: Delivered"));
    receiver.assert_all_verified();
    let deliveries = receiver.deliveries();
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].body["type"], "webhook.test");
    // A secret the receiver does not know: refused (401), exit status 1.
    let other = linktrack::outbound::signature::Secret::generate();
    let refused = tokio::task::block_in_place(|| run(&other));
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stdout).contains("401"),
        "{refused:?}"
    );
    // A secret that is not base64 is refused before anything is sent.
    let bad = tokio::task::block_in_place(|| run("whsec_***"));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("LINKTRACK_WEBHOOK_SECRET"));
    receiver.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_lacking_an_endpoint_another_server_has_says_so() {
    let db = TestDb::new().await;
    let name = unique("crm");
    // Nothing listens on port 9: no event is made, nothing is sent.
    let first = app_with(
        &db,
        vec![endpoint(&name, "http://127.0.0.1:9/hook")],
        fast_retries(),
    )
    .await;
    let description: String = eventually(
        PATIENCE,
        "the first server's endpoint registered",
        || async {
            let description: Option<String> =
                sqlx::query_scalar("SELECT description FROM outbound_endpoints WHERE name = ?")
                    .bind(&name)
                    .fetch_optional(&db.pool)
                    .await
                    .unwrap();
            description.ok_or("nothing registered")
        },
    )
    .await;
    assert_eq!(description, "http://127.0.0.1:9/hook all");
    // A second server of the same database with another endpoint but not
    // this one counts one difference (and logs it); only this test makes
    // servers that differ.
    let other = unique("pipe");
    let second = app_with(
        &db,
        vec![endpoint(&other, "http://127.0.0.1:9/other")],
        fast_retries(),
    )
    .await;
    eventually(PATIENCE, "one endpoint difference counted", || async {
        let text = crate::common::metrics_text(&second.admin).await;
        let differing = text
            .lines()
            .filter(|l| l.starts_with("linktrack_outbound_endpoint_differences{"))
            .any(|l| l.ends_with(" 1"));
        if differing {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await;
    let servers: i64 = count(&db, "SELECT COUNT(DISTINCT server) FROM outbound_endpoints").await;
    assert_eq!(servers, 2, "each server registered its own endpoints");
    second.stop().await;
    first.stop().await;
}

/// The event ids a batch delivery carries, in order.
fn batch_events(delivery: &Delivery) -> Vec<String> {
    assert_eq!(delivery.body["type"], "batch", "{:?}", delivery.body);
    delivery.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["data"]["event_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_signed_and_a_503_gets_the_same_batch_and_id_until_200() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let letter = letter(&db, 8).await;
    // The first delivery is refused with 503.
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap(), 1, 503).await;
    let batched = Endpoint {
        batch: 10,
        ..endpoint(&unique("batch"), &receiver.url())
    };
    let app = app_with(&db, vec![batched], fast_retries()).await;
    hit_everything(&app.base, &letter).await;

    // Every event arrives in an acknowledged batch (the journal may seal
    // them into several segments, hence several batches).
    let acknowledged: BTreeSet<String> =
        eventually(PATIENCE, "4 events in acknowledged batches", || async {
            let events: BTreeSet<String> = receiver
                .deliveries()
                .iter()
                .filter(|d| d.status == 200)
                .flat_map(batch_events)
                .collect();
            if events.len() >= 4 {
                Ok(events)
            } else {
                Err(receiver.deliveries())
            }
        })
        .await;
    receiver.assert_all_verified();
    let stored: Vec<Vec<u8>> = sqlx::query_scalar("SELECT event_id FROM events")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let stored: BTreeSet<String> = stored.iter().map(hex::encode).collect();
    assert_eq!(acknowledged, stored);
    // The refused batch came again whole, under the same webhook-id.
    let deliveries = receiver.deliveries();
    let refused = deliveries.iter().find(|d| d.status == 503).unwrap();
    assert!(
        refused.id.starts_with("batch_") && refused.id.len() == 38,
        "{}",
        refused.id
    );
    let retried = deliveries
        .iter()
        .find(|d| d.status == 200 && d.id == refused.id)
        .expect("the refused batch's id acknowledged");
    assert_eq!(batch_events(retried), batch_events(refused));
    app.stop().await;
    receiver.stop();
}

/// Issue 43, item 4: a webhook to any spelling of a loopback address, or a
/// name resolving there, is refused at send without the receiver seeing a
/// byte, and delivered once loopback is allowed explicitly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_to_private_addresses_are_refused_in_every_spelling_unless_allowed() {
    use linktrack::destinations::Destinations;
    use linktrack::outbound::signature::Secret;
    use linktrack::outbound::webhook::{Outcome, WebhookSink};
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap(), 0, 200).await;
    let port = receiver.addr.port();
    let spellings = [
        format!("http://2130706433:{port}/hook"),
        format!("http://0x7f000001:{port}/hook"),
        format!("http://0177.0.0.1:{port}/hook"),
        format!("http://127.1:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        format!("http://localhost:{port}/hook"),
        format!("http://127.0.0.1:{port}/hook"),
    ];
    let sink = |url: &str, destinations: Destinations| {
        WebhookSink::new(
            url.parse().unwrap(),
            Secret::parse(SECRET).unwrap(),
            Duration::from_secs(2),
            1,
            destinations,
        )
        .unwrap()
    };
    for url in &spellings {
        let outcome = sink(url, Destinations::public_only())
            .send("msg_refused", "{}")
            .await;
        let Outcome::Retry(why) = &outcome else {
            panic!("{url}: {outcome:?}");
        };
        assert!(
            why.contains("public address") || why.contains("non-public"),
            "{url}: {why}"
        );
    }
    assert_eq!(
        receiver.deliveries().len(),
        0,
        "nothing reached the receiver"
    );
    for url in &spellings {
        let outcome = sink(url, Destinations::allowing_loopback())
            .send(
                &format!("msg_{}", receiver.deliveries().len()),
                "{\"type\":\"webhook.test\"}",
            )
            .await;
        assert_eq!(outcome, Outcome::Delivered, "{url}");
    }
    assert_eq!(receiver.deliveries().len(), spellings.len());

    // At start and in the commands: refused, naming the fix.
    let db = TestDb::new().await;
    let url = format!("http://2130706433:{port}/hook");
    let tested = tokio::task::block_in_place(|| {
        linktrack(
            &db,
            &[
                "webhooks",
                "test",
                "--webhook-url",
                &url,
                "--webhook-secret",
                SECRET,
            ],
        )
    });
    assert!(!tested.status.success(), "{tested:?}");
    let said = String::from_utf8_lossy(&tested.stderr);
    assert!(said.contains("127.0.0.1 is not a public address"), "{said}");
    assert!(said.contains("--outbound-allow-private"), "{said}");
    let served = tokio::task::block_in_place(|| {
        std::process::Command::new(crate::common::linktrack_binary())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
            ])
            .env("DATABASE_URL", &db.url)
            .env(
                "LINKTRACK_WEBHOOK_URL",
                format!("http://localhost:{port}/hook"),
            )
            .env("LINKTRACK_WEBHOOK_SECRET", SECRET)
            .env_remove("LINKTRACK_OUTBOUND_ALLOW_PRIVATE")
            .output()
            .unwrap()
    });
    assert!(!served.status.success(), "{served:?}");
    let said = String::from_utf8_lossy(&served.stderr);
    assert!(said.contains("localhost resolves to"), "{said}");
    assert_eq!(
        receiver.deliveries().len(),
        spellings.len(),
        "nothing more sent"
    );
    receiver.stop();
}
