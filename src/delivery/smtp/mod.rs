//! Delivery of built messages to an MTA over SMTP. Each MTA gets
//! `connections` lanes, one SMTP session each, kept open across messages
//! and replaced after `messages_per_connection` (relays often cap messages
//! per session). Temporary failures (4xx, refused connections, timeouts)
//! are retried with backoff; a permanent rejection (5xx) of one recipient
//! is that letter's outcome and does not stop the job. The session itself
//! (pipelining, chunking, TLS, AUTH) is in `connection.rs`, which says why
//! it is ours and not lettre's.

mod connection;
pub(crate) use connection::tls_config;
pub use connection::TlsSettingsError;
mod reply;
mod target;
mod transparency;

use crate::retry::{Attempts, Backoff};
use connection::{ConnectError, Connection, Message, SendError};
use lettre::Address;
use reply::Reply;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use target::Target;
pub use target::TargetError;

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

impl SmtpSettings {
    /// When a temporary failure is tried again: `retries` more attempts,
    /// `backoff` apart, doubling, no cap, no jitter.
    fn retry_schedule(&self) -> Backoff {
        Backoff::exponential(self.backoff, 2)
            .with_attempts(Attempts::Limited(self.retries.saturating_add(1)))
    }
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
    #[error("--smtp {url}")]
    Url {
        url: String,
        #[source]
        source: SmtpUrlError,
    },
    #[error("envelope sender {0:?} is not an address")]
    Sender(String),
}

/// What is wrong with an `--smtp` URL or the settings that go with it.
#[derive(Debug, thiserror::Error)]
pub enum SmtpUrlError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("messages per connection must be at least 1")]
    NoMessagesPerConnection,
    #[error(transparent)]
    Tls(#[from] TlsSettingsError),
}

/// The SMTP sessions to one MTA: `connections` lanes, each a worker's
/// own ([`Deliverer::lane`]). Cheap to clone.
#[derive(Clone)]
pub struct Deliverer {
    shared: Arc<Shared>,
    settings: SmtpSettings,
    host: String,
    counters: Arc<super::counters::DeliveryCounters>,
}

/// What every lane of one MTA shares: where it is, TLS, and the sessions
/// lanes left open (a lane of the next batch takes one up again).
struct Shared {
    target: Target,
    tls: Arc<rustls::ClientConfig>,
    parked: Mutex<Vec<Session>>,
}

/// One open session and how many messages it has carried.
struct Session {
    connection: Connection,
    sent: u32,
}

/// Why one attempt at a message failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Send(#[from] SendError),
    #[error(transparent)]
    Connect(#[from] ConnectError),
}

impl Shared {
    async fn open(&self) -> Result<Session, ConnectError> {
        Ok(Session {
            connection: Connection::open(&self.target, &self.tls).await?,
            sent: 0,
        })
    }
}

impl Deliverer {
    /// `counters` gets this MTA's retries (the caller counts outcomes).
    pub fn new(
        settings: SmtpSettings,
        counters: Arc<super::counters::DeliveryCounters>,
    ) -> Result<Deliverer, SmtpError> {
        let url_error = |source: SmtpUrlError| SmtpError::Url {
            url: crate::error_report::url_without_password(&settings.url),
            source,
        };
        let target = Target::parse(&settings.url).map_err(|e| url_error(e.into()))?;
        if settings.messages_per_connection == Some(0) {
            return Err(url_error(SmtpUrlError::NoMessagesPerConnection));
        }
        let tls = connection::tls_config().map_err(|e| url_error(e.into()))?;
        Ok(Deliverer {
            host: target.address(),
            shared: Arc::new(Shared {
                target,
                tls,
                parked: Mutex::new(Vec::new()),
            }),
            settings,
            counters,
        })
    }

    /// `host:port` of the MTA, for messages.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// How many lanes (SMTP sessions in parallel) this MTA takes.
    pub fn connections(&self) -> usize {
        self.settings.connections.max(1) as usize
    }

    /// A lane: one session at a time, for one worker. It takes up a session
    /// an earlier lane left open, and leaves its own open when dropped.
    pub fn lane(&self) -> Lane {
        let session = self.shared.parked.lock().ok().and_then(|mut p| p.pop());
        Lane {
            deliverer: self.clone(),
            session,
        }
    }
}

/// One SMTP session's worth of delivery, used by one worker at a time.
pub struct Lane {
    deliverer: Deliverer,
    session: Option<Session>,
}

/// A recipient no MTA would take: the letter's rejection.
#[derive(Debug, thiserror::Error)]
#[error("recipient {to:?}")]
struct BadRecipient {
    to: String,
    #[source]
    source: lettre::address::AddressError,
}

/// A message for [`Lane::deliver`]: envelope sender, recipient, data.
#[derive(Debug, Clone, Copy)]
pub struct Envelope<'a> {
    pub from: &'a Address,
    pub to: &'a str,
    pub message: &'a [u8],
}

impl<'a> Envelope<'a> {
    /// The recipient parsed, or the letter rejected naming it (no MTA
    /// would take it).
    fn recipient(&self) -> Result<Address, Outcome> {
        self.to.parse().map_err(|source| {
            let refused = BadRecipient {
                to: self.to.to_owned(),
                source,
            };
            Outcome::Rejected(crate::error_report::chain(&refused))
        })
    }

    /// The message as a session sends it, to `to`: the parsed recipient,
    /// or a next envelope's as given (checked when its own turn comes).
    fn message_to<'b>(&self, to: &'b str) -> Message<'b>
    where
        'a: 'b,
    {
        Message {
            from: self.from.as_ref(),
            to,
            data: self.message,
        }
    }
}

impl Lane {
    /// `host:port` of the lane's MTA, for messages.
    pub fn host(&self) -> &str {
        self.deliverer.host()
    }

    /// Hand one message to the MTA, retrying temporary failures. `next`:
    /// the message this lane will deliver after this one, if already known;
    /// its envelope then travels with this message's data (see
    /// `connection.rs`).
    pub async fn deliver(&mut self, letter: Envelope<'_>, next: Option<Envelope<'_>>) -> Outcome {
        let recipient = match letter.recipient() {
            Ok(address) => address,
            Err(rejected) => return rejected,
        };
        let message = letter.message_to(recipient.as_ref());
        let next = next.map(|next| next.message_to(next.to));
        let mut retries = self.deliverer.settings.retry_schedule().start();
        loop {
            match self.send(&message, next.as_ref()).await {
                Ok(reply) => return Outcome::Delivered(reply.to_string()),
                Err(err) => {
                    if let Some(outcome) = final_failure(&err) {
                        return outcome;
                    }
                    let err = crate::error_report::chain(&err);
                    let Ok(wait) = retries.failed(true) else {
                        return Outcome::Failed(err);
                    };
                    let attempt = retries.failures() - 1;
                    tracing::warn!(%err, host = %self.deliverer.host, attempt, "temporary SMTP failure; retrying");
                    metrics::counter!("linktrack_smtp_retries_total").increment(1);
                    self.deliverer
                        .counters
                        .retried
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Hand one message to the MTA once: a temporary failure is returned
    /// at once ([`Outcome::Failed`]), for a caller with somewhere else to
    /// put the message (the relay's spool) rather than a client to keep
    /// waiting through the retries.
    pub async fn deliver_once(&mut self, letter: Envelope<'_>) -> Outcome {
        let recipient = match letter.recipient() {
            Ok(address) => address,
            Err(rejected) => return rejected,
        };
        let message = letter.message_to(recipient.as_ref());
        match self.send(&message, None).await {
            Ok(reply) => Outcome::Delivered(reply.to_string()),
            Err(failure) => final_failure(&failure)
                .unwrap_or_else(|| Outcome::Failed(crate::error_report::chain(&failure))),
        }
    }

    /// One attempt on this lane's session (opened when it has none, or
    /// when it cannot carry this message). A session left open from before
    /// that the server closed meanwhile (its idle timeout, a 421) is
    /// replaced and the message tried once more on the new one, as no data
    /// reached the server. A session that has carried its quota says QUIT.
    async fn send(
        &mut self,
        message: &Message<'_>,
        next: Option<&Message<'_>>,
    ) -> Result<Reply, Failure> {
        let shared = &self.deliverer.shared;
        let parked = self
            .session
            .take()
            .filter(|session| session.connection.can_carry(message));
        let reused = parked.is_some();
        let mut session = match parked {
            Some(session) => session,
            None => shared.open().await?,
        };
        let limit = self.deliverer.settings.messages_per_connection;
        // No envelope ahead for a message this session will not carry.
        let next = next.filter(|_| limit.is_none_or(|limit| session.sent + 1 < limit));
        let mut result = session.connection.send(message, next).await;
        if reused && closed_while_parked(&result) {
            session = shared.open().await?;
            result = session.connection.send(message, next).await;
        }
        session.sent += 1;
        let worn_out = limit.is_some_and(|limit| session.sent >= limit);
        if session.connection.is_usable() {
            if worn_out {
                session.connection.quit().await;
            } else {
                self.session = Some(session);
            }
        }
        Ok(result?)
    }
}

/// A lane's session outlives it, parked for the next lane: unless it holds
/// an envelope sent ahead for a message that will now not come (only
/// closing leaves a server waiting for data).
impl Drop for Lane {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        if session.connection.has_envelope_ahead() {
            return;
        }
        if let Ok(mut parked) = self.deliverer.shared.parked.lock() {
            parked.push(session);
        }
    }
}

/// A failure retrying cannot help, as its outcome: a 5xx, or a message
/// this MTA can never take (an address that needs SMTPUTF8 the server
/// lacks). `None`: a temporary failure.
fn final_failure(failure: &Failure) -> Option<Outcome> {
    match failure {
        Failure::Send(SendError::Refused(reply)) if reply.is_permanent() => Some(
            Outcome::Rejected(SendError::Refused(reply.clone()).to_string()),
        ),
        Failure::Send(SendError::Unsendable(reason)) => Some(Outcome::Rejected(reason.clone())),
        _ => None,
    }
}

/// A parked session's first reply says it was closed meanwhile: broken
/// before any data went, or the server's 421 "closing".
fn closed_while_parked(result: &Result<Reply, SendError>) -> bool {
    match result {
        Err(SendError::Broken(broken)) => !broken.data_sent,
        Err(SendError::Refused(reply)) => reply.code() == 421,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schedule before `crate::retry`: `--smtp-retries 5`,
    /// `--smtp-backoff-ms 1000` waited 1, 2, 4, 8 and 16 s, then failed.
    #[test]
    fn temporary_failures_retry_on_the_old_schedule() {
        let settings = SmtpSettings {
            url: "smtp://127.0.0.1:25".into(),
            connections: 1,
            messages_per_connection: None,
            retries: 5,
            backoff: Duration::from_millis(1_000),
        };
        let schedule = settings.retry_schedule();
        let waits: Vec<_> = (1..=5)
            .map(|failures| schedule.next(failures, Duration::MAX, true))
            .collect();
        let secs = |s| Ok(Duration::from_secs(s));
        assert_eq!(waits, [secs(1), secs(2), secs(4), secs(8), secs(16)]);
        assert_eq!(
            schedule.next(6, Duration::ZERO, true),
            Err(crate::retry::Stop::Exhausted)
        );
        let no_retries = SmtpSettings {
            retries: 0,
            ..settings
        };
        assert!(no_retries
            .retry_schedule()
            .next(1, Duration::ZERO, true)
            .is_err());
    }
}
