//! One IMAP session (async-imap over rustls): log in, list a folder's
//! messages with their sizes and flags, read one without marking it
//! read (`BODY.PEEK[]`: a crash before its decision is stored leaves it
//! as it was), then move, flag or delete it by UID.

use super::address::{MailboxUrl, Security};
use super::connect::{self, within, Listed, TlsStream};
use super::error::{MailboxError, Step};
use async_imap::types::Flag;
use futures_util::TryStreamExt;
use std::sync::Arc;

pub(super) struct Imap {
    session: async_imap::Session<TlsStream>,
    server: String,
    /// RFC 6851 MOVE; without it a move is COPY, \Deleted and EXPUNGE.
    can_move: bool,
    /// RFC 4315 UIDPLUS: EXPUNGE of the one message (`UID EXPUNGE`);
    /// without it EXPUNGE also removes what another client marked \Deleted.
    uidplus: bool,
}

impl Imap {
    pub(super) async fn open(
        url: &MailboxUrl,
        password: &str,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Result<Imap, MailboxError> {
        let server = url.to_string();
        let tcp = connect::tcp(url).await?;
        let stream = match url.security {
            Security::Tls => {
                let stream = connect::tls(tcp, url, tls).await?;
                let mut client = async_imap::Client::new(stream);
                greeting(&server, &mut client).await?;
                client.into_inner()
            }
            Security::StartTls => {
                let mut client = async_imap::Client::new(tcp);
                greeting(&server, &mut client).await?;
                within(
                    &server,
                    Step::Tls,
                    client.run_command_and_check_ok("STARTTLS", None),
                )
                .await?;
                connect::tls(client.into_inner(), url, tls).await?
            }
        };
        let client = async_imap::Client::new(stream);
        let login = tokio::time::timeout(connect::TIMEOUT, client.login(&url.user, password));
        let mut session = match login.await {
            Ok(Ok(session)) => session,
            Ok(Err((err @ async_imap::error::Error::No(_), _))) => {
                return Err(MailboxError::caused(&server, Step::Login, "", err)
                    .hinted("check the user and LINKTRACK_MAILBOX_PASSWORD"))
            }
            Ok(Err((err, _))) => return Err(MailboxError::caused(&server, Step::Session, "", err)),
            Err(_) => return Err(MailboxError::new(&server, Step::Session, "login timed out")),
        };
        let capabilities = within(&server, Step::Session, session.capabilities()).await?;
        Ok(Imap {
            can_move: capabilities.has_str("MOVE"),
            uidplus: capabilities.has_str("UIDPLUS"),
            session,
            server,
        })
    }

    /// Make `folder` if it is not there (where read messages go).
    pub(super) async fn ensure_folder(&mut self, folder: &str) -> Result<(), MailboxError> {
        if self.session.create(folder).await.is_ok() {
            return Ok(());
        }
        // Most likely it exists: STATUS says so, or why it cannot be used.
        within(
            &self.server,
            Step::Folder,
            self.session.status(folder, "(MESSAGES)"),
        )
        .await
        .map(|_| ())
        .map_err(|err| err.in_folder(folder))
    }

    /// The messages of `folder` (selected for the rest of the session),
    /// oldest first, without those marked \Deleted, and without those
    /// marked \Seen when `unseen_only`.
    pub(super) async fn list(
        &mut self,
        folder: &str,
        unseen_only: bool,
    ) -> Result<Vec<Listed>, MailboxError> {
        let selected = within(&self.server, Step::Folder, self.session.select(folder))
            .await
            .map_err(|err| err.in_folder(folder))?;
        if selected.exists == 0 {
            return Ok(Vec::new());
        }
        let session = &mut self.session;
        let fetches: Vec<async_imap::types::Fetch> =
            within(&self.server, Step::Session, async move {
                session
                    .uid_fetch("1:*", "(UID RFC822.SIZE FLAGS)")
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        let mut listed: Vec<Listed> = fetches
            .iter()
            .filter(|fetch| {
                !fetch.flags().any(|flag| match flag {
                    Flag::Deleted => true,
                    Flag::Seen => unseen_only,
                    _ => false,
                })
            })
            .filter_map(|fetch| {
                Some(Listed {
                    id: fetch.uid?,
                    size: fetch.size? as usize,
                })
            })
            .collect();
        listed.sort_by_key(|m| m.id);
        listed.dedup();
        Ok(listed)
    }

    /// The message's bytes, its flags untouched; `None` when it is gone
    /// (another client expunged it meanwhile).
    pub(super) async fn fetch(&mut self, uid: u32) -> Result<Option<Vec<u8>>, MailboxError> {
        let session = &mut self.session;
        let fetches: Vec<async_imap::types::Fetch> =
            within(&self.server, Step::Session, async move {
                session
                    .uid_fetch(uid.to_string(), "(UID BODY.PEEK[])")
                    .await?
                    .try_collect()
                    .await
            })
            .await?;
        Ok(fetches
            .iter()
            .find(|fetch| fetch.uid == Some(uid))
            .and_then(|fetch| fetch.body())
            .map(<[u8]>::to_vec))
    }

    /// Move the message to `folder`.
    pub(super) async fn move_to(&mut self, uid: u32, folder: &str) -> Result<(), MailboxError> {
        let set = uid.to_string();
        if self.can_move {
            return within(
                &self.server,
                Step::Session,
                self.session.uid_mv(&set, folder),
            )
            .await;
        }
        within(
            &self.server,
            Step::Session,
            self.session.uid_copy(&set, folder),
        )
        .await?;
        self.delete(uid).await
    }

    /// Add `flags` (`\Seen \Flagged`) to the message.
    pub(super) async fn flag(&mut self, uid: u32, flags: &str) -> Result<(), MailboxError> {
        let session = &mut self.session;
        let query = format!("+FLAGS.SILENT ({flags})");
        within(&self.server, Step::Session, async move {
            session
                .uid_store(uid.to_string(), query)
                .await?
                .try_collect::<Vec<_>>()
                .await
        })
        .await
        .map(|_| ())
    }

    /// Mark the message \Deleted and expunge it.
    pub(super) async fn delete(&mut self, uid: u32) -> Result<(), MailboxError> {
        self.flag(uid, "\\Deleted").await?;
        let session = &mut self.session;
        let uidplus = self.uidplus;
        within(&self.server, Step::Session, async move {
            if uidplus {
                session
                    .uid_expunge(uid.to_string())
                    .await?
                    .try_collect::<Vec<_>>()
                    .await
            } else {
                session.expunge().await?.try_collect::<Vec<_>>().await
            }
        })
        .await
        .map(|_| ())
    }

    /// Say goodbye; a server that does not answer changes nothing now.
    pub(super) async fn logout(mut self) {
        let _ = tokio::time::timeout(connect::TIMEOUT, self.session.logout()).await;
    }
}

/// The server's first line: `* OK` (or `* PREAUTH`), not `* BYE`.
async fn greeting<T>(server: &str, client: &mut async_imap::Client<T>) -> Result<(), MailboxError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + std::fmt::Debug + Send,
{
    let first = within(server, Step::Connect, client.read_response()).await?;
    match first {
        Some(response) => match response.parsed() {
            async_imap::imap_proto::Response::Data {
                status: async_imap::imap_proto::Status::Bye,
                outcome,
            } => Err(MailboxError::new(
                server,
                Step::Connect,
                format!(
                    "the server said BYE: {}",
                    outcome.information.as_deref().unwrap_or("")
                ),
            )),
            _ => Ok(()),
        },
        None => Err(MailboxError::new(
            server,
            Step::Connect,
            "the connection closed before the greeting",
        )),
    }
}
