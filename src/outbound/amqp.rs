//! Publishing to RabbitMQ (AMQP 0-9-1, lapin): the same payloads as the
//! webhooks, to a durable topic exchange with routing key = event type,
//! persistent, `message_id` = the event id. A row counts as delivered only
//! once the broker confirmed it (publisher confirms) and routed it to at
//! least one queue (`mandatory`: an exchange nothing is bound to returns the
//! message, and it is retried, then dead-lettered, instead of vanishing).

use super::webhook::Outcome;
use crate::error_report::chain;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use std::time::Duration;
use tokio::sync::Mutex;

/// One connection and confirm-mode channel, opened on first use and again
/// after any failure.
pub struct AmqpSink {
    url: String,
    exchange: String,
    timeout: Duration,
    open: Mutex<Option<(Connection, Channel)>>,
}

impl std::fmt::Debug for AmqpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it carries the password.
        f.debug_struct("AmqpSink")
            .field("exchange", &self.exchange)
            .finish()
    }
}

impl AmqpSink {
    pub fn new(url: String, exchange: String, timeout: Duration) -> AmqpSink {
        AmqpSink {
            url,
            exchange,
            timeout,
            open: Mutex::new(None),
        }
    }

    /// Publish `body` and wait for the broker's confirm, all within the timeout.
    pub async fn send(&self, event_type: &str, id: &str, body: &str) -> Outcome {
        let published =
            tokio::time::timeout(self.timeout, self.publish(event_type, id, body)).await;
        let outcome = match published {
            Ok(outcome) => outcome,
            Err(_) => Outcome::Retry(format!("no confirm within {:?}", self.timeout)),
        };
        if outcome != Outcome::Delivered {
            // Start over with a new connection: the old one may be half dead.
            *self.open.lock().await = None;
        }
        outcome
    }

    async fn publish(&self, event_type: &str, id: &str, body: &str) -> Outcome {
        let channel = match self.channel().await {
            Ok(channel) => channel,
            Err(err) => return Outcome::Retry(format!("AMQP: {}", chain(&err))),
        };
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_message_id(id.into())
            .with_type(event_type.into())
            .with_timestamp(u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(0));
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let confirm = match channel
            .basic_publish(
                self.exchange.as_str().into(),
                event_type.into(),
                options,
                body.as_bytes(),
                properties,
            )
            .await
        {
            Ok(confirm) => confirm.await,
            Err(err) => return Outcome::Retry(format!("AMQP publish: {}", chain(&err))),
        };
        match confirm {
            Ok(confirmation) if confirmation.is_ack() => match confirmation.take_message() {
                None => Outcome::Delivered,
                Some(returned) => Outcome::Retry(format!(
                    "AMQP: exchange {:?} routed {event_type:?} to no queue ({})",
                    self.exchange, returned.reply_text
                )),
            },
            Ok(_) => Outcome::Retry("AMQP: the broker refused the message (nack)".into()),
            Err(err) => Outcome::Retry(format!("AMQP confirm: {}", chain(&err))),
        }
    }

    /// The open channel, or a new connection, confirm-mode channel and
    /// durable topic exchange.
    async fn channel(&self) -> Result<Channel, lapin::Error> {
        let mut open = self.open.lock().await;
        if let Some((connection, channel)) = open.as_ref() {
            if connection.status().connected() && channel.status().connected() {
                return Ok(channel.clone());
            }
        }
        let connection = Connection::connect(&self.url, ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        channel
            .exchange_declare(
                self.exchange.as_str().into(),
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await?;
        *open = Some((connection, channel.clone()));
        Ok(channel)
    }
}
