//! Every server of a deployment needs the same endpoints: each server's
//! journal replay queues its own events for the endpoints *it* knows. So a
//! server registers its endpoints in `outbound_endpoints` at start (and
//! refreshes the registration hourly), and warns, once at start, about each
//! endpoint another server (seen within a day) has that it lacks or has
//! differently (target or filter; never the secret, nor the URL's
//! credentials: the description and its fingerprint are made from the
//! redacted URL, `outbound::endpoints::redacted`, so neither is stored).
//! A server with no endpoint at all runs no outbound worker and checks
//! nothing: its request path makes no statement it does not need.
//! The number of such differences is the gauge
//! `linktrack_outbound_endpoint_differences{server}`.

use super::configured::Outbound;
use crate::store::outbox::{self, Registered};
use crate::workers::Stopping;
use sha2::Digest;
use sqlx::MySqlPool;
use std::path::Path;
use std::time::Duration;

/// How often a server marks its registration as current.
const REFRESH_EVERY: Duration = Duration::from_secs(3_600);
/// Other servers' registrations older than this are not compared.
const RECENT: Duration = Duration::from_secs(24 * 3_600);

/// This server's name in the registry: host name and journal directory
/// (each server has a journal of its own; both outlive a restart).
pub(crate) fn server_id(journal: &Path) -> String {
    let uname = rustix::system::uname();
    let host = uname.nodename().to_string_lossy().into_owned();
    let dir = std::path::absolute(journal).unwrap_or_else(|_| journal.to_owned());
    format!("{host}:{}", dir.display())
}

/// What this server registers: its endpoints, described.
fn registrations(outbound: &Outbound, server: &str) -> Vec<Registered> {
    outbound
        .endpoints()
        .iter()
        .map(|endpoint| {
            let description = format!("{} {}", endpoint.target_text(), endpoint.filter_text());
            Registered {
                server: server.to_owned(),
                name: endpoint.name.clone(),
                fingerprint: hex::encode(sha2::Sha256::digest(description.as_bytes())),
                description,
            }
        })
        .collect()
}

/// One sentence per endpoint of `others` that `own` lacks or describes
/// differently.
pub(crate) fn differences(own: &[Registered], others: &[Registered]) -> Vec<String> {
    others
        .iter()
        .filter_map(|other| match own.iter().find(|e| e.name == other.name) {
            None => Some(format!(
                "endpoint {:?} ({}) is configured on server {} but not here: \
                 this server's events will never be queued for it",
                other.name, other.description, other.server
            )),
            Some(mine) if mine.fingerprint != other.fingerprint => Some(format!(
                "endpoint {:?} differs from server {}'s: here {}, there {} \
                 (both servers send its queue; configure it the same everywhere)",
                other.name, other.server, mine.description, other.description
            )),
            Some(_) => None,
        })
        .collect()
}

/// The registry worker of one server.
pub(crate) struct Registry {
    server_pool: MySqlPool,
    outbound: Outbound,
    server: String,
}

impl Registry {
    pub(crate) fn new(server_pool: MySqlPool, outbound: Outbound, server: String) -> Registry {
        Registry {
            server_pool,
            outbound,
            server,
        }
    }

    /// Register and compare (until it once succeeds), then refresh hourly.
    pub(crate) async fn run(self, mut stopping: Stopping) {
        let pool = crate::store::side_pool(&self.server_pool, 1);
        let mut registered = false;
        loop {
            let done = if registered {
                outbox::refresh_registration(&pool, &self.server).await
            } else {
                self.register_and_compare(&pool).await
            };
            match done {
                Ok(()) => registered = true,
                Err(err) => tracing::debug!(%err, "outbound endpoints not registered; will retry"),
            }
            tokio::select! {
                () = tokio::time::sleep(REFRESH_EVERY) => {}
                () = stopping.requested() => break,
            }
        }
        pool.close().await;
    }

    async fn register_and_compare(&self, pool: &MySqlPool) -> Result<(), crate::store::StoreError> {
        let own = registrations(&self.outbound, &self.server);
        outbox::register_endpoints(pool, &self.server, &own).await?;
        let others = outbox::endpoints_of_other_servers(pool, &self.server, RECENT).await?;
        let differences = differences(&own, &others);
        for difference in &differences {
            tracing::warn!("{difference}");
        }
        metrics::gauge!("linktrack_outbound_endpoint_differences", "server" => self.server.clone())
            .set(differences.len() as f64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registered(server: &str, name: &str, description: &str) -> Registered {
        Registered {
            server: server.into(),
            name: name.into(),
            fingerprint: hex::encode(sha2::Sha256::digest(description.as_bytes())),
            description: description.into(),
        }
    }

    #[test]
    fn a_missing_or_different_endpoint_is_named_with_its_server() {
        let own = [registered("a:/j", "crm", "https://crm/ all")];
        let others = [
            registered("b:/j", "crm", "https://crm/ all"),
            registered("b:/j", "pipe", "amqp exchange x all"),
            registered("c:/j", "crm", "https://other/ all"),
        ];
        let found = differences(&own, &others);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with(
            "endpoint \"pipe\" (amqp exchange x all) is configured on server b:/j but not here"
        ));
        assert!(found[1].contains(
            "differs from server c:/j's: here https://crm/ all, there https://other/ all"
        ));
        assert!(differences(&own, &others[..1]).is_empty());
    }
}
