//! Flags of `serve` and `demo`, the commands `cli/serve.rs` runs, and the
//! groups `serve` shares with the mailing commands: bot verdicts, the live
//! layer; and its providers' webhooks.

use super::webhooks::OutboundArgs;
use crate::store::partitions::DEFAULT_KEEP_DAYS;
use clap::Args;
use std::path::PathBuf;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Where `/metrics` and `/readyz` answer by default: loopback only.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9464";

/// The TLS listener and its certificates (docs/domains.md, "Certificates").
#[derive(Debug, Clone, Args)]
pub struct TlsArgs {
    /// Also serve HTTPS on ADDR (usually 0.0.0.0:443), each verified
    /// tracking domain with its own certificate (SNI); the certificates are
    /// the ones stored in the database. Unset: plain HTTP only, TLS left to
    /// a reverse proxy.
    #[arg(long, env = "LINKTRACK_TLS_LISTEN", value_name = "ADDR")]
    pub tls_listen: Option<std::net::SocketAddr>,

    /// Obtain and renew the verified tracking domains' certificates from
    /// this ACME directory (Let's Encrypt's:
    /// https://acme-v02.api.letsencrypt.org/directory), proved by HTTP-01
    /// on --listen, which must be reached as port 80 of each domain.
    #[arg(
        long,
        env = "LINKTRACK_ACME_DIRECTORY",
        value_name = "URL",
        requires = "tls_listen"
    )]
    pub acme_directory: Option<String>,

    /// A PEM root to check the ACME directory's own HTTPS certificate
    /// against instead of the system's (a test or private CA).
    #[arg(
        long,
        env = "LINKTRACK_ACME_CA_FILE",
        value_name = "FILE",
        requires = "acme_directory"
    )]
    pub acme_ca_file: Option<std::path::PathBuf>,

    /// Contact address of the ACME account (the CA's expiry notices).
    #[arg(
        long,
        env = "LINKTRACK_ACME_CONTACT",
        value_name = "ADDRESS",
        requires = "acme_directory"
    )]
    pub acme_contact: Option<String>,

    /// Renew a certificate DAYS days before it ends (default: 30, or a
    /// third of the lifetime of a certificate shorter than 90 days).
    #[arg(long, env = "LINKTRACK_ACME_RENEW_BEFORE_DAYS", value_name = "DAYS",
          value_parser = clap::value_parser!(u32).range(1..=36_500))]
    pub acme_renew_before_days: Option<u32>,

    /// Check the certificates (order what is missing or due, read the
    /// stored ones again) every SECS seconds.
    #[arg(long, env = "LINKTRACK_ACME_CHECK_SECS", value_name = "SECS",
          default_value_t = crate::acme::DEFAULT_CHECK_EVERY.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub acme_check_secs: u64,
}

impl TlsArgs {
    /// The server's TLS settings; `None` without `--tls-listen`.
    pub fn settings(&self) -> Option<crate::server::TlsSettings> {
        use std::time::Duration;
        let listen = self.tls_listen?;
        let acme = self
            .acme_directory
            .clone()
            .map(|directory_url| crate::acme::AcmeSettings {
                directory_url,
                ca_file: self.acme_ca_file.clone(),
                contact: self.acme_contact.iter().cloned().collect(),
                renew_before: self
                    .acme_renew_before_days
                    .map(|days| Duration::from_secs(u64::from(days) * 86_400)),
            });
        Some(crate::server::TlsSettings {
            listen,
            certificates: crate::acme::CertificateSettings {
                acme,
                check_every: Duration::from_secs(self.acme_check_secs),
            },
        })
    }
}

/// Flags of `linktrack serve` (see docs/serve.md).
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "LINKTRACK_LISTEN", default_value = DEFAULT_LISTEN, value_name = "ADDR")]
    pub listen: std::net::SocketAddr,

    /// Address of the operators' listener: `/metrics` and `/readyz` answer
    /// there only (the public listener keeps `/healthz`).
    #[arg(long, env = "LINKTRACK_ADMIN_LISTEN", default_value = DEFAULT_ADMIN_LISTEN, value_name = "ADDR")]
    pub admin_listen: std::net::SocketAddr,

    /// Bearer token `/metrics` and `/readyz` require on the admin listener
    /// (`Authorization: Bearer TOKEN`); unset leaves them open, and the
    /// server warns at start when the admin listener is not on loopback.
    #[arg(
        long,
        env = "LINKTRACK_ADMIN_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub admin_token: Option<String>,

    /// Public base URL of the tracking server, e.g. https://t.example.com
    /// (default: http:// + --listen, with localhost for 0.0.0.0 or [::]).
    #[arg(long, env = "LINKTRACK_BASE_URL", value_name = "URL")]
    pub base_url: Option<String>,

    /// Days of links kept (as `partitions rotate --keep-days`); older tokens
    /// answer 410 Gone without a database read.
    #[arg(long, env = "LINKTRACK_KEEP_DAYS", default_value_t = DEFAULT_KEEP_DAYS, value_name = "DAYS")]
    pub keep_days: u32,

    /// Directory of the event journal: events wait here until they are in
    /// the database, and are replayed from here after a restart.
    #[arg(
        long,
        env = "LINKTRACK_JOURNAL",
        default_value = "journal",
        value_name = "DIR"
    )]
    pub journal: std::path::PathBuf,

    /// `/readyz` answers 503 while the journal's filesystem has less than
    /// BYTES free (the load balancer drains the node before its journal
    /// fails)…
    #[arg(long, env = "LINKTRACK_JOURNAL_MIN_FREE_BYTES", value_name = "BYTES",
          default_value_t = crate::journal::segments::DEFAULT_MIN_FREE_BYTES)]
    pub journal_min_free_bytes: u64,

    /// …and until it has more than BYTES free again (hysteresis: a node
    /// at the edge does not flap).
    #[arg(long, env = "LINKTRACK_JOURNAL_RESUME_FREE_BYTES", value_name = "BYTES",
          default_value_t = crate::journal::segments::DEFAULT_RESUME_FREE_BYTES)]
    pub journal_resume_free_bytes: u64,

    /// Longest wait for the database (connection, then statement) before a
    /// request answers 503.
    #[arg(
        long,
        env = "LINKTRACK_DB_TIMEOUT_MS",
        default_value_t = 1500,
        value_name = "MS"
    )]
    pub db_timeout_ms: u64,

    /// Database connections.
    #[arg(
        long,
        env = "LINKTRACK_DB_CONNECTIONS",
        default_value_t = 16,
        value_name = "N"
    )]
    pub db_connections: u32,

    /// Link lookups (link cache misses) sent to the database at once; the
    /// misses that arrive while all are busy share the next statement, so
    /// fewer makes larger batches, which cost the database less per click
    /// (docs/benchmarks.md compares values).
    #[arg(long, env = "LINKTRACK_LOOKUPS_IN_FLIGHT", value_name = "N",
          default_value_t = crate::server::lookups::DEFAULT_IN_FLIGHT as u32,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub lookups_in_flight: u32,

    /// Close a connection that has not sent a request's complete headers
    /// within SECS seconds; an idle keep-alive connection is closed after
    /// the same time (it is waiting for the next request's headers).
    #[arg(long, env = "LINKTRACK_HEADER_TIMEOUT", default_value_t = 10, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout: u64,

    /// Most client connections open at once (each listener); beyond it new
    /// connections wait in the listen backlog, and the server logs that the
    /// cap was reached. Keep it below the process's file descriptor limit.
    #[arg(long, env = "LINKTRACK_MAX_CONNECTIONS", default_value_t = crate::server::listen::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..), value_name = "N")]
    pub max_connections: usize,

    /// Record the client network from the last X-Forwarded-For entry. Set it
    /// only behind a reverse proxy or load balancer that appends that header.
    #[arg(long, env = "LINKTRACK_TRUST_FORWARDED_FOR")]
    pub trust_forwarded_for: bool,

    /// A folder of the operator's app-link files, served as
    /// `/.well-known/apple-app-site-association` and
    /// `/.well-known/assetlinks.json`: `DIR/HOST/FILE` for a tracking host,
    /// else `DIR/FILE` (docs/domains.md, "App links").
    #[arg(long, env = "LINKTRACK_WELL_KNOWN_DIR", value_name = "DIR")]
    pub well_known_dir: Option<std::path::PathBuf>,

    /// Automatic TLS for the tracking domains (docs/domains.md,
    /// "Certificates").
    #[command(flatten)]
    pub tls: TlsArgs,
    /// A MaxMind-format GeoIP database (GeoLite2/GeoIP2 Country or City
    /// .mmdb): each open and click records the client address's country
    /// (looked up before the address is truncated; only the ISO code is
    /// kept), for the breakdowns by country. Unset: no country is recorded.
    #[arg(long, env = "LINKTRACK_GEOIP", value_name = "FILE")]
    pub geoip: Option<std::path::PathBuf>,

    /// The API's token and key secret.
    #[command(flatten)]
    pub api: super::keys::ApiAccessArgs,

    /// Give each letter tracked by `POST /api/letters` its own envelope
    /// sender, bounces+TOKEN@NAME (VERP), as `build --bounce-domain`
    /// (docs/bounces.md); the answer carries it as `envelope_from`.
    #[arg(long, env = "LINKTRACK_BOUNCE_DOMAIN", value_name = "NAME")]
    pub bounce_domain: Option<String>,

    /// The seal key ring (LINKTRACK_SECRET, which also signs dashboard
    /// logins: unset turns the login form off; and the previous secrets).
    #[command(flatten)]
    pub seal: super::secrets::RingArgs,

    /// Roll events up into the statistics tables every SECS seconds; 0 leaves
    /// it to a separate `linktrack stats rollup --every` process.
    #[arg(
        long,
        env = "LINKTRACK_ROLLUP_EVERY",
        default_value_t = 5,
        value_name = "SECS"
    )]
    pub rollup_every: u64,

    #[command(flatten)]
    pub verdicts: VerdictArgs,

    #[command(flatten)]
    pub live: LiveArgs,

    #[command(flatten)]
    pub outbound: OutboundArgs,

    #[command(flatten)]
    pub hooks: ProviderHookArgs,
}

impl ServeArgs {
    /// The base URL tracked links are served under: --base-url, else derived
    /// from --listen as `demo` does ([`base_url_for_listen`]).
    pub fn base_url(&self) -> String {
        self.base_url
            .clone()
            .unwrap_or_else(|| base_url_for_listen(self.listen))
    }
}

/// `http://` + the listen address; an unspecified address (0.0.0.0, [::])
/// is not one a browser can open, so it becomes `localhost`.
pub fn base_url_for_listen(listen: std::net::SocketAddr) -> String {
    if listen.ip().is_unspecified() {
        format!("http://localhost:{}", listen.port())
    } else {
        format!("http://{listen}")
    }
}

/// How bot verdicts settle (docs/serve.md, "Bot verdicts"); used by `serve`
/// and `stats rollup`, which settle verdicts as they roll events up.
#[derive(Debug, Clone, Args)]
pub struct VerdictArgs {
    /// A hit's verdict is final this long after it happened: the statistics
    /// count it, and events out send it, only then (clicks and opens are
    /// held that long). 0 judges with what is known at the next rollup and
    /// sends events at once with their first verdict.
    #[arg(
        long,
        env = "LINKTRACK_VERDICT_SETTLE_SECS",
        default_value_t = 30,
        value_name = "SECS"
    )]
    pub verdict_settle_secs: u64,
    /// An operator's scanner-networks file (TOML, the format of the shipped
    /// src/bots/networks.toml): its entries are added, its
    /// `remove = [...]` names or ranges are dropped from the shipped list.
    #[arg(long, env = "LINKTRACK_BOT_NETWORKS", value_name = "FILE")]
    pub bot_networks: Option<std::path::PathBuf>,
}

impl VerdictArgs {
    /// How long after it happened a hit's verdict is final.
    pub fn settle(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.verdict_settle_secs)
    }

    /// The verdict rules these settings name (the networks file is read and
    /// checked here: a bad entry is an error naming the file and entry).
    pub fn rules(
        &self,
    ) -> Result<crate::bots::letter_judgement::VerdictRules, crate::bots::networks::NetworksError>
    {
        let networks = match &self.bot_networks {
            Some(path) => crate::bots::networks::Networks::with_operator_file(path)?,
            None => crate::bots::networks::Networks::shipped(),
        };
        Ok(crate::bots::letter_judgement::VerdictRules {
            settle: self.settle(),
            networks,
            ..Default::default()
        })
    }
}

/// The optional Redis live layer.
#[derive(Debug, Clone, Args)]
pub struct LiveArgs {
    /// Redis URL, e.g. redis://127.0.0.1:6379; unset turns the live layer off.
    #[arg(long, env = "REDIS_URL", hide_env_values = true, value_name = "URL")]
    pub redis_url: Option<String>,

    /// Prefix of every Redis key linktrack writes.
    #[arg(long, env = "LINKTRACK_REDIS_PREFIX", default_value = crate::live::DEFAULT_PREFIX, value_name = "PREFIX")]
    pub redis_prefix: String,
}

/// The providers' bounce and complaint webhooks of `serve`
/// (docs/bounces.md, "Provider webhooks"); each is off until configured.
#[derive(Debug, Clone, Args)]
pub struct ProviderHookArgs {
    /// The SNS topic(s) SES publishes bounces and complaints to: turns
    /// `POST /hooks/ses` on; posts from other topics are refused.
    #[arg(
        long = "ses-topic-arn",
        env = "LINKTRACK_SES_TOPIC_ARNS",
        value_delimiter = ',',
        value_name = "ARN"
    )]
    pub ses_topic_arns: Vec<String>,

    /// Extra URL prefixes trusted to serve SNS signing certificates and
    /// subscription confirmations, besides https on
    /// `sns.<region>.amazonaws.com` (an internal mirror; tests).
    #[arg(
        long = "sns-cert-url-prefix",
        env = "LINKTRACK_SNS_CERT_URL_PREFIXES",
        value_delimiter = ',',
        value_name = "URL"
    )]
    pub sns_cert_url_prefixes: Vec<String>,

    /// Mailgun's webhook signing key: turns `POST /hooks/mailgun` on.
    #[arg(
        long,
        env = "LINKTRACK_MAILGUN_SIGNING_KEY",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    pub mailgun_signing_key: Option<String>,

    /// A Mailgun post whose signed timestamp is further than SECS from
    /// now is refused.
    #[arg(long, env = "LINKTRACK_MAILGUN_MAX_AGE", default_value_t = crate::server::hooks::DEFAULT_MAILGUN_MAX_AGE.as_secs(), value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub mailgun_max_age: u64,

    /// Soft bounces (of distinct letters) that suppress an address, as
    /// `bounces ingest --soft-bounces`...
    #[arg(long = "soft-bounces", env = "LINKTRACK_SOFT_BOUNCES", default_value_t = 3, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub soft_bounces: u32,

    /// ...within this many days.
    #[arg(long = "soft-days", env = "LINKTRACK_SOFT_DAYS", default_value_t = 14, value_name = "DAYS",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub soft_days: u32,
}

impl ProviderHookArgs {
    /// The server's settings; a bad `--sns-cert-url-prefix` is an error
    /// naming it.
    pub fn settings(&self) -> anyhow::Result<crate::server::hooks::HookSettings> {
        let sns_trusted = crate::server::hooks::sns::TrustedUrls::new(&self.sns_cert_url_prefixes)?;
        Ok(crate::server::hooks::HookSettings {
            ses_topics: self.ses_topic_arns.clone(),
            sns_trusted,
            mailgun_key: self.mailgun_signing_key.clone().filter(|k| !k.is_empty()),
            mailgun_max_age: std::time::Duration::from_secs(self.mailgun_max_age),
            soft: crate::bounces::SoftPolicy {
                count: self.soft_bounces,
                days: self.soft_days,
            },
        })
    }
}

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Where the demo writes its files: mailing, letters, rejects, journal.
    #[arg(long, default_value = "demo-out", value_name = "DIR")]
    pub dir: PathBuf,

    /// Address the demo's server listens on.
    #[arg(long, env = "LINKTRACK_LISTEN", default_value = DEFAULT_LISTEN, value_name = "ADDR")]
    pub listen: std::net::SocketAddr,

    /// Address of the demo server's `/metrics` and `/readyz`.
    #[arg(long, env = "LINKTRACK_ADMIN_LISTEN", default_value = DEFAULT_ADMIN_LISTEN, value_name = "ADDR")]
    pub admin_listen: std::net::SocketAddr,

    /// Base URL in the built letters (default: http:// + --listen, with
    /// localhost for 0.0.0.0 or [::]).
    #[arg(long, env = "LINKTRACK_BASE_URL", value_name = "URL")]
    pub base_url: Option<String>,

    /// Build and print the URLs, then exit instead of serving.
    #[arg(long)]
    pub no_serve: bool,

    /// The dashboard's login token. Default: the one an earlier run saved
    /// in DIR/dashboard-token (made on the first run), so it stays the same.
    #[arg(
        long,
        env = "LINKTRACK_API_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub api_token: Option<String>,

    /// Make a new dashboard token (and login cookie key) instead of reusing
    /// the saved ones.
    #[arg(long)]
    pub new_token: bool,
}

/// Where `demo` looks for Redis when `REDIS_URL` is not set.
pub const DEFAULT_DEMO_REDIS_URL: &str = "redis://127.0.0.1:6379";
