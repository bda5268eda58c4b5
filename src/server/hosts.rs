//! The hosts the public listener answers on (docs/domains.md, "Tracking
//! domains"): with no tracking domain added, every host (as before); once
//! one is, only the base URL's host and the added ones. An unknown `Host`
//! is a 404, never a redirect: a tracking host must not become anyone's
//! open redirector. A link on an unknown host gets the link-error page;
//! the service's own pages (dashboard, login, API) get a page that says
//! which host they are on instead. `/healthz` answers on any host (load
//! balancers probe by address).

use super::error::ServerError;
use crate::locks::ReadWriteEvenPoisoned;
use crate::store::tracking_domains;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sqlx::MySqlPool;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// How long the list of hosts is kept before it is read again: an added
/// domain is answered on within this time.
const REFRESH: Duration = Duration::from_secs(10);

/// The hosts answered on, read from `tracking_domains` when the server
/// starts and then again in the background: a request never waits for the
/// database (a click while the database is away answers within
/// `--db-timeout-ms`, not twice that) and an open reads nothing.
pub(crate) struct KnownHosts {
    pool: MySqlPool,
    base_url: String,
    base_host: Option<String>,
    known: RwLock<Known>,
    refreshing: AtomicBool,
}

/// The added hosts as last read (`None`: never read), and when the last
/// read was started.
#[derive(Default)]
struct Known {
    added: Option<Arc<HashSet<String>>>,
    read_at: Option<Instant>,
}

impl KnownHosts {
    pub(crate) fn new(pool: MySqlPool, base_url: &str) -> KnownHosts {
        let base_host = url::Url::parse(base_url)
            .ok()
            .and_then(|url| url.host_str().map(normalise));
        KnownHosts {
            pool,
            base_url: base_url.trim_end_matches('/').to_owned(),
            base_host,
            known: RwLock::new(Known::default()),
            refreshing: AtomicBool::new(false),
        }
    }

    /// Whether a request for `host` is answered. While the list cannot be
    /// read (the database is down) the last one read is used, and before
    /// any could be read every host is answered: the redirects keep
    /// working from their cache, as they do for any other outage.
    fn answers(self: &Arc<Self>, host: Option<&str>) -> bool {
        let (added, stale) = self.current();
        if stale {
            self.refresh_in_background();
        }
        let Some(added) = added else {
            return true;
        };
        if added.is_empty() {
            return true;
        }
        let Some(host) = host.map(host_without_port).map(normalise) else {
            return false;
        };
        self.base_host.as_deref() == Some(host.as_str()) || added.contains(&host)
    }

    /// The list as last read, and whether it is due to be read again.
    fn current(&self) -> (Option<Arc<HashSet<String>>>, bool) {
        let known = self.known.read_even_poisoned();
        let stale = known.read_at.is_none_or(|at| at.elapsed() >= REFRESH);
        (known.added.clone(), stale)
    }

    /// Read the list now: when the server starts (so no request reads
    /// it), then in the background. `None` when it cannot be read.
    pub(crate) async fn read(&self) -> Option<Arc<HashSet<String>>> {
        self.known.write_even_poisoned().read_at = Some(Instant::now());
        match tracking_domains::hosts(&self.pool).await {
            Ok(hosts) => {
                let added: Arc<HashSet<String>> =
                    Arc::new(hosts.iter().map(|h| normalise(h)).collect());
                self.known.write_even_poisoned().added = Some(added.clone());
                Some(added)
            }
            Err(err) => {
                tracing::debug!(%err, "tracking domains unread: keeping the last list");
                None
            }
        }
    }

    /// Read the list again off the request path, one read at a time.
    fn refresh_in_background(self: &Arc<Self>) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let hosts = Arc::clone(self);
        tokio::spawn(async move {
            hosts.read().await;
            hosts.refreshing.store(false, Ordering::Release);
        });
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
    if hosts.answers(host.as_deref()) {
        next.run(request).await
    } else if is_link(request.uri().path()) {
        ServerError::NotFound.into_response()
    } else {
        not_this_host(&hosts.base_url)
    }
}

/// Whether `path` is one a letter links to (click, pixel, unsubscribe,
/// stop-tracking, image, app-link and ACME files): on an unknown host
/// those are invalid links. Anything else is the service's own pages.
fn is_link(path: &str) -> bool {
    ["/c/", "/o/", "/u/", "/t/", "/i/", "/.well-known/"]
        .iter()
        .any(|prefix| path.starts_with(prefix))
}

/// The service's own pages asked for on a host it does not answer on: a
/// 404 that says where they are (the base URL is the operator's setting,
/// escaped all the same), never a redirect.
fn not_this_host(base_url: &str) -> Response {
    let login = html_escape::encode_double_quoted_attribute(base_url);
    let text = format!(
        "This service answers only on the host of its base URL and its tracking domains \
         (<code>linktrack domains list</code>). The dashboard is at \
         <a href=\"{login}/login\">{}/login</a>.",
        html_escape::encode_text(base_url)
    );
    let mut response = (
        axum::http::StatusCode::NOT_FOUND,
        super::pages::page("Not served on this host", &text),
    )
        .into_response();
    response.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    response
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
