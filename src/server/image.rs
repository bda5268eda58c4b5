//! The image proxy behind `GET /i/{token}`: fetches an image URL the builder
//! stored, with the defences a server-side fetcher needs (SSRF):
//!
//! * http(s) only; every address a host resolves to is checked, and the
//!   connection goes only to checked addresses (a filtering DNS resolver, so
//!   there is no gap between check and connect for DNS rebinding): the
//!   policy of `crate::destinations`, which events out share;
//! * redirects are followed by hand, at most [`ImageSettings::max_redirects`],
//!   each hop checked again;
//! * size, total time and content type (`image/*` only) are capped;
//! * bodies are cached in memory by URL, bounded by total bytes, honouring
//!   upstream `Cache-Control: max-age` and `no-store`.

use crate::destinations::Destinations;
use axum::body::Bytes;
use moka::future::Cache;
use reqwest::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use reqwest::{Client, Url};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// Which upstream addresses may be contacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressPolicy {
    /// Only public unicast addresses. The production setting.
    PublicOnly,
    /// Public addresses and loopback: for tests with a local upstream.
    AllowLoopback,
}

impl AddressPolicy {
    pub fn allows(self, ip: IpAddr) -> bool {
        self.destinations().allows(ip)
    }

    /// The shared destination policy (`crate::destinations`) this names.
    pub fn destinations(self) -> Destinations {
        match self {
            AddressPolicy::PublicOnly => Destinations::public_only(),
            AddressPolicy::AllowLoopback => Destinations::allowing_loopback(),
        }
    }
}

/// Limits of the proxy.
#[derive(Debug, Clone)]
pub struct ImageSettings {
    pub policy: AddressPolicy,
    pub max_bytes: usize,
    pub total_timeout: Duration,
    pub max_redirects: usize,
    /// Total bytes of bodies kept in memory.
    pub cache_bytes: u64,
    /// How long a body without `max-age` is kept…
    pub default_ttl: Duration,
    /// …and the most any `max-age` can keep it.
    pub max_ttl: Duration,
}

impl Default for ImageSettings {
    fn default() -> Self {
        ImageSettings {
            policy: AddressPolicy::PublicOnly,
            max_bytes: 5 << 20,
            total_timeout: Duration::from_secs(5),
            max_redirects: 3,
            cache_bytes: 64 << 20,
            default_ttl: Duration::from_secs(600),
            max_ttl: Duration::from_secs(86_400),
        }
    }
}

/// Why an image could not be proxied. "refused" is our check (the
/// address policy), "upstream" the origin's failure.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("refused: bad URL: {0}")]
    BadUrl(#[source] url::ParseError),
    #[error("refused: scheme {0}")]
    Scheme(String),
    #[error("refused: no host")]
    NoHost,
    #[error("refused: non-public address {0}")]
    NonPublic(IpAddr),
    /// Our resolver refused the name (it resolves to a non-public address);
    /// the refusal is in reqwest's chain of causes.
    #[error("refused: {0}")]
    Resolver(#[source] reqwest::Error),
    #[error("upstream: {0}")]
    Request(#[source] reqwest::Error),
    #[error("upstream: redirect without Location")]
    NoLocation,
    #[error("upstream: bad redirect {location:?}: {source}")]
    BadRedirect {
        location: String,
        #[source]
        source: url::ParseError,
    },
    #[error("upstream answered {0}")]
    Status(u16),
    #[error("upstream content type {0:?} is not an image")]
    NotImage(String),
    #[error("upstream content type {content_type:?} is no header value")]
    UnusableContentType {
        content_type: String,
        #[source]
        source: axum::http::header::InvalidHeaderValue,
    },
    #[error("image larger than {0} bytes")]
    TooLarge(usize),
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// An image as served to the client.
#[derive(Debug)]
pub struct Image {
    pub content_type: String,
    pub body: Bytes,
    ttl: Option<Duration>,
}

/// Each entry lives as long as its upstream allowed; an uncacheable one
/// (`ttl: None`) expires as soon as it is stored.
struct ImageExpiry;

impl moka::Expiry<String, Arc<Image>> for ImageExpiry {
    fn expire_after_create(
        &self,
        _url: &String,
        image: &Arc<Image>,
        _created_at: std::time::Instant,
    ) -> Option<Duration> {
        Some(image.ttl.unwrap_or(Duration::ZERO))
    }
}

pub struct ImageProxy {
    client: Client,
    settings: ImageSettings,
    cache: Cache<String, Arc<Image>>,
}

impl ImageProxy {
    pub fn new(settings: ImageSettings) -> Result<Self, reqwest::Error> {
        let client = Client::builder()
            .dns_resolver(crate::destinations::checked_resolver(
                settings.policy.destinations(),
            ))
            // Environment proxies would connect on our behalf, unchecked.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(settings.total_timeout)
            .user_agent(concat!("linktrack-image-proxy/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let cache = Cache::builder()
            .max_capacity(settings.cache_bytes)
            .weigher(|url: &String, image: &Arc<Image>| {
                let bytes = url.len() + image.body.len() + image.content_type.len();
                u32::try_from(bytes).unwrap_or(u32::MAX)
            })
            .expire_after(ImageExpiry)
            .build();
        Ok(ImageProxy {
            client,
            settings,
            cache,
        })
    }

    /// The image at `url`, from the cache or the upstream.
    pub async fn get(&self, url: &str) -> Result<Arc<Image>, Arc<ProxyError>> {
        if let Some(image) = self.cache.get(url).await {
            metrics::counter!("linktrack_image_cache_total", "result" => "hit").increment(1);
            return Ok(image);
        }
        metrics::counter!("linktrack_image_cache_total", "result" => "miss").increment(1);
        // Concurrent misses for one URL (a letter just opened by many) share
        // one upstream fetch. A `no-store` image is handed to those waiters
        // and expires at once (see `ImageExpiry`).
        self.cache
            .try_get_with(url.to_owned(), self.fetch_within_limit(url))
            .await
    }

    async fn fetch_within_limit(&self, url: &str) -> Result<Arc<Image>, ProxyError> {
        let limit = self.settings.total_timeout;
        let image = tokio::time::timeout(limit, self.fetch(url))
            .await
            .map_err(|_| ProxyError::Timeout(limit))??;
        Ok(Arc::new(image))
    }

    /// Fetch, following redirects by hand so every hop is checked.
    async fn fetch(&self, url: &str) -> Result<Image, ProxyError> {
        let mut url = Url::parse(url).map_err(ProxyError::BadUrl)?;
        for _ in 0..=self.settings.max_redirects {
            self.check_target(&url)?;
            let response = self
                .client
                .get(url.clone())
                .send()
                .await
                .map_err(upstream_error)?;
            if response.status().is_redirection() {
                url = next_hop(&url, &response)?;
                continue;
            }
            return self.read_image(response).await;
        }
        Err(ProxyError::TooManyRedirects(self.settings.max_redirects))
    }

    /// Scheme and literal-address checks; host names are checked by the resolver.
    fn check_target(&self, url: &Url) -> Result<(), ProxyError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ProxyError::Scheme(url.scheme().to_owned()));
        }
        let Some(host) = url.host_str() else {
            return Err(ProxyError::NoHost);
        };
        // IPv6 literals come bracketed; a name does not parse as an address.
        let literal = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .ok();
        match literal {
            Some(ip) if !self.settings.policy.allows(ip) => Err(ProxyError::NonPublic(ip)),
            _ => Ok(()),
        }
    }

    async fn read_image(&self, mut response: reqwest::Response) -> Result<Image, ProxyError> {
        if !response.status().is_success() {
            return Err(ProxyError::Status(response.status().as_u16()));
        }
        let content_type = header_text(&response, CONTENT_TYPE).unwrap_or_default();
        if !content_type.to_ascii_lowercase().starts_with("image/") {
            return Err(ProxyError::NotImage(content_type));
        }
        let max = self.settings.max_bytes;
        let declared = header_text(&response, CONTENT_LENGTH).and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|len| len > max) {
            return Err(ProxyError::TooLarge(max));
        }
        let ttl = cache_ttl(
            header_text(&response, CACHE_CONTROL).as_deref(),
            self.settings.default_ttl,
            self.settings.max_ttl,
        );
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(upstream_error)? {
            if body.len() + chunk.len() > max {
                return Err(ProxyError::TooLarge(max));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Image {
            content_type,
            body: Bytes::from(body),
            ttl,
        })
    }
}

fn header_text(response: &reqwest::Response, name: reqwest::header::HeaderName) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn next_hop(from: &Url, response: &reqwest::Response) -> Result<Url, ProxyError> {
    let location = header_text(response, LOCATION).ok_or(ProxyError::NoLocation)?;
    from.join(&location)
        .map_err(|source| ProxyError::BadRedirect { location, source })
}

/// reqwest nests the cause (our resolver's refusal among them): classify
/// by the type of the causes, never by their text, and keep them all.
fn upstream_error(err: reqwest::Error) -> ProxyError {
    let mut refused = false;
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        refused |= cause.is::<crate::destinations::NonPublicAddress>();
        source = cause.source();
    }
    if refused {
        ProxyError::Resolver(err)
    } else {
        ProxyError::Request(err)
    }
}

/// How long to cache a body, from its `Cache-Control`; `None` means don't.
pub fn cache_ttl(
    cache_control: Option<&str>,
    default: Duration,
    max: Duration,
) -> Option<Duration> {
    let Some(value) = cache_control else {
        return Some(default);
    };
    let mut ttl = default;
    for directive in value.split(',').map(|d| d.trim().to_ascii_lowercase()) {
        if matches!(directive.as_str(), "no-store" | "no-cache" | "private") {
            return None;
        }
        if let Some(seconds) = directive.strip_prefix("max-age=") {
            match seconds.trim_matches('"').parse::<u64>() {
                Ok(0) => return None,
                Ok(s) => ttl = Duration::from_secs(s),
                Err(_) => {}
            }
        }
    }
    Some(ttl.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `localhost` passes the literal-address check and is refused by the
    /// resolver; the refusal is recognised by its type in reqwest's chain.
    #[tokio::test]
    async fn a_name_that_resolves_to_loopback_is_refused_not_an_upstream_failure() {
        let proxy = ImageProxy::new(ImageSettings::default()).unwrap();
        let err = proxy.fetch("http://localhost/a.png").await.unwrap_err();
        assert!(matches!(err, ProxyError::Resolver(_)), "{err:?}");
        let said = crate::error_report::chain(&err);
        assert!(said.starts_with("refused: "), "{said}");
        assert!(said.contains("non-public address"), "{said}");
    }

    #[test]
    fn only_public_addresses_pass_the_strict_policy() {
        let strict = AddressPolicy::PublicOnly;
        for refused in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "2001:db8::1",
            "2002:7f00:1::1",
        ] {
            let ip: IpAddr = refused.parse().unwrap();
            assert!(!strict.allows(ip), "{refused} must be refused");
        }
        for allowed in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            let ip: IpAddr = allowed.parse().unwrap();
            assert!(strict.allows(ip), "{allowed} must be allowed");
        }
        let loopback = AddressPolicy::AllowLoopback;
        assert!(loopback.allows("127.0.0.1".parse().unwrap()));
        assert!(!loopback.allows("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn cache_control_sets_the_lifetime() {
        let (d, max) = (Duration::from_secs(600), Duration::from_secs(86_400));
        assert_eq!(cache_ttl(None, d, max), Some(d));
        assert_eq!(
            cache_ttl(Some("public, max-age=60"), d, max),
            Some(Duration::from_secs(60))
        );
        assert_eq!(cache_ttl(Some("max-age=99999999"), d, max), Some(max));
        assert_eq!(cache_ttl(Some("no-store"), d, max), None);
        assert_eq!(cache_ttl(Some("max-age=0"), d, max), None);
    }
}
