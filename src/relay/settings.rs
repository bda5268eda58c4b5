//! What `linktrack relay` is told: where it listens, where it forwards,
//! who may submit, where it spools, and the limits a client meets.

use crate::delivery::smtp::SmtpSettings;
use ipnet::IpNet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Every setting of the relay, made by `cli/relay.rs` from its flags.
#[derive(Debug, Clone)]
pub struct RelaySettings {
    /// The address the SMTP server listens on.
    pub listen: SocketAddr,
    /// The name said in the greeting and EHLO reply.
    pub hostname: String,
    /// The downstream MTA (the `build --smtp` settings); with `pools`, the
    /// retries, backoff and messages per connection of every pool's MTAs.
    pub smtp: SmtpSettings,
    /// The pools file (`build --pools`): a message's `X-Linktrack-Pool`
    /// (else `default_pool`) picks the MTAs it goes out through.
    pub pools: Option<PathBuf>,
    /// The pool of a message without `X-Linktrack-Pool`.
    pub default_pool: String,
    /// Networks that may submit without AUTH (Postfix's `mynetworks`).
    pub open_to: Vec<IpNet>,
    /// `LINKTRACK_API_TOKEN`: an AUTH password with every scope.
    pub api_token: Option<String>,
    /// `LINKTRACK_API_KEY_SECRET` (else `secret`): API keys with the scope
    /// `relay:send` are AUTH passwords too. With neither this, `secret`
    /// nor `api_token`, only `open_to` may submit.
    pub api_key_secret: Option<String>,
    /// The spool: accepted messages wait here, on disk, until forwarded.
    pub spool: PathBuf,
    /// Hand each accepted message to the MTA while its client waits
    /// (`--forward now`); what the MTA does not take at once is spooled.
    /// `false`: every message is spooled first.
    pub forward_now: bool,
    /// `GET /metrics` on this address (`--metrics-listen`); `None`: off.
    pub metrics_listen: Option<SocketAddr>,
    /// The largest message accepted (EHLO's SIZE).
    pub max_message_bytes: usize,
    /// The most RCPT TOs in one transaction.
    pub max_recipients: usize,
    /// The mailing of a message without `X-Linktrack-Mailing` (`None`:
    /// `relay-YYYY-MM-DD`, the UTC day it arrived).
    pub default_mailing: Option<String>,
    /// What happens to a suppressed recipient.
    pub suppressed: SuppressedAction,
    /// Where tracked URLs point (`LINKTRACK_BASE_URL`).
    pub base_url: String,
    /// `LINKTRACK_BOUNCE_DOMAIN`: each letter's envelope sender becomes its
    /// VERP address there.
    pub bounce_domain: Option<String>,
    /// `LINKTRACK_SECRET`: the tokens' seal.
    pub secret: Option<String>,
    /// How long a message that keeps failing temporarily downstream waits
    /// between rounds, at first (it doubles, up to an hour).
    pub retry_after: Duration,
    /// STARTTLS: the certificates shown (off by default).
    pub tls: super::tls::RelayTls,
    /// How the in-memory suppression, opt-out and erasure lists follow
    /// their change logs (`refresh_every`: how soon a change is honoured).
    pub privacy: crate::privacy::PrivacySettings,
    /// `--dkim-key`: the keys that sign again the letters whose upstream
    /// DKIM signature tracking broke, by the From address's domain.
    pub dkim_keys: Vec<super::dkim::DkimKeySpec>,
}

/// What the relay does with a recipient on the suppression list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuppressedAction {
    /// `550 5.7.1` at RCPT TO, with the reason.
    Refuse,
    /// Accepted, never forwarded, counted.
    Drop,
}
