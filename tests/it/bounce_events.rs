//! What `bounces ingest` decides goes out and is counted (issue 40): a
//! signed `email.bounced` / `email.complained` through the outbox to a
//! real webhook receiver (port 0) and a real RabbitMQ, once per decision
//! (a second delivery of the same bounce queues nothing), only to the
//! endpoints whose filter wants it; and the mailing's bounce figures in
//! the stats API and on the dashboard, checked against what was ingested.

use crate::bounces::{addressed, build_letters, Built};
use crate::common::stats_api::TOKEN;
use crate::common::wait::{eventually_eq, PATIENCE};
use crate::common::webhooks::{endpoint, fast_retries, Receiver, SECRET};
use crate::common::{client, linktrack, TestDb, TestServer};
use linktrack::outbound::{Endpoint, Outbound};
use std::path::Path;

/// Ingest `text` (one message) with `extra` flags; the exit status and
/// the line.
fn ingest(db: &TestDb, dir: &Path, name: &str, text: &str, extra: &[&str]) -> (i32, String) {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let path = path.display().to_string();
    let mut args = vec!["bounces", "ingest"];
    args.extend_from_slice(extra);
    args.push(&path);
    let out = linktrack(db, &args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), stdout)
}

async fn queued(db: &TestDb, endpoint: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT event_type FROM outbox WHERE endpoint = ? ORDER BY id")
        .bind(endpoint)
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

async fn mailing_id(db: &TestDb) -> String {
    sqlx::query_scalar("SELECT mailing_id FROM mailings LIMIT 1")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

async fn serve(db: &TestDb, endpoints: Vec<Endpoint>) -> TestServer {
    TestServer::start(db.pool.clone(), |settings| linktrack::server::AppSettings {
        outbound: Outbound::new(endpoints, fast_retries()),
        api_token: Some(TOKEN.into()),
        ..settings
    })
    .await
}

/// A hard bounce (twice), a soft bounce and a complaint for three letters.
fn messages(letters: &[Built]) -> [(&'static str, String); 4] {
    let (hard, soft, complained) = (&letters[0], &letters[1], &letters[2]);
    [
        (
            "hard.eml",
            addressed("postfix-dsn-user-unknown.eml", hard, &hard.email, "ev-hard"),
        ),
        (
            "hard-again.eml",
            addressed("postfix-dsn-user-unknown.eml", hard, &hard.email, "ev-hard"),
        ),
        (
            "soft.eml",
            addressed("postfix-dsn-mailbox-full.eml", soft, &soft.email, "ev-soft"),
        ),
        (
            "arf.eml",
            addressed(
                "arf-abuse-redacted.eml",
                complained,
                "x@isp.example.net",
                "ev-arf",
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounce_events_reach_a_signed_webhook_once_and_only_where_filtered() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    let all = Receiver::start("127.0.0.1:0".parse().unwrap(), 1, 503).await;
    let complaints = Receiver::start("127.0.0.1:0".parse().unwrap(), 0, 200).await;
    let file = dir.path().join("webhooks.toml");
    std::fs::write(
        &file,
        format!(
            "[[endpoint]]\nname = \"all\"\nurl = \"{}\"\nsecret = \"{SECRET}\"\n\n\
             [[endpoint]]\nname = \"complaints\"\nurl = \"{}\"\nsecret = \"{SECRET}\"\n\
             types = [\"email.complained\"]\n",
            all.url(),
            complaints.url()
        ),
    )
    .unwrap();
    let file = file.display().to_string();
    let flags = [
        "--webhooks",
        file.as_str(),
        "--outbound-allow-private",
        "127.0.0.1/32",
    ];
    for (name, text) in messages(&letters) {
        let (code, out) = ingest(&db, dir.path(), name, &text, &flags);
        assert_eq!(code, 0, "{name}: {out}");
    }
    // Queued by the ingest itself (no server runs yet): one row per
    // decision, none for the second delivery; the filter holds.
    assert_eq!(
        queued(&db, "all").await,
        ["email.bounced", "email.bounced", "email.complained"]
    );
    assert_eq!(queued(&db, "complaints").await, ["email.complained"]);

    // A server with the same endpoints sends them, signed; the first
    // delivery is refused (503) and comes again under the same id.
    let only_complaints = Endpoint {
        types: Some(vec!["email.complained".into()]),
        ..endpoint("complaints", &complaints.url())
    };
    let app = serve(&db, vec![endpoint("all", &all.url()), only_complaints]).await;
    let ids = all.wait_for(3, PATIENCE).await;
    complaints.wait_for(1, PATIENCE).await;
    all.assert_all_verified();
    complaints.assert_all_verified();
    let refused: Vec<_> = all
        .deliveries()
        .into_iter()
        .filter(|d| d.status == 503)
        .collect();
    assert_eq!(refused.len(), 1);
    assert!(ids.contains(&refused[0].id), "retried under its id");

    let mailing = mailing_id(&db).await;
    let delivered: Vec<_> = all
        .deliveries()
        .into_iter()
        .filter(|d| d.status == 200)
        .collect();
    let hard = delivered
        .iter()
        .find(|d| d.body["data"]["bounce_type"] == "hard")
        .expect("the hard bounce");
    let data = &hard.body["data"];
    assert_eq!(hard.body["type"], "email.bounced");
    assert_eq!(data["event_id"], hard.id.as_str());
    assert_eq!(data["email"], letters[0].email.as_str());
    assert_eq!(data["letter_id"], letters[0].letter_id);
    assert_eq!(data["mailing_id"], mailing.as_str());
    assert_eq!(data["status"], "5.1.1");
    assert!(
        data["diagnostic"]
            .as_str()
            .unwrap()
            .contains("unknown user"),
        "{data}"
    );
    assert_eq!(
        (&data["action"], &data["suppressed"]),
        (&"suppressed".into(), &true.into())
    );
    let soft = delivered
        .iter()
        .find(|d| d.body["data"]["bounce_type"] == "soft")
        .expect("the soft bounce");
    assert_eq!(soft.body["data"]["status"], "4.2.2");
    assert_eq!(soft.body["data"]["action"], "counted");
    assert_eq!(soft.body["data"]["email"], letters[1].email.as_str());

    let got = complaints.deliveries();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].body["type"], "email.complained");
    assert_eq!(got[0].body["data"]["feedback_type"], "abuse");
    assert_eq!(got[0].body["data"]["email"], letters[2].email.as_str());
    assert!(
        delivered.iter().any(|d| d.id == got[0].id),
        "the same event, the same id, at both endpoints"
    );
    outbox_drained(&db).await;
    app.stop().await;
    all.stop();
    complaints.stop();
}

/// Wait until the outbox holds nothing more to send.
async fn outbox_drained(db: &TestDb) {
    eventually_eq(PATIENCE, "the outbox drained", 0, || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM outbox")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounce_events_are_published_to_rabbitmq_by_type() {
    use crate::common::amqp::{bound_queue, next_message, BoundQueue, BROKER};
    use lapin::options::ExchangeDeleteOptions;

    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    // The connection lives as long as the channel is read.
    let BoundQueue {
        connection: _connection,
        channel,
        exchange,
        queue,
    } = bound_queue(&["email.bounced", "email.complained"]).await;
    let flags = ["--amqp-url", BROKER, "--amqp-exchange", exchange.as_str()];
    for (name, text) in messages(&letters) {
        let (code, out) = ingest(&db, dir.path(), name, &text, &flags);
        assert_eq!(code, 0, "{name}: {out}");
    }
    assert_eq!(queued(&db, "amqp").await.len(), 3);
    let amqp = Endpoint {
        name: "amqp".into(),
        target: linktrack::outbound::Target::Amqp {
            url: BROKER.into(),
            exchange: exchange.clone(),
        },
        ..endpoint("amqp", "http://127.0.0.1:1/")
    };
    let app = serve(&db, vec![amqp]).await;
    let mut got = Vec::new();
    while got.len() < 3 {
        let what = format!("a message after {got:?}");
        let message = next_message(&channel, &queue, &what).await;
        let delivery = &message.delivery;
        let body: serde_json::Value = serde_json::from_slice(&delivery.data).unwrap();
        assert_eq!(body["type"], delivery.routing_key.as_str());
        let id = delivery
            .properties
            .message_id()
            .as_ref()
            .unwrap()
            .to_string();
        assert_eq!(body["data"]["event_id"], id.as_str());
        got.push(body);
    }
    let mut kinds: Vec<String> = got
        .iter()
        .map(|b| {
            let data = &b["data"];
            format!(
                "{} {}",
                b["type"].as_str().unwrap(),
                data["bounce_type"]
                    .as_str()
                    .or(data["feedback_type"].as_str())
                    .unwrap()
            )
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "email.bounced hard",
            "email.bounced soft",
            "email.complained abuse"
        ]
    );
    outbox_drained(&db).await;
    app.stop().await;
    channel
        .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounce_figures_in_the_stats_api_and_dashboard_are_what_was_ingested() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    let mailing = mailing_id(&db).await;
    let app = serve(&db, Vec::new()).await;
    let url = format!("{}/api/mailings/{mailing}/stats", app.base);
    let stats = || async {
        let response = client().get(&url).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let body: serde_json::Value =
            serde_json::from_str(&response.text().await.unwrap()).unwrap();
        body["bounces"].clone()
    };
    // Nothing delivered over SMTP yet: the rates are of the letters built.
    let before = stats().await;
    assert_eq!(before["rate_base"], "built");
    assert_eq!(before["base"], letters.len());
    assert_eq!(before["hard"], 0);

    // Four of the letters delivered; then a hard bounce (twice), a soft
    // bounce (two messages about the same letter: one letter), a policy
    // block and a complaint.
    let delivered: Vec<u64> = letters[..4].iter().map(|l| l.letter_id).collect();
    linktrack::store::deliveries::mark_delivered_now(
        &db.pool,
        &crate::common::mailing_id(&mailing),
        &delivered,
        "250 ok",
    )
    .await
    .unwrap();
    let mut sent = messages(&letters).to_vec();
    sent.push((
        "soft-again.eml",
        addressed(
            "postfix-dsn-mailbox-full.eml",
            &letters[1],
            &letters[1].email,
            "ev-soft-2",
        ),
    ));
    sent.push((
        "dmarc.eml",
        addressed(
            "postfix-dsn-dmarc.eml",
            &letters[3],
            &letters[3].email,
            "ev-dmarc",
        ),
    ));
    for (name, text) in &sent {
        let (code, out) = ingest(&db, dir.path(), name, text, &[]);
        assert_eq!(code, 0, "{name}: {out}");
    }
    let after = stats().await;
    let counts: Vec<u64> = ["delivered", "base", "hard", "soft", "policy", "complaints"]
        .iter()
        .map(|k| after[k].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [4, 4, 1, 1, 1, 1], "{after}");
    assert_eq!(after["rate_base"], "delivered");
    for rate in ["hard_rate", "soft_rate", "policy_rate", "complaint_rate"] {
        assert_eq!(after[rate], 0.25, "{rate}: {after}");
    }

    let page = client()
        .get(format!("{}/mailings/{mailing}", app.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    for id in ["hard-bounces", "soft-bounces", "complaints"] {
        let card = format!("<b id=\"{id}\">1 (25.00 %)</b>");
        assert!(html.contains(&card), "{card} not in the page");
    }
    assert!(html.contains("(of 4 letters delivered)"), "{html}");
    app.stop().await;
}
