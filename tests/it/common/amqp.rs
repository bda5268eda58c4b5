//! RabbitMQ on 127.0.0.1:5672 (scripts/prepare.d/50-rabbitmq.sh starts it)
//! for the tests that read what linktrack publishes.

use crate::common::wait::{eventually, PATIENCE};
use lapin::message::BasicGetMessage;
use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};

pub const BROKER: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// A test's own durable topic exchange, and an exclusive queue bound to it
/// for some routing keys.
pub struct BoundQueue {
    pub connection: Connection,
    pub channel: Channel,
    pub exchange: String,
    pub queue: String,
}

/// A new exchange (a random name) with a queue that takes `keys`.
pub async fn bound_queue(keys: &[&str]) -> BoundQueue {
    let exchange = format!("linktrack.test.{:08x}", rand::random::<u32>());
    let connection = Connection::connect(BROKER, ConnectionProperties::default())
        .await
        .expect("RabbitMQ on 127.0.0.1:5672 (scripts/prepare.d/50-rabbitmq.sh starts it)");
    let channel = connection.create_channel().await.unwrap();
    channel
        .exchange_declare(
            exchange.as_str().into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let queue = channel
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let queue = queue.name().as_str().to_owned();
    for key in keys {
        channel
            .queue_bind(
                queue.as_str().into(),
                exchange.as_str().into(),
                (*key).into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }
    BoundQueue {
        connection,
        channel,
        exchange,
        queue,
    }
}

/// The next message on `queue` (taken, no ack), waiting for it as long as
/// [`PATIENCE`]; `what` names it in the failure.
pub async fn next_message(channel: &Channel, queue: &str, what: &str) -> BasicGetMessage {
    eventually(PATIENCE, what, || async {
        channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get on the test's own queue")
            .ok_or("the queue is empty")
    })
    .await
}
