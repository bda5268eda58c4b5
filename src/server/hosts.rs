//! The hosts the public listener answers on (docs/domains.md, "Tracking
//! domains"): with no tracking domain added, every host (as before); once
//! one is, only the base URL's host and the added ones. An unknown `Host`
//! is a 404, never a redirect: a tracking host must not become anyone's
//! open redirector. `/healthz` answers on any host (load balancers probe
//! by address).

use super::error::ServerError;
use crate::store::tracking_domains;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sqlx::MySqlPool;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// How long the list of hosts is kept before it is read again: an added
/// domain is answered on within this time.
const REFRESH: Duration = Duration::from_secs(10);

pub(crate) struct KnownHosts {
    pool: MySqlPool,
    base_host: Option<String>,
    added: moka::future::Cache<(), Arc<HashSet<String>>>,
}

impl KnownHosts {
    pub(crate) fn new(pool: MySqlPool, base_url: &str) -> KnownHosts {
        let base_host = url::Url::parse(base_url)
            .ok()
            .and_then(|url| url.host_str().map(normalise));
        KnownHosts {
            pool,
            base_host,
            added: moka::future::Cache::builder()
                .max_capacity(1)
                .time_to_live(REFRESH)
                .build(),
        }
    }

    /// Whether a request for `host` is answered. When the list cannot be
    /// read (the database is down) every host is: the redirects keep
    /// working from their cache, as they do for any other outage.
    async fn answers(&self, host: Option<&str>) -> bool {
        let loaded = self
            .added
            .try_get_with((), async {
                tracking_domains::hosts(&self.pool)
                    .await
                    .map(|hosts| Arc::new(hosts.iter().map(|h| normalise(h)).collect()))
            })
            .await;
        let added = match loaded {
            Ok(added) => added,
            Err(err) => {
                tracing::debug!(%err, "tracking domains unread: answering every host");
                return true;
            }
        };
        if added.is_empty() {
            return true;
        }
        let Some(host) = host.map(host_without_port).map(normalise) else {
            return false;
        };
        self.base_host.as_deref() == Some(host.as_str()) || added.contains(&host)
    }
}

/// The middleware: unknown hosts get the 404 page.
pub(crate) async fn only_known_hosts(
    State(hosts): State<Arc<KnownHosts>>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    let host = request
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|value| value.to_str().ok())
        .or_else(|| request.uri().host())
        .map(str::to_owned);
    if hosts.answers(host.as_deref()).await {
        next.run(request).await
    } else {
        ServerError::NotFound.into_response()
    }
}

fn normalise(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// `click.example:8080` -> `click.example`; `[::1]:80` -> `[::1]`.
pub(crate) fn host_without_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    authority.split(':').next().unwrap_or(authority)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_case_do_not_matter() {
        assert_eq!(host_without_port("Click.Example:8080"), "Click.Example");
        assert_eq!(host_without_port("[::1]:80"), "[::1]");
        assert_eq!(host_without_port("t.example"), "t.example");
        assert_eq!(normalise("Click.Example."), "click.example");
    }
}
