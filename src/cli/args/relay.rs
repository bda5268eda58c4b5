//! Flags of `linktrack relay`, the ones `cli/relay.rs` runs.

use super::mailing::{SmtpSessionArgs, TrackingArgs};
use super::secrets::SecretArgs;
use clap::{Args, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct RelayArgs {
    /// Where the SMTP server listens (a port of 0 picks one; the log says
    /// which).
    #[arg(
        long,
        env = "LINKTRACK_RELAY_LISTEN",
        default_value = "127.0.0.1:2525",
        value_name = "ADDR"
    )]
    pub listen: SocketAddr,

    /// The name the relay gives in its greeting and EHLO reply.
    #[arg(long, default_value = "localhost", value_name = "NAME")]
    pub hostname: String,

    /// The downstream MTA every message goes on to, as `build --smtp`:
    /// smtp://host:port, smtp://host:port?tls=required (STARTTLS),
    /// smtps://… (implicit TLS); user:password@ in the URL for AUTH.
    #[arg(
        long,
        env = "LINKTRACK_SMTP_URL",
        hide_env_values = true,
        value_name = "URL",
        required_unless_present = "pools",
        conflicts_with = "pools"
    )]
    pub smtp: Option<String>,

    /// A pools file (TOML, as `build --pools`): each message goes out
    /// through the MTAs of the pool its X-Linktrack-Pool field names, else
    /// --pool's (docs/relay.md, "Pools"). Takes the place of --smtp.
    #[arg(long, env = "LINKTRACK_POOLS", value_name = "FILE")]
    pub pools: Option<PathBuf>,

    /// The pool of a message without an X-Linktrack-Pool field.
    #[arg(long, default_value = "default", value_name = "NAME")]
    pub pool: String,

    #[command(flatten)]
    pub smtp_sessions: SmtpSessionArgs,

    /// A network that may submit without AUTH (CIDR, e.g. 10.0.0.0/8 or
    /// 127.0.0.1/32), as Postfix's mynetworks; repeatable. Every other
    /// client must authenticate (530 5.7.0): the relay is never open.
    #[arg(long, value_name = "CIDR")]
    pub relay_open_to: Vec<ipnet::IpNet>,

    /// AUTH (PLAIN or LOGIN, any user name): the password is an API key
    /// with the scope relay:send, or the token. With neither a token nor
    /// a key secret, AUTH is off, leaving only --relay-open-to.
    #[command(flatten)]
    pub api: super::keys::ApiAccessArgs,

    /// The spool: accepted messages wait here on disk (fsync'd before the
    /// 250) until the downstream MTA takes them. Keep it across restarts.
    #[arg(
        long,
        env = "LINKTRACK_RELAY_SPOOL",
        default_value = "relay-spool",
        value_name = "DIR"
    )]
    pub spool: PathBuf,

    /// When an accepted message goes downstream: `now`, to the MTA while
    /// the client waits for the reply to DATA (what the MTA took needs no
    /// spool; what it did not take is spooled before the 250), or
    /// `queued`, spooled first and forwarded by the spool worker
    /// (docs/relay.md, "Forwarding").
    #[arg(long, value_enum, value_name = "ACTION", default_value_t = Forward::Now)]
    pub forward: Forward,

    /// Serve the relay's counters (accepted, forwarded, rejected, DKIM
    /// signed and removed, …) for Prometheus at GET /metrics on this
    /// address (off by default; keep it off the public network).
    #[arg(long, env = "LINKTRACK_RELAY_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,

    /// The largest message accepted, in bytes (EHLO's SIZE; larger: 552).
    #[arg(long, default_value_t = 50 * 1024 * 1024, value_name = "BYTES")]
    pub max_message_bytes: usize,

    /// The most recipients of one message (more: 452 4.5.3, and the
    /// client sends the rest in another transaction).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub max_recipients: usize,

    /// The mailing of a message without an X-Linktrack-Mailing field.
    /// Default: relay-YYYY-MM-DD, the UTC day the message arrived.
    #[arg(long, value_name = "ID")]
    pub default_mailing: Option<String>,

    /// A recipient on the suppression list: refused at RCPT TO with 550
    /// 5.7.1 and the reason, or accepted and never forwarded (counted).
    #[arg(long, value_enum, value_name = "ACTION", default_value_t = Suppressed::Refuse)]
    pub suppressed: Suppressed,

    #[command(flatten)]
    pub tracking: TrackingArgs,

    /// Give every letter its own envelope sender, bounces+TOKEN@NAME
    /// (VERP), as `build --bounce-domain` (docs/bounces.md).
    #[arg(long, env = "LINKTRACK_BOUNCE_DOMAIN", value_name = "NAME")]
    pub bounce_domain: Option<String>,

    #[command(flatten)]
    pub seal: SecretArgs,

    /// Offer STARTTLS with this certificate chain (PEM, leaf first); with
    /// --tls-key. Clients then authenticate only after STARTTLS
    /// (docs/relay.md, "STARTTLS").
    #[arg(
        long,
        env = "LINKTRACK_RELAY_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        env = "LINKTRACK_RELAY_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// Offer STARTTLS with the tracking domains' certificates that `serve`
    /// obtained (docs/domains.md, "Certificates"), picked by the name the
    /// client asks for; other names get --tls-cert's.
    #[arg(long, env = "LINKTRACK_RELAY_TLS_FROM_DOMAINS")]
    pub tls_from_domains: bool,

    /// Sign again with this key (PEM, RSA of 2048 bits or more, or
    /// Ed25519) the letters of DOMAIN whose DKIM signature tracking broke,
    /// as d=DOMAIN, s=SELECTOR; repeatable, one per domain (the
    /// environment variable: comma-separated). Without a key for a
    /// letter's domain its broken signature is removed, counted and
    /// logged. The log names the DNS record to publish (docs/relay.md,
    /// "DKIM").
    #[arg(
        long,
        env = "LINKTRACK_RELAY_DKIM_KEYS",
        value_name = "DOMAIN=SELECTOR:FILE",
        value_delimiter = ','
    )]
    pub dkim_key: Vec<crate::relay::DkimKeySpec>,
}

/// `--suppressed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Suppressed {
    Refuse,
    Drop,
}

/// `--forward`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Forward {
    Now,
    Queued,
}
