//! Delivery of built messages to an MTA over SMTP (lettre's async
//! transport). Each MTA gets `connections` lanes, one SMTP connection each,
//! kept open across messages and replaced after `messages_per_connection`
//! (relays often cap messages per session). Temporary failures (4xx,
//! refused connections, timeouts) are retried with backoff; a permanent
//! rejection (5xx) of one recipient is that letter's outcome and does not
//! stop the job.

use lettre::address::Envelope;
use lettre::transport::smtp::{AsyncSmtpTransportBuilder, PoolConfig};
use lettre::{Address, AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Where and how to deliver.
#[derive(Debug, Clone)]
pub struct SmtpSettings {
    /// `smtp://host:port` (plain), `smtp://host:port?tls=required` (STARTTLS)
    /// or `smtps://host:port` (implicit TLS); user and password in the URL
    /// for AUTH.
    pub url: String,
    /// Connections to the MTA used in parallel.
    pub connections: u32,
    /// Messages sent over one connection before it is closed (QUIT) and a
    /// new one opened; `None`: no limit.
    pub messages_per_connection: Option<u32>,
    /// Attempts after the first for a temporary failure.
    pub retries: u32,
    /// The first retry's wait; each further one doubles it.
    pub backoff: Duration,
}

/// One letter's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The MTA accepted the message; its reply.
    Delivered(String),
    /// The MTA refused it for good (5xx); its reply.
    Rejected(String),
    /// Still failing temporarily after every retry: the job stops, and the
    /// letter stays undelivered for a re-run.
    Failed(String),
}

#[derive(Debug, thiserror::Error)]
pub enum SmtpError {
    #[error("--smtp {url}: {reason}")]
    Url { url: String, reason: String },
    #[error("envelope sender {0:?} is not an address")]
    Sender(String),
}

/// The SMTP connections to one MTA. Cheap to clone.
#[derive(Clone)]
pub struct Deliverer {
    lanes: Arc<Lanes>,
    settings: SmtpSettings,
    host: String,
    counters: Arc<super::DeliveryCounters>,
}

/// One connection's transport and how many messages it has carried.
struct Lane {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    sent: u32,
}

/// The idle lanes, and one permit per lane so a letter waits for a free
/// one (several letters may be in flight to the same MTA of a pool).
struct Lanes {
    builder: AsyncSmtpTransportBuilder,
    idle: Mutex<Vec<Lane>>,
    free: Semaphore,
}

impl Lanes {
    /// A transport whose pool holds a single connection: the lane's own.
    fn new_lane(&self) -> Lane {
        Lane {
            transport: self.builder.clone().build(),
            sent: 0,
        }
    }

    fn take(&self) -> Lane {
        let parked = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        parked.unwrap_or_else(|| self.new_lane())
    }

    fn put_back(&self, lane: Lane) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(lane);
        }
    }
}

impl Deliverer {
    /// `counters` gets this MTA's retries (the caller counts outcomes).
    pub fn new(
        settings: SmtpSettings,
        counters: Arc<super::DeliveryCounters>,
    ) -> Result<Deliverer, SmtpError> {
        let url_error = |reason: String| SmtpError::Url {
            url: settings.url.clone(),
            reason,
        };
        let parsed = reqwest::Url::parse(&settings.url).map_err(|e| url_error(e.to_string()))?;
        if !matches!(parsed.scheme(), "smtp" | "smtps") {
            return Err(url_error(format!(
                "unknown scheme {:?} (smtp:// or smtps://)",
                parsed.scheme()
            )));
        }
        if settings.messages_per_connection == Some(0) {
            return Err(url_error(
                "messages per connection must be at least 1".into(),
            ));
        }
        let host = format!(
            "{}:{}",
            parsed.host_str().unwrap_or_default(),
            parsed.port().unwrap_or(25)
        );
        let builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(&settings.url)
            .map_err(|e| url_error(e.to_string()))?
            .timeout(Some(Duration::from_secs(30)))
            .pool_config(PoolConfig::new().max_size(1));
        let connections = settings.connections.max(1) as usize;
        Ok(Deliverer {
            lanes: Arc::new(Lanes {
                builder,
                idle: Mutex::new(Vec::with_capacity(connections)),
                free: Semaphore::new(connections),
            }),
            settings,
            host,
            counters,
        })
    }

    /// Send over a free lane; a lane that has carried its quota of
    /// messages is dropped (its connection says QUIT) and a new one takes
    /// its place on the next send.
    async fn send_on_lane(
        &self,
        envelope: &Envelope,
        message: &[u8],
    ) -> Result<lettre::transport::smtp::response::Response, lettre::transport::smtp::Error> {
        // The semaphore lives as long as `self.lanes` and is never closed.
        let _permit = self.lanes.free.acquire().await;
        let mut lane = self.lanes.take();
        let result = lane.transport.send_raw(envelope, message).await;
        lane.sent += 1;
        let worn_out = self
            .settings
            .messages_per_connection
            .is_some_and(|limit| lane.sent >= limit);
        if !worn_out {
            self.lanes.put_back(lane);
        }
        result
    }

    /// `host:port` of the MTA, for messages.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Hand one message to the MTA, retrying temporary failures.
    pub async fn deliver(&self, sender: &Address, to: &str, message: &[u8]) -> Outcome {
        let recipient: Address = match to.parse() {
            Ok(address) => address,
            Err(e) => return Outcome::Rejected(format!("recipient {to:?}: {e}")),
        };
        let envelope = match Envelope::new(Some(sender.clone()), vec![recipient]) {
            Ok(envelope) => envelope,
            Err(e) => return Outcome::Rejected(format!("envelope: {e}")),
        };
        let mut wait = self.settings.backoff;
        let mut attempt = 0;
        loop {
            match self.send_on_lane(&envelope, message).await {
                Ok(response) => {
                    let reply = format!(
                        "{} {}",
                        response.code(),
                        response.message().collect::<Vec<_>>().join(" ")
                    );
                    return Outcome::Delivered(reply);
                }
                // 5xx, or a message this MTA can never take (an address
                // that needs SMTPUTF8 the server lacks): retrying cannot help.
                Err(err) if err.is_permanent() || err.is_client() => {
                    return Outcome::Rejected(err.to_string());
                }
                Err(err) if attempt >= self.settings.retries => {
                    return Outcome::Failed(err.to_string());
                }
                Err(err) => {
                    tracing::warn!(%err, host = %self.host, attempt, "temporary SMTP failure; retrying");
                    metrics::counter!("linktrack_smtp_retries_total").increment(1);
                    self.counters
                        .retried
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                    attempt += 1;
                }
            }
        }
    }
}
