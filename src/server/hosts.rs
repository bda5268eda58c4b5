//! The hosts the public listener answers on (docs/domains.md, "Tracking
//! domains"): with no tracking domain added, every host (as before); once
//! one is, only the base URL's host and the added ones. An unknown `Host`
//! is a 404, never a redirect: a tracking host must not become anyone's
//! open redirector. A link on an unknown host gets the link-error page;
//! the service's own pages (dashboard, login, API) get a page that says
//! which host they are on instead. `/healthz` answers on any host (load
//! balancers probe by address).
//!
//! Tracking hosts are per sender (docs/serve.md, "Security"): a link
//! asked for on an added host answers only when its mailing's sender is
//! the host's (the sender domain `build` saved, or its registrable
//! domain); another sender's host, pending or verified, is a 404 for it.
//! The base URL's host answers every sender's links. The check is made
//! where the link's mailing is known (`ServedFor`, read by
//! `request::Tracked` and the pixel).
//!
//! Before any of that, the request must say one host (docs/serve.md,
//! "Security"): two `Host` headers, an absolute-form target whose
//! authority is not the `Host`'s, or a malformed host or port is a 400
//! (RFC 9112 §3.2), so that no layer can read another host than the one
//! checked here.

use super::error::ServerError;
use crate::locks::ReadWriteEvenPoisoned;
use crate::store::tracking_domains;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sqlx::MySqlPool;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// How often the list of hosts is read again, in the background: an added
/// domain is answered on (and unknown hosts refused) within this time.
const REFRESH: Duration = Duration::from_secs(1);

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
    /// The sender of each mailing whose links were asked for on an added
    /// host lately (`None`: built before senders were kept).
    senders: moka::future::Cache<String, Option<Arc<str>>>,
}

/// The added tracking hosts, each with the sender it stands for.
type AddedHosts = HashMap<String, Arc<str>>;

/// The added hosts as last read, each with its sender (`None`: never
/// read), and when the last read was started.
#[derive(Default)]
struct Known {
    added: Option<Arc<AddedHosts>>,
    read_at: Option<Instant>,
}

/// What a request's host allows.
enum Answer {
    /// Every link: the base URL's host, or no tracking domain added (or
    /// the list not read yet).
    Every,
    /// The links of this sender's mailings only.
    Sender(Arc<str>),
    /// Nothing: an unknown host.
    Refused,
}

/// Put on a request asked for on an added tracking host: the links it may
/// serve are its sender's ([`ServedFor::serves`]).
#[derive(Clone)]
pub(crate) struct ServedFor {
    hosts: Arc<KnownHosts>,
    sender: Arc<str>,
}

/// How long a mailing's sender is remembered (a rebuild may change its
/// `from`).
const SENDER_TTL: Duration = Duration::from_secs(60);
/// Longest wait for a mailing's sender; past it the host list alone
/// decides, as it does while the database is away.
const SENDER_READ: Duration = Duration::from_millis(500);

impl ServedFor {
    /// Whether this host serves the links of `mailing`: its sender domain
    /// (or that domain's registrable domain, as the builder falls back to)
    /// is the host's sender. A mailing built before senders were kept is
    /// served on every added host, as before. `read` says whether the
    /// sender may be read from the database when not remembered; while the
    /// database is away (or does not answer within [`SENDER_READ`]) the
    /// host list alone decides, so clicks keep working.
    pub(crate) async fn serves(&self, mailing: &str, read: bool) -> bool {
        let sender = match self.hosts.senders.get(mailing).await {
            Some(sender) => sender,
            None if !read => return true,
            None => {
                let found = tokio::time::timeout(
                    SENDER_READ,
                    crate::store::stats::sender_domain(&self.hosts.pool, mailing),
                )
                .await;
                match found {
                    Ok(Ok(found)) => {
                        let sender: Option<Arc<str>> = found.flatten().map(Arc::from);
                        self.hosts
                            .senders
                            .insert(mailing.to_owned(), sender.clone())
                            .await;
                        sender
                    }
                    Ok(Err(err)) => {
                        tracing::debug!(%err, "mailing's sender unread: the host list decides");
                        return true;
                    }
                    Err(_) => return true,
                }
            }
        };
        let Some(sender) = sender else {
            return true;
        };
        *sender == *self.sender || crate::letter::registrable_domain(&sender) == *self.sender
    }
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
            senders: moka::future::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(SENDER_TTL)
                .build(),
        }
    }

    /// What a request for `host` is answered with. While the list cannot
    /// be read (the database is down) the last one read is used, and
    /// before any could be read every host is answered: the redirects
    /// keep working from their cache, as they do for any other outage.
    fn answers(self: &Arc<Self>, host: Option<&str>) -> Answer {
        let (added, stale) = self.current();
        if stale {
            self.refresh_in_background();
        }
        let Some(added) = added else {
            return Answer::Every;
        };
        if added.is_empty() {
            return Answer::Every;
        }
        let Some(host) = host.map(host_without_port).map(normalise) else {
            return Answer::Refused;
        };
        if self.base_host.as_deref() == Some(host.as_str()) {
            return Answer::Every;
        }
        match added.get(&host) {
            Some(sender) => Answer::Sender(Arc::clone(sender)),
            None => Answer::Refused,
        }
    }

    /// The list as last read, and whether it is due to be read again.
    fn current(&self) -> (Option<Arc<AddedHosts>>, bool) {
        let known = self.known.read_even_poisoned();
        let stale = known.read_at.is_none_or(|at| at.elapsed() >= REFRESH);
        (known.added.clone(), stale)
    }

    /// Read the list now: when the server starts (so no request reads
    /// it), then in the background. `None` when it cannot be read.
    pub(crate) async fn read(&self) -> Option<Arc<AddedHosts>> {
        self.known.write_even_poisoned().read_at = Some(Instant::now());
        match tracking_domains::hosts(&self.pool).await {
            Ok(hosts) => {
                let added: Arc<AddedHosts> = Arc::new(
                    hosts
                        .iter()
                        .map(|(host, sender)| (normalise(host), Arc::from(normalise(sender))))
                        .collect(),
                );
                self.known.write_even_poisoned().added = Some(added.clone());
                Some(added)
            }
            Err(err) => {
                tracing::debug!(%err, "tracking domains unread: keeping the last list");
                None
            }
        }
    }

    /// Read the list every [`REFRESH`] until the last other holder lets
    /// go, so a domain added while no request came is in force by the
    /// next one.
    pub(crate) fn follow(self: &Arc<Self>) {
        let hosts = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REFRESH).await;
                let Some(hosts) = hosts.upgrade() else {
                    return;
                };
                if !hosts.refreshing.swap(true, Ordering::AcqRel) {
                    hosts.read().await;
                    hosts.refreshing.store(false, Ordering::Release);
                }
            }
        });
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

/// Why a request's host is refused with 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadHost {
    #[error("more than one Host header")]
    TwoHosts,
    #[error("the Host header is not text")]
    NotText,
    #[error("the request target's authority {target:?} is not the Host {host:?}")]
    TargetElsewhere { target: String, host: String },
    #[error("malformed host {0:?}")]
    Malformed(String),
}

/// The one host a request names: its `Host` header, or its target's
/// authority (HTTP/2, or HTTP/1.0 without `Host`). `None` when it names
/// none.
pub(crate) fn request_host(request: &Request) -> Result<Option<&str>, BadHost> {
    let mut hosts = request.headers().get_all(axum::http::header::HOST).iter();
    let header = hosts.next();
    if hosts.next().is_some() {
        return Err(BadHost::TwoHosts);
    }
    let header = header
        .map(|value| value.to_str().map_err(|_| BadHost::NotText))
        .transpose()?;
    let target = request.uri().authority().map(|a| a.as_str());
    let host = match (header, target) {
        (Some(header), Some(target)) if !same_authority(header, target) => {
            return Err(BadHost::TargetElsewhere {
                target: target.to_owned(),
                host: header.to_owned(),
            })
        }
        (Some(host), _) | (None, Some(host)) => host,
        (None, None) => return Ok(None),
    };
    if !well_formed_authority(host) {
        return Err(BadHost::Malformed(host.to_owned()));
    }
    Ok(Some(host))
}

/// Two authorities naming the same host and port (case and one trailing
/// dot aside).
fn same_authority(a: &str, b: &str) -> bool {
    let port = |x: &str| {
        x.strip_prefix(host_without_port(x))
            .unwrap_or("")
            .to_owned()
    };
    normalise(host_without_port(a)) == normalise(host_without_port(b)) && port(a) == port(b)
}

/// `host[:port]` as RFC 3986 allows it for a name or address we could be
/// reached by: DNS labels of letters, digits, `-` and `_` (1 to 63 each,
/// one trailing dot at most), or a bracketed IPv6 address; a port of
/// digits within 1..=65535 when present.
pub(crate) fn well_formed_authority(authority: &str) -> bool {
    let host = host_without_port(authority);
    let port = &authority[host.len()..];
    let port_ok = match port.strip_prefix(':') {
        None => port.is_empty(),
        Some(digits) => {
            !digits.is_empty()
                && digits.len() <= 5
                && digits.bytes().all(|b| b.is_ascii_digit())
                && digits
                    .parse::<u32>()
                    .is_ok_and(|p| (1..=65_535).contains(&p))
        }
    };
    port_ok && well_formed_host(host)
}

fn well_formed_host(host: &str) -> bool {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner.parse::<std::net::Ipv6Addr>().is_ok();
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The middleware: a request naming no single well-formed host gets 400,
/// unknown hosts the 404 page.
pub(crate) async fn only_known_hosts(
    State(hosts): State<Arc<KnownHosts>>,
    mut request: Request,
    next: Next,
) -> Response {
    // The host is borrowed from the request while it is judged.
    let answer = match request_host(&request) {
        Ok(_) if request.uri().path() == "/healthz" => Answer::Every,
        Ok(host) => hosts.answers(host),
        Err(bad) => {
            tracing::debug!(%bad, "request refused");
            let text = format!("Bad request: {bad}\n");
            return (axum::http::StatusCode::BAD_REQUEST, text).into_response();
        }
    };
    match answer {
        Answer::Every => next.run(request).await,
        Answer::Sender(sender) => {
            request.extensions_mut().insert(ServedFor {
                hosts: Arc::clone(&hosts),
                sender,
            });
            next.run(request).await
        }
        Answer::Refused if is_link(request.uri().path()) => ServerError::NotFound.into_response(),
        Answer::Refused => not_this_host(&hosts.base_url),
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

    fn request(target: &str, hosts: &[&str]) -> Request {
        let mut builder = Request::builder().uri(target);
        for host in hosts {
            builder = builder.header(axum::http::header::HOST, *host);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn a_request_names_one_well_formed_host_or_is_refused() {
        let host = |target: &str, hosts: &[&str]| {
            request_host(&request(target, hosts)).map(|host| host.map(str::to_owned))
        };
        assert_eq!(
            host("/c/x", &["click.a.example"]),
            Ok(Some("click.a.example".into()))
        );
        assert_eq!(
            host("/c/x", &["click.a.example:8080"]).unwrap().as_deref(),
            Some("click.a.example:8080")
        );
        assert_eq!(host("/c/x", &[]), Ok(None));
        assert_eq!(
            host("/c/x", &["a.example", "b.example"]),
            Err(BadHost::TwoHosts)
        );
        assert_eq!(
            host("/c/x", &["a.example", "a.example"]),
            Err(BadHost::TwoHosts)
        );
        assert!(matches!(
            host("http://evil.test/c/x", &["click.a.example"]),
            Err(BadHost::TargetElsewhere { .. })
        ));
        assert_eq!(
            host("http://Click.A.Example/c/x", &["click.a.example"]),
            Ok(Some("click.a.example".into()))
        );
        assert_eq!(
            host("http://click.a.example/c/x", &[]),
            Ok(Some("click.a.example".into()))
        );
        for bad in [
            "click.a.example..",
            "click..a.example",
            ".click.a.example",
            "click.a.example:99999",
            "click.a.example:0",
            "click.a.example:",
            "click.a.example:80x",
            "cl ick.example",
            "-click.example",
            "[::1",
            "[zz::1]:80",
        ] {
            assert!(
                matches!(host("/c/x", &[bad]), Err(BadHost::Malformed(_))),
                "{bad}"
            );
        }
        for good in [
            "click.a.example.",
            "127.0.0.1:8080",
            "[::1]:80",
            "localhost",
        ] {
            assert!(host("/c/x", &[good]).is_ok(), "{good}");
        }
    }

    #[test]
    fn ports_and_case_do_not_matter() {
        assert_eq!(host_without_port("Click.Example:8080"), "Click.Example");
        assert_eq!(host_without_port("[::1]:80"), "[::1]");
        assert_eq!(host_without_port("t.example"), "t.example");
        assert_eq!(normalise("Click.Example."), "click.example");
    }
}
