//! Delivery of built messages to an MTA over SMTP (lettre's async transport
//! with a connection pool). Temporary failures (4xx, refused connections,
//! timeouts) are retried with backoff; a permanent rejection (5xx) of one
//! recipient is that letter's outcome and does not stop the job.

use lettre::address::Envelope;
use lettre::transport::smtp::PoolConfig;
use lettre::{Address, AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use std::time::Duration;

/// Where and how to deliver.
#[derive(Debug, Clone)]
pub struct SmtpSettings {
    /// `smtp://host:port` (plain), `smtp://host:port?tls=required` (STARTTLS)
    /// or `smtps://host:port` (implicit TLS); user and password in the URL
    /// for AUTH.
    pub url: String,
    /// Connections to the MTA used in parallel.
    pub connections: u32,
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

/// A pool of SMTP connections to one MTA.
#[derive(Clone)]
pub struct Deliverer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    settings: SmtpSettings,
    host: String,
}

impl Deliverer {
    pub fn new(settings: SmtpSettings) -> Result<Deliverer, SmtpError> {
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
        let host = format!(
            "{}:{}",
            parsed.host_str().unwrap_or_default(),
            parsed.port().unwrap_or(25)
        );
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(&settings.url)
            .map_err(|e| url_error(e.to_string()))?
            .timeout(Some(Duration::from_secs(30)))
            .pool_config(PoolConfig::new().max_size(settings.connections.max(1)))
            .build();
        Ok(Deliverer {
            transport,
            settings,
            host,
        })
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
            match self.transport.send_raw(&envelope, message).await {
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
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                    attempt += 1;
                }
            }
        }
    }
}
