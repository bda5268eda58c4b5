//! Flags of `demo`.

use super::serve::{DEFAULT_ADMIN_LISTEN, DEFAULT_LISTEN};
use clap::Args;
use std::path::PathBuf;

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
