//! One SMTP session with an MTA: connect, EHLO, STARTTLS, AUTH, then
//! messages, each in as few round trips as the server allows.
//!
//! Why our own client and not lettre's: lettre writes each command and
//! waits for its reply (MAIL, RCPT, DATA, the data: four round trips, and a
//! NOOP before each message taken from its pool), leaves Nagle's algorithm
//! on, and writes the final `.` in a separate small segment. Against a
//! receiver that delays its ACK (Postfix's smtp-sink, and Linux by
//! default), every message then waited for that delayed ACK, and the
//! rate was bound by the ACK timer whatever the CPU (found with `strace
//! -T`: the data and `\r\n.\r\n` written at once, the 250 read one
//! delayed-ACK interval later). So:
//! `TCP_NODELAY`; MAIL, RCPT and DATA (or BDAT) sent in one write when the
//! server offers PIPELINING (RFC 2920); the data dot-stuffed in one pass
//! and written with its terminator; with CHUNKING (RFC 3030) the whole
//! message goes with its envelope in one write: one round trip a message.

use super::reply::{Reply, ReplyError};
use super::target::{Security, Target};
use super::transparency;
use base64::Engine;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf};
use tokio::net::TcpStream;

/// The wait for any one reply or write (lettre's default, kept).
const TIMEOUT: Duration = Duration::from_secs(30);

/// What the server said it can do (its EHLO reply).
#[derive(Debug, Default, Clone, Copy)]
struct Extensions {
    pipelining: bool,
    chunking: bool,
    eight_bit_mime: bool,
    smtp_utf8: bool,
    starttls: bool,
    auth_plain: bool,
    auth_login: bool,
    /// SIZE's limit; 0: none given.
    size: Option<u64>,
}

impl Extensions {
    fn from_ehlo(reply: &Reply) -> Extensions {
        let mut found = Extensions::default();
        // The first line is the server's greeting name.
        for line in reply.lines().skip(1) {
            let mut words = line.split_ascii_whitespace();
            let keyword = words.next().unwrap_or_default().to_ascii_uppercase();
            match keyword.as_str() {
                "PIPELINING" => found.pipelining = true,
                "CHUNKING" => found.chunking = true,
                "8BITMIME" => found.eight_bit_mime = true,
                "SMTPUTF8" => found.smtp_utf8 = true,
                "STARTTLS" => found.starttls = true,
                "SIZE" => found.size = Some(words.next().and_then(|n| n.parse().ok()).unwrap_or(0)),
                "AUTH" => {
                    for mechanism in words {
                        match mechanism.to_ascii_uppercase().as_str() {
                            "PLAIN" => found.auth_plain = true,
                            "LOGIN" => found.auth_login = true,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        found
    }
}

/// Why a message did not go.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// The server answered no (4xx or 5xx) to the envelope or the data; the
    /// session is back at its start and can carry the next message.
    #[error("{}", refusal_text(.0))]
    Refused(Reply),
    /// This server can never take this message (it needs an extension the
    /// server lacks, or is over its SIZE).
    #[error("{0}")]
    Unsendable(String),
    /// The session is broken (network, timeout, a reply out of step); it is
    /// dropped.
    #[error(transparent)]
    Broken(Broken),
}

/// A broken session: why, and whether the message's data may have reached
/// the server before it broke. It says only its reason (and that reason's
/// causes), as the outcome's text always has.
#[derive(Debug)]
pub(crate) struct Broken {
    reason: BrokenBy,
    pub(crate) data_sent: bool,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.reason.fmt(f)
    }
}

impl std::error::Error for Broken {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.reason)
    }
}

/// What broke a session.
#[derive(Debug, thiserror::Error)]
enum BrokenBy {
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// The caller sent another message than it announced: a server
    /// waiting for data can only be left by closing the session.
    #[error("a message other than the one announced")]
    NotAnnounced,
    #[error("RSET after a refusal: {0}")]
    ResetRefused(Reply),
}

impl SendError {
    fn broken(reason: impl Into<BrokenBy>, data_sent: bool) -> SendError {
        SendError::Broken(Broken {
            reason: reason.into(),
            data_sent,
        })
    }
}

/// A wait that ran out.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {} s", .0.as_secs())]
pub(crate) struct TimedOut(Duration);

/// A timeout as an I/O error, for the steps whose other failures are I/O
/// errors (connecting, writing, the TLS handshake).
impl From<TimedOut> for std::io::Error {
    fn from(timed_out: TimedOut) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::TimedOut, timed_out)
    }
}

/// Why the session's stream failed: a write, or the wait for a reply.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamError {
    #[error("writing")]
    Write(#[source] std::io::Error),
    #[error(transparent)]
    ReplyTimedOut(TimedOut),
    #[error(transparent)]
    Reply(#[from] ReplyError),
}

/// lettre's wording, which the rejects file has always carried.
fn refusal_text(reply: &Reply) -> String {
    let kind = if reply.is_permanent() {
        "permanent"
    } else {
        "transient"
    };
    let text = reply.to_string();
    let text = text.get(4..).unwrap_or_default();
    format!("{kind} error ({}): {text}", reply.code())
}

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("connecting")]
    Connect(#[source] std::io::Error),
    /// The greeting, EHLO, STARTTLS or AUTH could not be said or answered.
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error("the server said {0}")]
    Refused(Reply),
    #[error("{host}")]
    ServerName {
        host: String,
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("TLS handshake")]
    Handshake(#[source] std::io::Error),
    #[error("the server does not offer STARTTLS (the URL says tls=required)")]
    NoStartTls,
    /// Bytes after the 220 and before the handshake would be read as if
    /// they came over TLS: an injection (CVE-2011-0411), refused.
    #[error("the server sent data before the TLS handshake")]
    DataBeforeHandshake,
    #[error("STARTTLS inside TLS")]
    StartTlsInsideTls,
}

/// Plain TCP or TLS, read through one buffer.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// An open session, ready for a message.
pub(crate) struct Connection {
    stream: BufReader<Stream>,
    extensions: Extensions,
    /// Reused for every message's commands and data.
    out: Vec<u8>,
    /// False once the session is out of step or broken: it must go.
    usable: bool,
    /// A MAIL was accepted and no reply has ended that transaction yet.
    in_transaction: bool,
    /// The envelope of the next message, sent ahead with this one's data.
    ahead: Option<Ahead>,
}

/// One message as the session sends it: the envelope and the data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Message<'a> {
    pub(crate) from: &'a str,
    pub(crate) to: &'a str,
    pub(crate) data: &'a [u8],
}

/// An envelope sent ahead and the server's answer to it: `None`, it waits
/// for the data (354); `Some`, it refused it.
#[derive(Debug)]
struct Ahead {
    from: String,
    to: String,
    size: usize,
    refused: Option<Reply>,
}

impl Ahead {
    fn of(message: &Message<'_>, refused: Option<Reply>) -> Ahead {
        Ahead {
            from: message.from.to_owned(),
            to: message.to.to_owned(),
            size: message.data.len(),
            refused,
        }
    }

    fn is_for(&self, message: &Message<'_>) -> bool {
        self.from == message.from && self.to == message.to && self.size == message.data.len()
    }
}

impl Connection {
    /// Connect, read the greeting, EHLO, STARTTLS and AUTH as the target
    /// asks.
    pub(crate) async fn open(
        target: &Target,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Result<Connection, ConnectError> {
        let tcp = within_io(TIMEOUT, connect_tcp(target))
            .await
            .map_err(ConnectError::Connect)?;
        let stream = if target.security == Security::Implicit {
            Stream::Tls(Box::new(handshake(tcp, target, tls).await?))
        } else {
            Stream::Plain(tcp)
        };
        let mut connection = Connection {
            stream: BufReader::new(stream),
            extensions: Extensions::default(),
            out: Vec::new(),
            usable: true,
            in_transaction: false,
            ahead: None,
        };
        let greeting = connection.reply().await?;
        if !greeting.is_completion() {
            return Err(ConnectError::Refused(greeting));
        }
        connection.hello(target).await?;
        if connection.should_start_tls(target)? {
            connection = connection.start_tls(target, tls).await?;
        }
        if let Some((user, password)) = &target.credentials {
            connection.authenticate(user, password).await?;
        }
        Ok(connection)
    }

    /// EHLO, or HELO for a server that does not know EHLO.
    async fn hello(&mut self, target: &Target) -> Result<(), ConnectError> {
        let ehlo = self
            .command(format!("EHLO {}\r\n", target.hello_name).as_bytes())
            .await?;
        if ehlo.is_completion() {
            self.extensions = Extensions::from_ehlo(&ehlo);
            return Ok(());
        }
        let helo = self
            .command(format!("HELO {}\r\n", target.hello_name).as_bytes())
            .await?;
        if !helo.is_completion() {
            return Err(ConnectError::Refused(helo));
        }
        self.extensions = Extensions::default();
        Ok(())
    }

    fn should_start_tls(&self, target: &Target) -> Result<bool, ConnectError> {
        match target.security {
            Security::None | Security::Implicit => Ok(false),
            Security::Opportunistic => Ok(self.extensions.starttls),
            Security::Required if self.extensions.starttls => Ok(true),
            Security::Required => Err(ConnectError::NoStartTls),
        }
    }

    /// STARTTLS, then EHLO again over TLS (RFC 3207 §4.2: forget what
    /// was said before).
    async fn start_tls(
        mut self,
        target: &Target,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Result<Connection, ConnectError> {
        let ready = self.command(b"STARTTLS\r\n").await?;
        if !ready.is_completion() {
            return Err(ConnectError::Refused(ready));
        }
        if !self.stream.buffer().is_empty() {
            return Err(ConnectError::DataBeforeHandshake);
        }
        let Stream::Plain(tcp) = self.stream.into_inner() else {
            return Err(ConnectError::StartTlsInsideTls);
        };
        let mut upgraded = Connection {
            stream: BufReader::new(Stream::Tls(Box::new(handshake(tcp, target, tls).await?))),
            extensions: Extensions::default(),
            out: self.out,
            usable: true,
            in_transaction: false,
            ahead: None,
        };
        upgraded.hello(target).await?;
        Ok(upgraded)
    }

    /// AUTH PLAIN, or LOGIN where PLAIN is not offered.
    async fn authenticate(&mut self, user: &str, password: &str) -> Result<(), ConnectError> {
        let b64 = |text: &[u8]| base64::engine::general_purpose::STANDARD.encode(text);
        let reply = if self.extensions.auth_plain || !self.extensions.auth_login {
            let token = b64(format!("\0{user}\0{password}").as_bytes());
            self.command(format!("AUTH PLAIN {token}\r\n").as_bytes())
                .await
        } else {
            self.login(&b64(user.as_bytes()), &b64(password.as_bytes()))
                .await
        }?;
        if reply.is_completion() {
            Ok(())
        } else {
            Err(ConnectError::Refused(reply))
        }
    }

    /// AUTH LOGIN: the user, then the password, each on its 334.
    async fn login(&mut self, user: &str, password: &str) -> Result<Reply, StreamError> {
        let mut reply = self.command(b"AUTH LOGIN\r\n").await?;
        for answer in [user, password] {
            if reply.code() != 334 {
                return Ok(reply);
            }
            reply = self.command(format!("{answer}\r\n").as_bytes()).await?;
        }
        Ok(reply)
    }

    /// Hand over one message: its envelope and data. The reply to the data
    /// is the server's acceptance. `next`, the message this session will
    /// carry after this one: with PIPELINING and without CHUNKING its
    /// envelope goes in the same write as this message's data, and its
    /// replies are kept for its own `send` (one round trip a message).
    pub(crate) async fn send(
        &mut self,
        message: &Message<'_>,
        next: Option<&Message<'_>>,
    ) -> Result<Reply, SendError> {
        let mut out = std::mem::take(&mut self.out);
        let result = self.send_with(&mut out, message, next).await;
        self.out = out;
        match &result {
            // The refusal stays the letter's outcome; a session that cannot
            // be reset after it is not used again.
            // (An envelope sent ahead means this message's transaction had
            // ended: the next one's is open, and stays.)
            Err(SendError::Refused(_)) if self.in_transaction && self.ahead.is_none() => {
                self.usable = self.reset().await.is_ok()
            }
            Err(SendError::Broken(_)) => self.usable = false,
            _ => {}
        }
        result
    }

    async fn send_with(
        &mut self,
        out: &mut Vec<u8>,
        message: &Message<'_>,
        next: Option<&Message<'_>>,
    ) -> Result<Reply, SendError> {
        match self.ahead.take() {
            Some(ahead) if ahead.is_for(message) => match ahead.refused {
                None => return self.data(out, message.data, next).await,
                Some(reply) => return Err(SendError::Refused(reply)),
            },
            Some(_) => return Err(SendError::broken(BrokenBy::NotAnnounced, false)),
            None => {}
        }
        let envelope = self.envelope(message)?;
        if !self.extensions.pipelining {
            return self.send_step_by_step(out, &envelope, message, next).await;
        }
        out.clear();
        out.extend_from_slice(envelope.as_bytes());
        if self.extensions.chunking {
            out.extend_from_slice(format!("BDAT {} LAST\r\n", message.data.len()).as_bytes());
            out.extend_from_slice(message.data);
            self.write(out, true).await?;
            self.in_transaction = true;
            let envelope = self.envelope_replies(true).await?;
            // BDAT's reply comes whatever the envelope's were (RFC 3030 §2).
            let last = self.final_reply().await;
            return match (envelope, last) {
                (_, Err(broken @ SendError::Broken(_))) => Err(broken),
                (Ok(()), last) => last,
                (Err(refused), _) => {
                    self.in_transaction = true; // RSET follows
                    Err(SendError::Refused(refused))
                }
            };
        }
        out.extend_from_slice(b"DATA\r\n");
        self.write(out, false).await?;
        self.in_transaction = true;
        match self.envelope_replies(false).await? {
            Ok(()) => self.data(out, message.data, next).await,
            Err(reply) => Err(SendError::Refused(reply)),
        }
    }

    /// `MAIL FROM` and `RCPT TO` of `message`, with the MAIL parameters it
    /// needs, or why this server cannot take it.
    fn envelope(&self, message: &Message<'_>) -> Result<String, SendError> {
        let data = message.data;
        let mut parameters = String::new();
        if let Some(limit) = self.extensions.size {
            if limit > 0 && data.len() as u64 > limit {
                return Err(SendError::Unsendable(format!(
                    "the message has {} bytes, over the server's SIZE limit of {limit}",
                    data.len()
                )));
            }
            parameters.push_str(&format!(" SIZE={}", data.len()));
        }
        if !data.is_ascii() {
            if !self.extensions.eight_bit_mime && !self.extensions.chunking {
                return Err(SendError::Unsendable(
                    "the message has 8-bit data and the server does not offer 8BITMIME".into(),
                ));
            }
            parameters.push_str(" BODY=8BITMIME");
        }
        if !message.from.is_ascii() || !message.to.is_ascii() {
            if !self.extensions.smtp_utf8 {
                return Err(SendError::Unsendable(
                    "the address needs SMTPUTF8, which the server does not offer".into(),
                ));
            }
            parameters.push_str(" SMTPUTF8");
        }
        Ok(format!(
            "MAIL FROM:<{}>{parameters}\r\nRCPT TO:<{}>\r\n",
            message.from, message.to
        ))
    }

    /// The replies to a pipelined MAIL, RCPT and DATA (or BDAT): `Err` with
    /// the first refusal. Every reply is read even after a refusal, so the
    /// session stays in step.
    async fn envelope_replies(&mut self, data_sent: bool) -> Result<Result<(), Reply>, SendError> {
        let mail = self.reply_to(data_sent).await?;
        let rcpt = self.reply_to(data_sent).await?;
        if self.extensions.chunking {
            return Ok(
                match [mail, rcpt].into_iter().find(|r| !r.is_completion()) {
                    Some(refused) => Err(refused),
                    None => Ok(()),
                },
            );
        }
        let go_ahead = self.reply_to(data_sent).await?;
        let refused = [mail, rcpt].into_iter().find(|r| !r.is_completion());
        match (refused, go_ahead.code()) {
            (None, 354) => Ok(Ok(())),
            // A server that said go ahead to DATA after refusing the
            // envelope: end the (empty) data so the session stays in step.
            (Some(refused), 354) => {
                self.write(b".\r\n", false).await?;
                self.reply_to(false).await?;
                Ok(Err(refused))
            }
            (Some(refused), _) => Ok(Err(refused)),
            (None, _) => Ok(Err(go_ahead)),
        }
    }

    /// For a server without PIPELINING: each command waits for its reply.
    async fn send_step_by_step(
        &mut self,
        out: &mut Vec<u8>,
        envelope: &str,
        message: &Message<'_>,
        next: Option<&Message<'_>>,
    ) -> Result<Reply, SendError> {
        self.in_transaction = true;
        for command in envelope.split_inclusive("\r\n") {
            let reply = self.envelope_command(command.as_bytes()).await?;
            if !reply.is_completion() {
                return Err(SendError::Refused(reply));
            }
        }
        if self.extensions.chunking {
            out.clear();
            out.extend_from_slice(format!("BDAT {} LAST\r\n", message.data.len()).as_bytes());
            out.extend_from_slice(message.data);
            self.write(out, true).await?;
            return self.final_reply().await;
        }
        let go_ahead = self.envelope_command(b"DATA\r\n").await?;
        if go_ahead.code() != 354 {
            return Err(SendError::Refused(go_ahead));
        }
        self.data(out, message.data, next).await
    }

    /// The data after a 354, dot-stuffed and terminated, and its reply;
    /// `next`'s envelope in the same write when the server pipelines.
    async fn data(
        &mut self,
        out: &mut Vec<u8>,
        data: &[u8],
        next: Option<&Message<'_>>,
    ) -> Result<Reply, SendError> {
        out.clear();
        transparency::append_data(data, out);
        let next = match next {
            Some(next) if self.extensions.pipelining && !self.extensions.chunking => {
                self.envelope(next).ok().map(|envelope| (next, envelope))
            }
            _ => None,
        };
        if let Some((_, envelope)) = &next {
            out.extend_from_slice(envelope.as_bytes());
            out.extend_from_slice(b"DATA\r\n");
        }
        self.write(out, true).await?;
        let reply = self.final_reply().await;
        if let Some((next, _)) = next {
            // The next envelope's replies follow this message's; a session
            // that breaks reading them has still answered this message.
            match self.envelope_replies(false).await {
                Ok(answer) => {
                    self.in_transaction = true;
                    self.ahead = Some(Ahead::of(next, answer.err()));
                }
                Err(_) => self.usable = false,
            }
        }
        reply
    }

    /// The reply that ends a transaction (to the data, or to BDAT LAST).
    async fn final_reply(&mut self) -> Result<Reply, SendError> {
        let reply = self.reply_to(true).await?;
        self.in_transaction = false;
        if reply.is_completion() {
            Ok(reply)
        } else {
            Err(SendError::Refused(reply))
        }
    }

    /// Whether the session can carry `message` next: it is usable, and any
    /// envelope sent ahead is that message's.
    pub(crate) fn can_carry(&self, message: &Message<'_>) -> bool {
        self.usable
            && self
                .ahead
                .as_ref()
                .is_none_or(|ahead| ahead.is_for(message))
    }

    /// Whether the session can carry another message.
    pub(crate) fn is_usable(&self) -> bool {
        self.usable
    }

    /// Whether an envelope was sent ahead (the session then cannot be
    /// parked for any other message).
    pub(crate) fn has_envelope_ahead(&self) -> bool {
        self.ahead.is_some()
    }

    async fn envelope_command(&mut self, command: &[u8]) -> Result<Reply, SendError> {
        self.command(command)
            .await
            .map_err(|reason| SendError::broken(reason, false))
    }

    /// RSET after a refused message, so the next one starts clean.
    async fn reset(&mut self) -> Result<(), SendError> {
        let reply = self.envelope_command(b"RSET\r\n").await?;
        if reply.is_completion() {
            self.in_transaction = false;
            Ok(())
        } else {
            Err(SendError::broken(BrokenBy::ResetRefused(reply), false))
        }
    }

    /// Say QUIT and close; a server that has already gone is no error.
    pub(crate) async fn quit(mut self) {
        let _ = self.command(b"QUIT\r\n").await;
        let _ = self.stream.get_mut().shutdown().await;
    }

    async fn write(&mut self, bytes: &[u8], data_sent: bool) -> Result<(), SendError> {
        // A large message on a slow link needs longer than a command.
        let allowed = TIMEOUT + Duration::from_secs(bytes.len() as u64 / 65_536);
        let stream = self.stream.get_mut();
        within_io(allowed, async {
            stream.write_all(bytes).await?;
            stream.flush().await
        })
        .await
        .map_err(|e| SendError::broken(StreamError::Write(e), data_sent))
    }

    async fn reply_to(&mut self, data_sent: bool) -> Result<Reply, SendError> {
        self.reply()
            .await
            .map_err(|reason| SendError::broken(reason, data_sent))
    }

    /// One command and its reply.
    async fn command(&mut self, command: &[u8]) -> Result<Reply, StreamError> {
        let stream = self.stream.get_mut();
        within_io(TIMEOUT, async {
            stream.write_all(command).await?;
            stream.flush().await
        })
        .await
        .map_err(StreamError::Write)?;
        self.reply().await
    }

    async fn reply(&mut self) -> Result<Reply, StreamError> {
        Ok(within(TIMEOUT, Reply::read(&mut self.stream))
            .await
            .map_err(StreamError::ReplyTimedOut)??)
    }
}

/// `future`, or [`TimedOut`] after `limit`.
async fn within<T>(
    limit: Duration,
    future: impl std::future::Future<Output = T>,
) -> Result<T, TimedOut> {
    tokio::time::timeout(limit, future)
        .await
        .map_err(|_| TimedOut(limit))
}

/// An I/O `future`, its timeout after `limit` one more I/O error.
async fn within_io<T>(
    limit: Duration,
    future: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    within(limit, future)
        .await
        .unwrap_or_else(|timed_out| Err(timed_out.into()))
}

/// The first of the host's addresses that answers, with Nagle's algorithm
/// off (see the module's docs).
async fn connect_tcp(target: &Target) -> std::io::Result<TcpStream> {
    let mut last_error = None;
    for address in tokio::net::lookup_host((target.host.as_str(), target.port)).await? {
        match TcpStream::connect(address).await {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| std::io::Error::other("the host has no address")))
}

async fn handshake(
    tcp: TcpStream,
    target: &Target,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, ConnectError> {
    let name = rustls::pki_types::ServerName::try_from(target.host.clone()).map_err(|source| {
        ConnectError::ServerName {
            host: target.host.clone(),
            source,
        }
    })?;
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(tls));
    within_io(TIMEOUT, connector.connect(name, tcp))
        .await
        .map_err(ConnectError::Handshake)
}

/// The TLS settings every session shares: the system's trusted roots
/// (`SSL_CERT_FILE` and `SSL_CERT_DIR` name others) and Mozilla's, as
/// webpki-roots carries them, so a machine without a CA bundle still
/// verifies public MTAs.
pub(crate) fn tls_config() -> Result<Arc<rustls::ClientConfig>, TlsSettingsError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let native = rustls_native_certs::load_native_certs();
    for error in &native.errors {
        tracing::debug!(%error, "a system CA certificate could not be read");
    }
    let (added, ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!(added, ignored, "system CA certificates for SMTP TLS");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsSettingsError)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The TLS settings could not be made (the crypto provider refused the
/// protocol versions).
#[derive(Debug, thiserror::Error)]
#[error("TLS settings")]
pub struct TlsSettingsError(#[source] rustls::Error);

#[cfg(test)]
mod tests {
    use super::*;

    fn target(port: u16) -> Target {
        Target::parse(&format!("smtp://127.0.0.1:{port}/tests.example")).unwrap()
    }

    #[tokio::test]
    async fn a_refused_connection_keeps_its_io_error() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let tls = tls_config().unwrap();
        let Err(err) = Connection::open(&target(port), &tls).await else {
            panic!("connected to a closed port");
        };
        let ConnectError::Connect(io) = &err else {
            panic!("{err:?}");
        };
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
        let said = crate::error_report::chain(&err);
        assert!(said.starts_with("connecting: "), "{said}");
        assert!(said.len() > "connecting: ".len(), "{said}");
    }

    #[tokio::test]
    async fn a_greeting_that_is_not_smtp_is_said_with_its_reason() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            socket.write_all(b"hello there\r\n").await.unwrap();
            socket
        });
        let tls = tls_config().unwrap();
        let Err(err) = Connection::open(&target(port), &tls).await else {
            panic!("a session opened on a greeting that is not SMTP");
        };
        assert!(
            matches!(
                err,
                ConnectError::Stream(StreamError::Reply(ReplyError::Malformed(_)))
            ),
            "{err:?}"
        );
        let said = crate::error_report::chain(&err);
        assert!(
            said.contains("not SMTP") && said.contains("hello there"),
            "{said}"
        );
        drop(server.await);
    }
}
