//! Events out to a real RabbitMQ (127.0.0.1:5672, guest/guest; started by
//! scripts/prepare.d/50-rabbitmq.sh): a queue bound to the exchange gets
//! every event, routed by type, and the outbox empties only on confirms.

use crate::common::amqp::{bound_queue, next_message, BoundQueue, BROKER};
use crate::common::wait::{eventually, PATIENCE};
use crate::common::webhooks::{fast_retries, hit_everything, letter};
use crate::common::{days_ago, linktrack, TestDb, TestServer};
use lapin::options::ExchangeDeleteOptions;
use linktrack::outbound::{Endpoint, Outbound, Target};
use std::collections::BTreeMap;
use std::time::Duration;

fn amqp_endpoint(exchange: &str) -> Endpoint {
    Endpoint {
        name: format!("amqp-{exchange}"),
        target: Target::Amqp {
            url: BROKER.into(),
            exchange: exchange.into(),
        },
        types: None,
        mailings: None,
        concurrency: 1,
        batch: 1,
        timeout: Duration::from_secs(5),
        destinations: linktrack::destinations::Destinations::public_only(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_bound_to_the_exchange_gets_every_event_by_type() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let letter = letter(&db, 5).await;
    // Everything but image loads (there are none here anyway) and
    // unsubscribes. The unroutable one must be the letter's last event: a
    // letter's later events are held behind its failed one (order per letter).
    let BoundQueue {
        connection,
        channel,
        exchange,
        queue,
    } = bound_queue(&["email.clicked", "email.opened"]).await;

    let endpoint = amqp_endpoint(&exchange);
    let name = endpoint.name.clone();
    // Unsubscribes go to this exchange too, but no queue takes them: they
    // must stay queued (returned as unroutable), not vanish.
    let app = TestServer::start(db.pool.clone(), |settings| {
        let mut journal = settings.journal.clone();
        journal.seal_after = Duration::from_millis(50);
        linktrack::server::AppSettings {
            journal,
            outbound: Outbound::new(vec![endpoint], fast_retries()),
            ..settings
        }
    })
    .await;
    hit_everything(&app.base, &letter).await;

    let mut got: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    while got.len() < 3 {
        let what = format!("a message after {:?}", got.keys());
        let message = next_message(&channel, &queue, &what).await;
        let delivery = &message.delivery;
        let body: serde_json::Value = serde_json::from_slice(&delivery.data).unwrap();
        assert_eq!(
            body["type"],
            delivery.routing_key.as_str(),
            "routing key = type"
        );
        let id = delivery
            .properties
            .message_id()
            .as_ref()
            .map(|id| id.to_string())
            .unwrap();
        assert_eq!(
            body["data"]["event_id"],
            id.as_str(),
            "message_id = event id"
        );
        assert_eq!(*delivery.properties.delivery_mode(), Some(2), "persistent");
        got.insert(id, body);
    }
    let types: Vec<&str> = got.values().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(
        types.iter().filter(|t| **t == "email.clicked").count(),
        2,
        "{types:?}"
    );
    assert!(types.contains(&"email.opened"));
    // The unsubscribe was returned unroutable and waits in the outbox, retried.
    let waiting = eventually(PATIENCE, "the unsubscribe tried and waiting", || async {
        let waiting: Vec<(String, u32, Option<String>)> = sqlx::query_as(
            "SELECT event_type, attempts, last_error FROM outbox WHERE endpoint = ?",
        )
        .bind(&name)
        .fetch_all(&db.pool)
        .await
        .unwrap();
        match waiting.as_slice() {
            [(_, attempts, _)] if *attempts > 0 => Ok(waiting),
            _ => Err(waiting),
        }
    })
    .await;
    assert_eq!(waiting[0].0, "email.unsubscribed");
    assert!(
        waiting[0].2.as_deref().unwrap_or("").contains("no queue"),
        "{waiting:?}"
    );
    app.stop().await;
    // `webhooks test` publishes too (and says the test event found no queue).
    let tested = linktrack(
        &db,
        &[
            "webhooks",
            "test",
            "--endpoint",
            "amqp",
            "--amqp-url",
            BROKER,
            "--amqp-exchange",
            &exchange,
        ],
    );
    let said = String::from_utf8_lossy(&tested.stdout);
    assert!(said.contains("no queue"), "{tested:?}");
    channel
        .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
        .await
        .unwrap();
    let _ = connection.close(0, "done".into()).await;
}
