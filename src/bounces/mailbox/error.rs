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

/// A mailbox failure: the server (its URL without password), the step
/// and the detail.
#[derive(Debug, thiserror::Error)]
#[error("{server}: {}: {detail}", step_words(*.step))]
pub struct MailboxError {
    pub server: String,
    pub step: Step,
    pub detail: String,
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
    pub(super) fn new(server: &str, step: Step, detail: impl std::fmt::Display) -> MailboxError {
        MailboxError {
            server: server.to_owned(),
            step,
            detail: detail.to_string(),
        }
    }

    /// A setting is wrong (the password, the folder, a certificate the
    /// machine does not trust): trying again cannot help.
    pub fn is_setting(&self) -> bool {
        matches!(self.step, Step::Tls | Step::Login | Step::Folder)
    }
}
