//! `linktrack domains`: tracking domains per sender (docs/domains.md,
//! "Tracking domains").

use clap::{Args, Subcommand};
use std::net::SocketAddr;

#[derive(Debug, Subcommand)]
pub enum DomainsCommand {
    /// Add a tracking host for the letters of a sender's domain, pending
    /// verification (e.g. `domains add click.brand.example --for
    /// brand.example`). Its DNS must point at this service: a CNAME to the
    /// base URL's host, or the same addresses; then `domains verify`.
    Add(DomainsAddArgs),
    /// Remove a tracking host: letters built afterwards use the base URL;
    /// links already sent on it answer 404 once no server knows the host.
    Remove(DomainsRemoveArgs),
    /// Every tracking host: its sender's domain, its state (pending,
    /// verified, failed) and what the last check found.
    List,
    /// Check that each host (every one when none is named) points at this
    /// service and record the result: letters of a sender use its host only
    /// once verified.
    Verify(DomainsVerifyArgs),
}

#[derive(Debug, Clone, Args)]
pub struct DomainsAddArgs {
    /// The tracking host, e.g. click.brand.example.
    #[arg(value_name = "HOST")]
    pub host: String,
    /// The domain of the mailings' `from` address it stands for, e.g.
    /// brand.example (a `from` on a subdomain of it uses it too).
    #[arg(long = "for", value_name = "DOMAIN")]
    pub sender: String,
    /// The base URL, named when the first domain is added: from then on the
    /// servers answer links on its host and the tracking hosts only.
    #[command(flatten)]
    pub tracking: super::mailing::TrackingArgs,
}

#[derive(Debug, Clone, Args)]
pub struct DomainsRemoveArgs {
    /// The tracking host to remove.
    #[arg(value_name = "HOST")]
    pub host: String,
}

#[derive(Debug, Clone, Args)]
pub struct DomainsVerifyArgs {
    /// The hosts to check (default: every one).
    #[arg(value_name = "HOST")]
    pub hosts: Vec<String>,
    /// What the hosts must point at: a host name (their CNAME, or its
    /// addresses) or an address. Default: the host of LINKTRACK_BASE_URL.
    #[arg(long, value_name = "HOST|ADDR")]
    pub target: Option<String>,
    /// Ask this name server (UDP and TCP) instead of the system's resolver.
    #[arg(long, env = "LINKTRACK_NAMESERVER", value_name = "ADDR")]
    pub nameserver: Option<SocketAddr>,
    #[command(flatten)]
    pub tracking: super::mailing::TrackingArgs,
}
