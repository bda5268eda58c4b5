//! One pass over a mailbox: every message listed is read and acted on
//! exactly as `bounces ingest` acts on a file ([`Ingest::message`]), and
//! only once its decision is stored is it moved, flagged or deleted
//! ([`After`]). A cut connection or a crash before that leaves it where
//! it was: the next pass reads it again, and the second reading changes
//! nothing (a decision is keyed by the message's Message-ID). A message
//! that needs a look (not a bounce, unreadable, too big, naming no letter
//! of ours) does not stop the rest: it goes to its own folder, or is
//! flagged, and the pass goes on.

use super::address::{MailboxUrl, Protocol};
use super::connect::Listed;
use super::error::{MailboxError, Step};
use super::imap::Imap;
use super::pop3::Pop3;
use crate::bounces::ingest::{Ingest, Outcome};
use crate::store::StoreError;
use std::sync::Arc;

/// What becomes of a message once its decision is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// IMAP: to the done folder (a message that needs a look to the look
    /// folder); the folder read holds only what is still to read.
    Move,
    /// IMAP: marked \Seen (a message that needs a look \Seen and
    /// \Flagged) and left where it is; only unseen messages are read.
    Seen,
    /// Deleted (IMAP: a message that needs a look goes to the look
    /// folder; POP3: it is left in the mailbox and read again next pass).
    Delete,
}

/// Where messages go once read.
#[derive(Debug, Clone)]
pub struct Disposal {
    pub after: After,
    /// The folder read messages are moved to (`After::Move`).
    pub done_folder: String,
    /// The folder messages that need a look are moved to (IMAP,
    /// `After::Move` and `After::Delete`).
    pub look_folder: String,
}

impl Disposal {
    /// Whether this is possible with `protocol`: POP3 can only delete.
    pub fn check(&self, protocol: Protocol) -> Result<(), String> {
        match (protocol, self.after) {
            (Protocol::Pop3, After::Move | After::Seen) => Err(
                "POP3 has no folders or flags: read messages can only be deleted \
                 (--after delete)"
                    .into(),
            ),
            _ => Ok(()),
        }
    }
}

/// What a pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pass {
    /// Messages listed to read.
    pub listed: usize,
    /// Messages read and acted on (their decisions stored, or nothing to
    /// store), then moved, flagged or deleted.
    pub done: usize,
    /// Messages that need a look, set aside.
    pub looks: usize,
}

/// Why a pass stopped before its end. What it did before stays done.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Mailbox(#[from] MailboxError),
    /// The database failed on a message: it stays in the mailbox.
    #[error("{name}: the database failed")]
    Store {
        name: String,
        #[source]
        source: StoreError,
    },
    /// The caller's report of a message failed (standard output closed).
    #[error("{0}")]
    Said(anyhow::Error),
}

enum Session {
    Imap(Imap),
    Pop3(Pop3),
}

/// Read every message of `url`'s mailbox once; `say` is told each one's
/// name and outcome as it is decided.
pub async fn pass(
    url: &MailboxUrl,
    password: &str,
    disposal: &Disposal,
    intake: &Ingest,
    tls: &Arc<rustls::ClientConfig>,
    say: &mut (dyn FnMut(&str, &Outcome) -> anyhow::Result<()> + Send),
) -> Result<Pass, PassError> {
    let server = url.to_string();
    disposal
        .check(url.protocol)
        .map_err(|why| MailboxError::new(&server, Step::Folder, why))?;
    let mut session = match url.protocol {
        Protocol::Imap => {
            let mut imap = Imap::open(url, password, tls).await?;
            match disposal.after {
                After::Move => {
                    imap.ensure_folder(&disposal.done_folder).await?;
                    imap.ensure_folder(&disposal.look_folder).await?;
                }
                After::Delete => imap.ensure_folder(&disposal.look_folder).await?,
                After::Seen => {}
            }
            Session::Imap(imap)
        }
        Protocol::Pop3 => Session::Pop3(Pop3::open(url, password, tls).await?),
    };
    let listed = match &mut session {
        Session::Imap(imap) => {
            imap.list(&url.folder, disposal.after == After::Seen)
                .await?
        }
        Session::Pop3(pop3) => pop3.list().await?,
    };
    let mut pass = Pass {
        listed: listed.len(),
        ..Pass::default()
    };
    for message in listed {
        let name = match url.protocol {
            Protocol::Imap => format!("{} uid {}", url.folder, message.id),
            Protocol::Pop3 => format!("message {}", message.id),
        };
        let Some(outcome) = read_one(&mut session, intake, message, &name).await? else {
            continue; // gone meanwhile
        };
        say(&name, &outcome).map_err(PassError::Said)?;
        dispose(&mut session, disposal, message.id, outcome.needs_look).await?;
        if outcome.needs_look {
            pass.looks += 1;
        } else {
            pass.done += 1;
        }
    }
    match session {
        Session::Imap(imap) => imap.logout().await,
        // The deletions happen at QUIT.
        Session::Pop3(pop3) => pop3.quit().await?,
    }
    Ok(pass)
}

/// One message read and acted on; `None` when it is no longer there.
async fn read_one(
    session: &mut Session,
    intake: &Ingest,
    message: Listed,
    name: &str,
) -> Result<Option<Outcome>, PassError> {
    let raw = if message.size > intake.max_bytes {
        Vec::new() // only named: too big
    } else {
        let raw = match session {
            Session::Imap(imap) => imap.fetch(message.id).await?,
            Session::Pop3(pop3) => Some(pop3.fetch(message.id, intake.max_bytes + 1).await?),
        };
        match raw {
            Some(raw) => raw,
            None => return Ok(None),
        }
    };
    let size = if raw.is_empty() {
        message.size
    } else {
        raw.len()
    };
    intake
        .message(&raw, size)
        .await
        .map(Some)
        .map_err(|source| PassError::Store {
            name: name.to_owned(),
            source,
        })
}

async fn dispose(
    session: &mut Session,
    disposal: &Disposal,
    id: u32,
    needs_look: bool,
) -> Result<(), MailboxError> {
    match session {
        Session::Imap(imap) => match (disposal.after, needs_look) {
            (After::Seen, false) => imap.flag(id, "\\Seen").await,
            (After::Seen, true) => imap.flag(id, "\\Seen \\Flagged").await,
            (After::Move, false) => imap.move_to(id, &disposal.done_folder).await,
            (After::Move | After::Delete, true) => imap.move_to(id, &disposal.look_folder).await,
            (After::Delete, false) => imap.delete(id).await,
        },
        Session::Pop3(pop3) if !needs_look => pop3.delete(id).await,
        Session::Pop3(_) => Ok(()),
    }
}
