//! `bounces fetch`: the bounce mailbox read where it lives, over IMAP or
//! POP3 with TLS or STARTTLS (`address.rs` reads its URL, `connect.rs`
//! connects, `imap.rs` and `pop3.rs` speak each protocol, `error.rs` says
//! what failed), each message acted on as `bounces ingest` acts on a file
//! and only then moved, flagged or deleted (`pass.rs`).

mod address;
mod connect;
mod error;
mod imap;
mod pass;
mod pop3;

pub use address::{MailboxUrl, Protocol, Security, UrlError};
pub use error::{MailboxError, Step};
pub use pass::{pass, After, Disposal, Pass, PassError};
