//! What an event records about the request: client network (truncated for
//! privacy), user agent (truncated), and whether it was a `HEAD`.

use super::error::ServerError;
use super::hosts::ServedFor;
use super::state::{AppState, ServedLink};
use crate::kind::{LinkKind, TokenKind};
use crate::store::link_templates::LinkTemplate;
use crate::token::{Opened, Plaintext, Token};
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method};
use std::convert::Infallible;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// Longest user agent stored (the column is VARCHAR(512)).
pub(crate) const MAX_USER_AGENT_CHARS: usize = 512;

#[derive(Debug, Clone)]
pub(crate) struct RequestMeta {
    /// The client's /24 (IPv4) or /48 (IPv6) network, when known.
    pub network: Option<IpAddr>,
    pub user_agent: Option<String>,
    /// The country of the whole client address (before truncation), when
    /// the server has a GeoIP database that knows it.
    pub country: Option<String>,
    pub is_head: bool,
}

impl FromRequestParts<AppState> for RequestMeta {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip());
        let forwarded = state
            .settings
            .trust_forwarded_for
            .then(|| forwarded_for(&parts.headers))
            .flatten();
        let user_agent = parts
            .headers
            .get(header::USER_AGENT)
            .map(|v| user_agent_text(v.as_bytes()));
        let client = forwarded.or(peer);
        // Looked up from the whole address: the truncated network may lie
        // across a country's border, and only the code is kept.
        let country = state
            .settings
            .geoip
            .as_ref()
            .zip(client)
            .and_then(|(geoip, ip)| geoip.country(ip));
        Ok(RequestMeta {
            network: client.map(truncate_ip),
            user_agent,
            country,
            is_head: parts.method == Method::HEAD,
        })
    }
}

/// The address our own proxy appended to `X-Forwarded-For`: the last one.
/// Earlier entries come from the client and prove nothing.
pub(crate) fn forwarded_for(headers: &HeaderMap) -> Option<IpAddr> {
    let last_header = headers.get_all("x-forwarded-for").iter().next_back()?;
    let last_entry = last_header.to_str().ok()?.rsplit(',').next()?;
    last_entry.trim().parse().ok()
}

/// The user agent as stored: its bytes as UTF-8 (invalid sequences
/// replaced, as `String::from_utf8_lossy` does), at most
/// [`MAX_USER_AGENT_CHARS`] characters. A valid header (nearly every one:
/// browsers send ASCII) is checked by `str::from_utf8`, which takes ASCII
/// words at a time, instead of the lossy decoder's chunk by chunk; the
/// result is the same.
fn user_agent_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => truncate_chars(text, MAX_USER_AGENT_CHARS),
        Err(_) => truncate_chars(&String::from_utf8_lossy(bytes), MAX_USER_AGENT_CHARS),
    }
}

/// The first `max` characters of `text`, copied once (the header's bytes
/// are borrowed until here).
fn truncate_chars(text: &str, max: usize) -> String {
    // No more bytes than `max` means no more characters: the usual user
    // agent is copied without counting its characters one by one.
    if text.len() <= max {
        return text.to_owned();
    }
    let end = text
        .char_indices()
        .nth(max)
        .map_or(text.len(), |(at, _)| at);
    text[..end].to_owned()
}

/// Zero the host part: keep a /24 of IPv4 and a /48 of IPv6.
pub(crate) fn truncate_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            IpAddr::V4(Ipv4Addr::new(a, b, c, 0))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], 0, 0, 0, 0, 0))
        }
    }
}

/// Longest a request body may take to arrive, first byte to last, unless
/// the server's settings say otherwise (the header timeout: a slow body
/// holds a connection no longer than slow headers could).
pub(crate) const DEFAULT_BODY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Largest form body the server reads (the login form's token).
pub(crate) const MAX_FORM_BYTES: usize = 4 * 1024;

/// Why a request body was not read (a body trickled in a byte at
/// a time must not hold a connection).
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyRefused {
    #[error("the request body did not arrive within {} s", .0.as_secs())]
    TooSlow(std::time::Duration),
    #[error("the request body is larger than {0} bytes")]
    TooLarge(usize),
    #[error("the request body could not be read: {0}")]
    Unreadable(#[source] axum::Error),
}

impl axum::response::IntoResponse for BodyRefused {
    fn into_response(self) -> axum::response::Response {
        use axum::http::StatusCode;
        let status = match self {
            BodyRefused::TooSlow(_) => StatusCode::REQUEST_TIMEOUT,
            BodyRefused::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            BodyRefused::Unreadable(_) => StatusCode::BAD_REQUEST,
        };
        let reason = match self {
            BodyRefused::TooSlow(_) => "too_slow",
            BodyRefused::TooLarge(_) => "too_large",
            BodyRefused::Unreadable(_) => "unreadable",
        };
        metrics::counter!("linktrack_request_bodies_refused_total", "reason" => reason)
            .increment(1);
        // The rest of the body is never read: the connection closes.
        (status, [(header::CONNECTION, "close")], format!("{self}\n")).into_response()
    }
}

/// The whole body of a request, within `limit` bytes and `deadline` from
/// now; a `Content-Length` over the limit is refused before any byte is read.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: axum::body::Body,
    limit: usize,
    deadline: std::time::Duration,
) -> Result<axum::body::Bytes, BodyRefused> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(BodyRefused::TooLarge(limit));
    }
    match tokio::time::timeout(deadline, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(err)) => Err(BodyRefused::Unreadable(err)),
        Err(_) => Err(BodyRefused::TooSlow(deadline)),
    }
}

/// A route's token kind: the one place a route says which tokens it serves.
pub(crate) trait Route: Send + Sync + 'static {
    /// The kinds of token the route serves.
    const KINDS: &'static [TokenKind];
    /// The link kind of its rows (legacy tokens are checked against it).
    const LINK: LinkKind;
    /// What follows the token in the path (`.gif` for the pixel).
    const SUFFIX: &'static str = "";
    /// Whether the route serves a row of this kind (a legacy token's kind
    /// is its row's).
    fn serves(kind: LinkKind) -> bool {
        kind == Self::LINK
    }
}

/// `/c/`: clicks (and, once issued, honeypot links, which `/c/` serves).
pub(crate) struct ClickRoute;
/// `/o/{token}.gif`: the open pixel.
pub(crate) struct PixelRoute;
/// `/i/`: proxied images.
pub(crate) struct ImageRoute;
/// `/u/` (GET and POST): unsubscribe.
pub(crate) struct UnsubscribeRoute;
/// `/t/` (GET and POST): "stop tracking me".
pub(crate) struct OptOutRoute;

impl Route for ClickRoute {
    const KINDS: &'static [TokenKind] = &[TokenKind::Click, TokenKind::Honeypot];
    const LINK: LinkKind = LinkKind::Click;
    fn serves(kind: LinkKind) -> bool {
        matches!(kind, LinkKind::Click | LinkKind::Honeypot)
    }
}
impl Route for PixelRoute {
    const KINDS: &'static [TokenKind] = &[TokenKind::Pixel];
    const LINK: LinkKind = LinkKind::Pixel;
    const SUFFIX: &'static str = ".gif";
}
impl Route for ImageRoute {
    const KINDS: &'static [TokenKind] = &[TokenKind::Image];
    const LINK: LinkKind = LinkKind::Image;
}
impl Route for UnsubscribeRoute {
    const KINDS: &'static [TokenKind] = &[TokenKind::Unsubscribe];
    const LINK: LinkKind = LinkKind::Unsubscribe;
}
impl Route for OptOutRoute {
    const KINDS: &'static [TokenKind] = &[TokenKind::TrackingOptOut];
    const LINK: LinkKind = LinkKind::OptOut;
}

/// A token checked for route `R` without a database read (docs/token.md):
/// well-formed, not dated after tomorrow, and, if sealed, of one of the
/// route's kinds. A wrong kind is 404 before anything is read or recorded.
/// `expired` says its day is past the retention window (its row is gone).
pub(crate) struct RouteToken<R> {
    pub token: Token,
    /// What the token seals; `None` for a legacy token, or while the seal
    /// is not yet loaded (the database has not answered since the start).
    pub sealed: Option<Plaintext>,
    pub expired: bool,
    /// When the token was checked: the hit's time, when it is recorded.
    pub checked_at: chrono::DateTime<chrono::Utc>,
    route: PhantomData<R>,
}

/// Why a path's token is refused before any database read.
#[derive(Debug)]
pub enum TokenRefusal {
    /// Not a token of ours at all (malformed, dated after tomorrow).
    Malformed,
    /// A sealed token of another kind than the route's (or of a kind never
    /// issued): a token of one route tried on another, or a forged one.
    WrongKind,
}

impl From<TokenRefusal> for ServerError {
    fn from(_: TokenRefusal) -> ServerError {
        ServerError::NotFound
    }
}

impl axum::response::IntoResponse for TokenRefusal {
    fn into_response(self) -> axum::response::Response {
        ServerError::from(self).into_response()
    }
}

impl<R: Route> FromRequestParts<AppState> for RouteToken<R> {
    type Rejection = TokenRefusal;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        // The token is the path's last segment (every token route is
        // `/x/{token}`), read in place; one with a percent escape is left
        // to axum's `Path`, which decodes it (and refuses what does not
        // decode). The segment as it is spared an allocation and serde's
        // machinery on every hit.
        let decoded;
        let text = match last_segment(parts.uri.path()) {
            Some(range) => parts.uri.path().get(range).unwrap_or_default(),
            None => {
                let axum::extract::Path(text) =
                    axum::extract::Path::<String>::from_request_parts(parts, state)
                        .await
                        .map_err(|_| TokenRefusal::Malformed)?;
                decoded = text;
                decoded.as_str()
            }
        };
        let text = text
            .strip_suffix(R::SUFFIX)
            .ok_or(TokenRefusal::Malformed)?;
        let checked_at = chrono::Utc::now();
        let (token, expired) = state
            .check_token_at(text, checked_at)
            .map_err(|_| TokenRefusal::Malformed)?;
        // The current key opens every token sealed since the last rotation
        // at the first try; the ring's other keys are tried only when it
        // gives a kind this route does not serve (docs/token.md).
        let sealed = match state.seal() {
            Some(ring) => match ring.open_fitting(&token, |kind| R::KINDS.contains(&kind)) {
                Some(Opened::Sealed(plain)) => Some(plain),
                Some(Opened::Legacy) => None,
                None => {
                    metrics::counter!("linktrack_wrong_kind_tokens_total").increment(1);
                    return Err(TokenRefusal::WrongKind);
                }
            },
            None => None,
        };
        Ok(RouteToken {
            token,
            sealed,
            expired,
            checked_at,
            route: PhantomData,
        })
    }
}

/// Where the last segment of `path` lies, when it has no percent escape
/// (then it is the route's parameter as axum's `Path` would give it).
fn last_segment(path: &str) -> Option<std::ops::Range<usize>> {
    // One backward pass over a short segment (`rfind` then `contains`
    // read it twice).
    for (at, byte) in path.bytes().enumerate().rev() {
        match byte {
            b'/' => return Some(at + 1..path.len()),
            b'%' => return None,
            _ => {}
        }
    }
    None
}

/// What a token of route `R` names: its stored link (the row), or, once the
/// row is gone, the link template it was made from.
pub(crate) enum Tracked<R> {
    Live {
        token: Token,
        link: Arc<ServedLink>,
    },
    /// The row is gone (its partition dropped); the token's template says
    /// where the link led, and nothing about who it was sent to.
    Late {
        token: Token,
        template: Arc<LinkTemplate>,
        route: PhantomData<R>,
    },
    /// The database did not answer; the token's template, held in memory
    /// (`offline_targets.rs`), says where the link leads. The hit is
    /// journaled with its token alone: the replay names its letter.
    Unreached {
        token: Token,
        template: Arc<LinkTemplate>,
        route: PhantomData<R>,
    },
}

impl<R: Route> FromRequestParts<AppState> for Tracked<R> {
    type Rejection = ServerError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let checked = RouteToken::<R>::from_request_parts(parts, state).await?;
        let token = checked.token;
        let found = if checked.expired {
            Err(ServerError::Gone)
        } else {
            state.find_link(token).await
        };
        let tracked = match found {
            // A legacy token's kind is its row's (a sealed one's was checked).
            Ok(link) if R::serves(link.kind) => Ok(Tracked::Live { token, link }),
            Ok(_) => Err(ServerError::NotFound),
            Err(gone @ (ServerError::NotFound | ServerError::Gone)) => {
                let template = match checked.sealed {
                    Some(_) => {
                        let fits = |kind| R::KINDS.contains(&kind);
                        state.find_late_template(&token, R::LINK, fits).await?
                    }
                    None => None,
                };
                match template {
                    Some(template) => Ok(Tracked::Late {
                        token,
                        template,
                        route: PhantomData,
                    }),
                    None => Err(gone),
                }
            }
            Err(err) if err.is_unavailable() => {
                let fits = |kind| R::KINDS.contains(&kind);
                let held = checked
                    .sealed
                    .and_then(|_| state.offline_template(&token, R::LINK, fits));
                match held {
                    Some(template) => Ok(Tracked::Unreached {
                        token,
                        template,
                        route: PhantomData,
                    }),
                    None => Err(err),
                }
            }
            Err(err) => Err(err),
        }?;
        // On an added tracking host, only its sender's links answer.
        if let Some(served) = parts.extensions.get::<ServedFor>() {
            let (mailing, read) = match &tracked {
                Tracked::Live { link, .. } => (link.mailing_id.as_str(), true),
                Tracked::Late { template, .. } => (template.mailing_id.as_str(), true),
                Tracked::Unreached { template, .. } => (template.mailing_id.as_str(), false),
            };
            if !served.serves(mailing, read).await {
                return Err(ServerError::NotFound);
            }
        }
        Ok(tracked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_truncated() {
        let v4: IpAddr = "203.0.113.77".parse().unwrap();
        assert_eq!(truncate_ip(v4).to_string(), "203.0.113.0");
        let v6: IpAddr = "2001:db8:abcd:12:34::1".parse().unwrap();
        assert_eq!(truncate_ip(v6).to_string(), "2001:db8:abcd::");
    }

    #[test]
    fn the_last_forwarded_address_is_the_trusted_one() {
        let mut headers = HeaderMap::new();
        assert_eq!(forwarded_for(&headers), None);
        headers.append("x-forwarded-for", "6.6.6.6, 198.51.100.7".parse().unwrap());
        assert_eq!(forwarded_for(&headers), "198.51.100.7".parse().ok());
        headers.append("x-forwarded-for", "2001:db8::1".parse().unwrap());
        assert_eq!(forwarded_for(&headers), "2001:db8::1".parse().ok());
        headers.append("x-forwarded-for", "garbage".parse().unwrap());
        assert_eq!(forwarded_for(&headers), None);
    }

    proptest::proptest! {
        /// Any header bytes read as the lossy decoder read them.
        #[test]
        fn user_agents_read_as_the_lossy_decoder_reads_them(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..700),
            ascii in "[ -~]{0,600}",
        ) {
            let lossy = |b: &[u8]| truncate_chars(&String::from_utf8_lossy(b), MAX_USER_AGENT_CHARS);
            proptest::prop_assert_eq!(user_agent_text(&bytes), lossy(&bytes));
            proptest::prop_assert_eq!(user_agent_text(ascii.as_bytes()), lossy(ascii.as_bytes()));
        }
    }

    #[test]
    fn a_path_token_is_read_in_place_unless_it_has_an_escape() {
        let read = |path: &str| last_segment(path).map(|range| path[range].to_owned());
        assert_eq!(
            read("/o/0192f5a0c0de7000800000000000abcd.gif").as_deref(),
            Some("0192f5a0c0de7000800000000000abcd.gif")
        );
        assert_eq!(read("/c/abc").as_deref(), Some("abc"));
        assert_eq!(read("/c/a%62c"), None, "left to Path, which decodes it");
        assert_eq!(read("/c/é"), Some("é".to_owned()));
    }

    #[test]
    fn user_agents_are_cut_on_character_boundaries() {
        let long = "é".repeat(600);
        assert_eq!(truncate_chars(&long, 512).chars().count(), 512);
        assert_eq!(truncate_chars("Mozilla/5.0", 512), "Mozilla/5.0");
        assert_eq!(truncate_chars("Mozilla/5.0", 7), "Mozilla");
        assert_eq!(truncate_chars("ééé", 4), "ééé", "6 bytes but 3 characters");
    }
}
