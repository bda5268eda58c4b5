//! What the commands connect to: the database pool and, when the flags
//! name one, the Redis live layer.

use super::args::serve::LiveArgs;
use crate::live::Live;
use crate::store;
use anyhow::Context;

pub(super) async fn pool(url: &str) -> anyhow::Result<sqlx::MySqlPool> {
    // The error names host, port, user and database, and how to fix it.
    Ok(store::connect(url, &store::PoolSettings::default()).await?)
}

/// The live layer the flags ask for, if any.
pub(super) fn live_layer(args: &LiveArgs) -> anyhow::Result<Option<Live>> {
    args.redis_url
        .as_deref()
        .filter(|u| !u.is_empty())
        .map(|url| Live::new(url, &args.redis_prefix).context("REDIS_URL"))
        .transpose()
}
