//! What can go wrong with a mailbox, said with the server it concerns,
//! and whether a retry can help ([`MailboxError::is_setting`]).

/// Which step failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// No TCP connection (refused, unreachable, timed out).
    Connect,
    /// The TLS handshake or STARTTLS failed (a certificate not trusted,
    /// a server offering no STARTTLS).
    Tls,
    /// The server refused the user and password.
    Login,
    /// The folder to read, or one to move messages to, cannot be used.
    Folder,
    /// The session broke off or the server answered what it should not.
    Session,
}

/// A mailbox failure: the server (its URL without password), the step,
/// what to check, the detail (what the server said, the folder), and the
/// error underneath when there is one (I/O, TLS, the IMAP client's).
#[derive(Debug, thiserror::Error)]
#[error("{server}: {}{}{}", step_words(*.step), hint_words(*.hint), detail_words(.detail))]
pub struct MailboxError {
    pub server: String,
    pub step: Step,
    /// What to check (said after the step): `None`, nothing in particular.
    pub hint: Option<&'static str>,
    /// Empty when the source says it all.
    pub detail: String,
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

fn hint_words(hint: Option<&'static str>) -> String {
    hint.map(|hint| format!(" ({hint})")).unwrap_or_default()
}

fn detail_words(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    }
}

fn step_words(step: Step) -> &'static str {
    match step {
        Step::Connect => "cannot connect",
        Step::Tls => "TLS failed",
        Step::Login => "login refused",
        Step::Folder => "folder",
        Step::Session => "the session failed",
    }
}

impl MailboxError {
    /// A failure seen in what the server did or said, no other error
    /// underneath.
    pub(super) fn new(server: &str, step: Step, detail: impl Into<String>) -> MailboxError {
        MailboxError {
            server: server.to_owned(),
            step,
            hint: None,
            detail: detail.into(),
            source: None,
        }
    }

    /// A failure of `step` because of `source`; `detail` says where (a
    /// folder, a host), or is empty.
    pub(super) fn caused(
        server: &str,
        step: Step,
        detail: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> MailboxError {
        MailboxError {
            source: Some(source.into()),
            ..MailboxError::new(server, step, detail)
        }
    }

    /// The same failure, with what to check.
    pub(super) fn hinted(self, hint: &'static str) -> MailboxError {
        MailboxError {
            hint: Some(hint),
            ..self
        }
    }

    /// The same failure, said as one of `folder`.
    pub(super) fn in_folder(self, folder: &str) -> MailboxError {
        let detail = if self.detail.is_empty() {
            folder.to_owned()
        } else {
            format!("{folder}: {}", self.detail)
        };
        MailboxError {
            step: Step::Folder,
            detail,
            ..self
        }
    }

    /// A setting is wrong (the password, the folder, a certificate the
    /// machine does not trust): trying again cannot help.
    pub fn is_setting(&self) -> bool {
        matches!(self.step, Step::Tls | Step::Login | Step::Folder)
    }
}
