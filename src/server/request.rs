//! What an event records about the request: client network (truncated for
//! privacy), user agent (truncated), and whether it was a `HEAD`.

use super::state::AppState;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method};
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Longest user agent stored (the column is VARCHAR(512)).
pub const MAX_USER_AGENT_CHARS: usize = 512;

#[derive(Debug, Clone)]
pub struct RequestMeta {
    /// The client's /24 (IPv4) or /48 (IPv6) network, when known.
    pub network: Option<IpAddr>,
    pub user_agent: Option<String>,
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
            .map(|v| truncate_chars(&String::from_utf8_lossy(v.as_bytes()), MAX_USER_AGENT_CHARS));
        Ok(RequestMeta {
            network: forwarded.or(peer).map(truncate_ip),
            user_agent,
            is_head: parts.method == Method::HEAD,
        })
    }
}

/// The address our own proxy appended to `X-Forwarded-For`: the last one.
/// Earlier entries come from the client and prove nothing.
fn forwarded_for(headers: &HeaderMap) -> Option<IpAddr> {
    let last_header = headers.get_all("x-forwarded-for").iter().next_back()?;
    let last_entry = last_header.to_str().ok()?.rsplit(',').next()?;
    last_entry.trim().parse().ok()
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
pub fn truncate_ip(ip: IpAddr) -> IpAddr {
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

/// The prologue every tracked-link handler shares: the path's token is
/// well-formed, not expired ([`AppState::check_token`]), and names a stored
/// link ([`AppState::find_link`], through the link cache). Anything else is
/// the handler's rejection: 404 for a bad or unknown token, 503 while the
/// database is away.
pub struct Tracked {
    pub token: crate::token::Token,
    pub link: std::sync::Arc<crate::store::links::StoredLink>,
}

impl FromRequestParts<AppState> for Tracked {
    type Rejection = super::error::ServerError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(text) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|_| super::error::ServerError::NotFound)?;
        let token = state.check_token(&text)?;
        let link = state.find_link(token).await?;
        Ok(Tracked { token, link })
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

    #[test]
    fn user_agents_are_cut_on_character_boundaries() {
        let long = "é".repeat(600);
        assert_eq!(truncate_chars(&long, 512).chars().count(), 512);
        assert_eq!(truncate_chars("Mozilla/5.0", 512), "Mozilla/5.0");
        assert_eq!(truncate_chars("Mozilla/5.0", 7), "Mozilla");
        assert_eq!(truncate_chars("ééé", 4), "ééé", "6 bytes but 3 characters");
    }
}
