//! One client's SMTP session (RFC 5321): the greeting, EHLO and its
//! extensions, AUTH, the envelope with its checks (who may send, the
//! suppression list, the opt-outs, the limits), DATA, and the replies
//! with enhanced status codes (RFC 3463). Commands are answered in order
//! and replies flushed when no further command is waiting (PIPELINING).
//! A message is answered 250 only once its letters are on disk in the
//! spool (`spool.rs`). After STARTTLS the session starts again over TLS,
//! knowing nothing of what was said before it (RFC 3207, section 4.2).

use super::access::{grants_relay_send, is_open_to};
use super::auth::{self, LOGIN_PASSWORD_PROMPT, LOGIN_USER_PROMPT};
use super::command::{parse, Command};
use super::data::{read_data, Data};
use super::settings::SuppressedAction;
use super::shared::Shared;
use super::standing::Standing;
use super::track::Recipient;
use crate::privacy::StoreGuard;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter,
};

/// The longest command line read (RFC 5321 says 512; AUTH lines are longer).
const MAX_LINE: u64 = 4096;
/// How long the relay waits for a client's next line.
const IDLE: Duration = Duration::from_secs(300);
/// Bad commands and failed AUTHs before the session is closed.
const MAX_ERRORS: u32 = 10;

/// Where a session stands with TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tls {
    /// The relay has no certificate: STARTTLS is not offered.
    Unavailable,
    /// Offered, not started: AUTH waits for it.
    Offered,
    /// The session runs over TLS.
    On,
}

/// The state of one session.
struct Session {
    peer: SocketAddr,
    tls: Tls,
    greeted: bool,
    authenticated: bool,
    from: Option<String>,
    recipients: Vec<Recipient>,
    /// The view of opt-outs and erasures the transaction's recipients
    /// were checked with, held until its letters are stored.
    view: Option<StoreGuard>,
    /// Suppressed recipients accepted to be dropped in this transaction.
    dropped: usize,
    errors: u32,
}

/// What the session does after a command.
enum Next {
    Go,
    Close,
    /// 220 said to STARTTLS: the handshake comes next.
    StartTls,
}

/// Serve one connection until QUIT, an error or the idle timeout; after
/// STARTTLS, the same over TLS.
pub(crate) async fn serve(stream: tokio::net::TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let tls = match shared.tls {
        Some(_) => Tls::Offered,
        None => Tls::Unavailable,
    };
    let Some(stream) = session(stream, peer, &shared, tls).await else {
        return;
    };
    let Some(acceptor) = shared.tls.clone() else {
        return;
    };
    match tokio::time::timeout(IDLE, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => {
            metrics::counter!("linktrack_relay_starttls_total").increment(1);
            let _ = session(stream, peer, &shared, Tls::On).await;
        }
        Ok(Err(err)) => tracing::debug!(%peer, %err, "STARTTLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "STARTTLS handshake timed out"),
    }
}

/// One session over `stream` until it closes; the stream back when the
/// client asked for STARTTLS and was told to go ahead.
async fn session<S>(stream: S, peer: SocketAddr, shared: &Shared, tls: Tls) -> Option<S>
where
    S: tokio::io::AsyncRead + AsyncWrite + Unpin,
{
    let (read, write) = tokio::io::split(stream);
    let mut reader = BufReader::new(read);
    // Replies gather here until no command is waiting (PIPELINING), and
    // each goes out in one write with its line end: written straight to
    // the socket (no delay, Nagle off), a reply took two segments.
    let mut write = BufWriter::new(write);
    let mut session = Session {
        peer,
        tls,
        greeted: false,
        authenticated: false,
        from: None,
        recipients: Vec::new(),
        view: None,
        dropped: 0,
        errors: 0,
    };
    // Over TLS the client speaks first (EHLO again), without a greeting.
    if tls != Tls::On {
        let greeting = format!("220 {} ESMTP linktrack relay", shared.settings.hostname);
        reply(&mut write, &reader, &greeting).await.ok()?;
    }
    loop {
        let line = match read_line(&mut reader).await {
            Ok(Some(line)) => line,
            Ok(None) => return None,
            Err(Line::TooLong) => {
                session.errors += 1;
                reply(&mut write, &reader, "500 5.5.6 Line too long")
                    .await
                    .ok()?;
                continue;
            }
            Err(Line::Idle) => {
                let _ = reply(&mut write, &reader, "421 4.4.2 Idle too long; closing").await;
                let _ = write.flush().await;
                return None;
            }
        };
        let next = session
            .command(parse(&line), &mut reader, &mut write, shared)
            .await;
        match next {
            Ok(Next::Go) if session.errors < MAX_ERRORS => {}
            Ok(Next::Go) => {
                let _ = reply(&mut write, &reader, "421 4.7.0 Too many errors; closing").await;
                let _ = write.flush().await;
                return None;
            }
            Ok(Next::StartTls) => {
                // Whatever the client pipelined after STARTTLS was sent in
                // the clear and would be taken as said over TLS (the
                // STARTTLS injection of CVE-2011-0411): it is dropped with
                // the reader's buffer.
                write.flush().await.ok()?;
                return Some(reader.into_inner().unsplit(write.into_inner()));
            }
            Ok(Next::Close) => {
                // A reply held back for pipelined commands (221 to QUIT).
                let _ = write.flush().await;
                return None;
            }
            Err(_) => return None,
        }
    }
}

/// Why no command line was read.
enum Line {
    TooLong,
    Idle,
}

/// The next line without its line end; `None` when the client closed.
async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Option<String>, Line> {
    let mut bytes = Vec::new();
    let mut limited = (&mut *reader).take(MAX_LINE);
    let read = tokio::time::timeout(IDLE, limited.read_until(b'\n', &mut bytes)).await;
    match read {
        Err(_) => Err(Line::Idle),
        Ok(Err(_)) | Ok(Ok(0)) => Ok(None),
        Ok(Ok(_)) if !bytes.ends_with(b"\n") => {
            // The rest of the long line is skipped up to its end.
            loop {
                bytes.clear();
                match (&mut *reader)
                    .take(MAX_LINE)
                    .read_until(b'\n', &mut bytes)
                    .await
                {
                    Ok(0) | Err(_) => return Ok(None),
                    Ok(_) if bytes.ends_with(b"\n") => return Err(Line::TooLong),
                    Ok(_) => {}
                }
            }
        }
        Ok(Ok(_)) => {
            let text = String::from_utf8_lossy(&bytes);
            Ok(Some(text.trim_end_matches(['\r', '\n']).to_owned()))
        }
    }
}

/// Write a reply (lines joined by `\r\n` already, without the last one)
/// into the session's buffer; flushed unless the client has sent more
/// commands already (their replies go with it).
async fn reply<W, R>(write: &mut W, reader: &BufReader<R>, text: &str) -> std::io::Result<()>
where
    W: AsyncWrite + Unpin,
    R: tokio::io::AsyncRead,
{
    write.write_all(text.as_bytes()).await?;
    write.write_all(b"\r\n").await?;
    // A command line not complete yet is no reason to wait: the client
    // may be waiting for this reply before it says the rest.
    if memchr::memchr(b'\n', reader.buffer()).is_none() {
        write.flush().await?;
    }
    Ok(())
}

impl Session {
    async fn command<R, W>(
        &mut self,
        command: Command,
        reader: &mut BufReader<R>,
        write: &mut W,
        shared: &Shared,
    ) -> std::io::Result<Next>
    where
        R: tokio::io::AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let settings = &shared.settings;
        let text: String = match command {
            Command::Ehlo(_) => {
                self.greeted = true;
                self.reset();
                let mut lines = vec![
                    settings.hostname.clone(),
                    "PIPELINING".into(),
                    "8BITMIME".into(),
                    "SMTPUTF8".into(),
                    format!("SIZE {}", settings.max_message_bytes),
                    "ENHANCEDSTATUSCODES".into(),
                ];
                if self.tls == Tls::Offered {
                    lines.push("STARTTLS".into());
                }
                // Passwords only over TLS when TLS is there to be had.
                if shared.keys.enabled() && self.tls != Tls::Offered {
                    lines.push("AUTH PLAIN LOGIN".into());
                }
                multiline(250, &lines)
            }
            Command::Helo(_) => {
                self.greeted = true;
                self.reset();
                format!("250 {}", settings.hostname)
            }
            Command::StartTls => match self.tls {
                Tls::Offered if self.from.is_some() => "503 5.5.1 Not during a transaction".into(),
                Tls::Offered => {
                    reply(write, reader, "220 2.0.0 Ready to start TLS").await?;
                    return Ok(Next::StartTls);
                }
                Tls::On => "503 5.5.1 TLS is already on".into(),
                Tls::Unavailable => {
                    self.errors += 1;
                    "502 5.5.1 STARTTLS is not offered here".into()
                }
            },
            Command::Auth { mechanism, initial } => {
                return self.auth(&mechanism, initial, reader, write, shared).await;
            }
            Command::Mail { from, size } => self.mail(from, size, shared).await,
            Command::Rcpt(to) => self.rcpt(&to, shared),
            Command::Data => return self.data(reader, write, shared).await,
            Command::Rset => {
                self.reset();
                "250 2.0.0 Ok".into()
            }
            Command::Noop => "250 2.0.0 Ok".into(),
            Command::Vrfy => "252 2.5.0 Cannot VRFY; send and see".into(),
            Command::Quit => {
                reply(write, reader, "221 2.0.0 Bye").await?;
                return Ok(Next::Close);
            }
            Command::Malformed(syntax) => {
                self.errors += 1;
                format!("501 5.5.4 Syntax: {syntax}")
            }
            Command::Unknown => {
                self.errors += 1;
                "500 5.5.2 Command not recognised".into()
            }
        };
        reply(write, reader, &text).await?;
        Ok(Next::Go)
    }

    fn reset(&mut self) {
        self.from = None;
        self.recipients.clear();
        // The view is let go: `erase` need not wait for this transaction.
        drop(self.view.take());
        self.dropped = 0;
    }

    async fn mail(&mut self, from: String, size: Option<u64>, shared: &Shared) -> String {
        let settings = &shared.settings;
        if !self.greeted {
            return "503 5.5.1 Say EHLO first".into();
        }
        if self.from.is_some() {
            return "503 5.5.1 A transaction is open; RSET first".into();
        }
        if !self.authenticated && !is_open_to(self.peer.ip(), &settings.open_to) {
            return "530 5.7.0 Authentication required".into();
        }
        if size.is_some_and(|size| size > settings.max_message_bytes as u64) {
            return format!(
                "552 5.3.4 The message is larger than {} bytes",
                settings.max_message_bytes
            );
        }
        if from.is_empty() {
            return "553 5.1.7 The relay takes no null sender (<>): bounces go back to the sending platform".into();
        }
        if let Err(e) = from.parse::<lettre::Address>() {
            return format!("553 5.1.7 <{from}>: not an address ({e})");
        }
        match shared.recipients.hold(&shared.pool).await {
            Ok(view) => self.view = Some(view),
            Err(e) => {
                tracing::warn!(error = %e, "the relay cannot read the opt-out and erasure lists");
                return "451 4.3.0 The suppression list cannot be read now; try again later".into();
            }
        }
        self.from = Some(from);
        "250 2.1.0 Ok".into()
    }

    fn rcpt(&mut self, to: &str, shared: &Shared) -> String {
        let settings = &shared.settings;
        if self.from.is_none() {
            return "503 5.5.1 MAIL FROM first".into();
        }
        if self.recipients.len() + self.dropped >= settings.max_recipients {
            return format!(
                "452 4.5.3 Too many recipients: at most {} per message; send the rest in another",
                settings.max_recipients
            );
        }
        if let Err(e) = to.parse::<lettre::Address>() {
            return format!("553 5.1.3 <{to}>: not an address ({e})");
        }
        let standing = shared.recipients.standing(to);
        if let Some(reason) = refusal(standing) {
            return match settings.suppressed {
                SuppressedAction::Refuse => format!("550 5.7.1 <{to}>: {reason}"),
                SuppressedAction::Drop => {
                    self.dropped += 1;
                    "250 2.1.5 Ok".into()
                }
            };
        }
        let opted_out = standing.opted_out;
        self.recipients.push(Recipient {
            email: to.to_owned(),
            opted_out,
        });
        "250 2.1.5 Ok".into()
    }

    async fn data<R, W>(
        &mut self,
        reader: &mut BufReader<R>,
        write: &mut W,
        shared: &Shared,
    ) -> std::io::Result<Next>
    where
        R: tokio::io::AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let Some(from) = self.from.clone() else {
            reply(write, reader, "503 5.5.1 MAIL FROM first").await?;
            return Ok(Next::Go);
        };
        if self.recipients.is_empty() && self.dropped == 0 {
            reply(write, reader, "554 5.5.1 No valid recipients").await?;
            return Ok(Next::Go);
        }
        reply(write, reader, "354 End data with <CR><LF>.<CR><LF>").await?;
        write.flush().await?;
        let data = read_data(reader, shared.settings.max_message_bytes).await?;
        let text = match data {
            Data::Closed => return Ok(Next::Close),
            Data::TooBig { size } => format!(
                "552 5.3.4 The message is {size} bytes, over the limit of {}",
                shared.settings.max_message_bytes
            ),
            Data::BareLf => {
                "554 5.6.0 Bare LF line ends: lines must end in CRLF (RFC 5321, 2.3.8)".into()
            }
            Data::Nul => "554 5.6.0 The message holds a NUL byte".into(),
            Data::Message(message) => self.accept(&from, &message, shared).await,
        };
        self.reset();
        reply(write, reader, &text).await?;
        Ok(Next::Go)
    }

    /// Track and spool an accepted message: the reply to its DATA.
    async fn accept(&self, from: &str, message: &[u8], shared: &Shared) -> String {
        if self.recipients.is_empty() {
            shared
                .dropped
                .fetch_add(self.dropped as u64, Ordering::Relaxed);
            metrics::counter!("linktrack_relay_suppressed_dropped_total")
                .increment(self.dropped as u64);
            return "250 2.0.0 Ok: dropped (every recipient is suppressed)".into();
        }
        let letters = match shared.tracker.track(from, &self.recipients, message).await {
            Ok(letters) => letters,
            Err(e) if e.is_permanent() => return format!("554 5.6.0 {e}"),
            Err(e) => {
                tracing::warn!(error = %e, "the relay cannot track a message now");
                return "451 4.3.0 Cannot store the message's links now; try again later".into();
            }
        };
        let letters = match &shared.hand_over {
            Some(hand_over) => hand_over.deliver(letters).await,
            None => letters,
        };
        if letters.is_empty() {
            self.count_accepted(shared);
            return "250 2.0.0 Ok: delivered to the MTA".into();
        }
        let spool = Arc::clone(&shared.spool);
        let put = tokio::task::spawn_blocking(move || spool.put(&letters)).await;
        match put {
            Ok(Ok(id)) => {
                shared.wake.notify_one();
                self.count_accepted(shared);
                format!("250 2.0.0 Ok: queued as {id}")
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "the relay cannot spool a message");
                "451 4.3.0 Cannot queue the message now; try again later".into()
            }
            Err(e) => {
                tracing::error!(error = %e, "spooling panicked");
                "451 4.3.0 Cannot queue the message now; try again later".into()
            }
        }
    }

    /// A message answered 250 (handed over or queued), with the
    /// suppressed recipients it dropped.
    fn count_accepted(&self, shared: &Shared) {
        shared
            .dropped
            .fetch_add(self.dropped as u64, Ordering::Relaxed);
        metrics::counter!("linktrack_relay_accepted_total").increment(1);
    }

    async fn auth<R, W>(
        &mut self,
        mechanism: &str,
        initial: Option<String>,
        reader: &mut BufReader<R>,
        write: &mut W,
        shared: &Shared,
    ) -> std::io::Result<Next>
    where
        R: tokio::io::AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let refusal = if !self.greeted {
            Some("503 5.5.1 Say EHLO first")
        } else if self.authenticated {
            Some("503 5.5.1 Already authenticated")
        } else if self.from.is_some() {
            Some("503 5.5.1 Not during a transaction")
        } else if !shared.keys.enabled() {
            Some("503 5.5.1 AUTH is off (no LINKTRACK_API_TOKEN or API key secret)")
        } else if self.tls == Tls::Offered {
            Some("538 5.7.11 Encryption required: STARTTLS first")
        } else {
            None
        };
        if let Some(refusal) = refusal {
            reply(write, reader, refusal).await?;
            return Ok(Next::Go);
        }
        let password = match mechanism {
            "PLAIN" => {
                let response = match initial {
                    Some(initial) => Some(initial),
                    None => challenge(reader, write, "334 ").await?,
                };
                response
                    .map(|r| auth::decode(&r).and_then(|m| m.map(|m| auth::plain(&m)).transpose()))
            }
            "LOGIN" => {
                let user = match initial {
                    Some(user) => Some(user),
                    None => challenge(reader, write, &format!("334 {LOGIN_USER_PROMPT}")).await?,
                };
                match user {
                    None => None,
                    Some(_) => challenge(reader, write, &format!("334 {LOGIN_PASSWORD_PROMPT}"))
                        .await?
                        .map(|p| {
                            auth::decode(&p).map(|p| {
                                p.map(|password| auth::Credentials {
                                    user: String::new(),
                                    password,
                                })
                            })
                        }),
                }
            }
            _ => {
                self.errors += 1;
                reply(
                    write,
                    reader,
                    "504 5.5.4 Unrecognised authentication mechanism (PLAIN, LOGIN)",
                )
                .await?;
                return Ok(Next::Go);
            }
        };
        let text = match password {
            None => return Ok(Next::Close),
            Some(Err(e)) => {
                self.errors += 1;
                format!("501 5.5.2 {e}")
            }
            Some(Ok(None)) => "501 5.0.0 Authentication cancelled".into(),
            Some(Ok(Some(credentials))) => {
                if grants_relay_send(&shared.keys, &credentials.password).await {
                    self.authenticated = true;
                    "235 2.7.0 Authentication successful".into()
                } else {
                    self.errors += 3;
                    tracing::warn!(peer = %self.peer, "relay AUTH failed");
                    "535 5.7.8 Authentication credentials invalid".into()
                }
            }
        };
        reply(write, reader, &text).await?;
        Ok(Next::Go)
    }
}

/// Ask the client for an AUTH line; `None`: it closed.
async fn challenge<R, W>(
    reader: &mut BufReader<R>,
    write: &mut W,
    prompt: &str,
) -> std::io::Result<Option<String>>
where
    R: tokio::io::AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    reply(write, reader, prompt).await?;
    write.flush().await?;
    Ok(read_line(reader).await.ok().flatten())
}

/// Why a recipient is refused, if it is: on the suppression list (as
/// itself or as an erased address's keyed hash), or erased.
fn refusal(standing: Standing) -> Option<&'static str> {
    if standing.suppressed {
        return Some("on the suppression list (unsubscribed, bounced or complained)");
    }
    if standing.erased {
        return Some("the address was erased from linktrack");
    }
    None
}

/// A multi-line reply: `250-first`, …, `250 last`.
fn multiline(code: u16, lines: &[String]) -> String {
    let last = lines.len().saturating_sub(1);
    lines
        .iter()
        .enumerate()
        .map(|(n, line)| format!("{code}{}{line}", if n == last { ' ' } else { '-' }))
        .collect::<Vec<_>>()
        .join("\r\n")
}
