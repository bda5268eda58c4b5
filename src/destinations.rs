//! Which addresses a request the server makes on someone's behalf may
//! reach (SSRF): the image proxy's fetches and events out (webhooks). One
//! policy for both (the proxy refused private addresses, the
//! webhooks did not):
//!
//! * only public unicast addresses, judged after decoding every spelling
//!   of an address (the URL parser turns `2130706433`, `0x7f000001`,
//!   `0177.0.0.1` and `127.1` into 127.0.0.1; `[::ffff:127.0.0.1]` is
//!   judged as its IPv4 address);
//! * a host name is resolved and refused if *any* of its addresses is not
//!   allowed, and the connection goes only to the checked addresses
//!   ([`checked_resolver`]: no gap for DNS rebinding between check and
//!   connect);
//! * networks the operator names (`--outbound-allow-private 10.0.0.0/8`)
//!   are allowed besides.
//!
//! Redirects are each caller's: the proxy checks every hop, webhooks follow
//! none.

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// A network an operator allows: `10.0.0.0/8`, `fd00::/8`, or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

/// A text that is no address or network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadNetwork {
    #[error("{text:?} is not an address or network (10.0.0.0/8, fd00::/8)")]
    Address {
        text: String,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("{text:?}: the prefix must be 0 to {max}")]
    Prefix { text: String, max: u8 },
}

impl std::str::FromStr for Network {
    type Err = BadNetwork;

    fn from_str(text: &str) -> Result<Network, BadNetwork> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|source| BadNetwork::Address {
            text: text.to_owned(),
            source,
        })?;
        let addr = canonical(addr);
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix =
            match prefix {
                Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(|| {
                    BadNetwork::Prefix {
                        text: text.to_owned(),
                        max,
                    }
                })?,
                None => max,
            };
        Ok(Network { addr, prefix })
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Network {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// The addresses requests may go to: public ones, and the networks named.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Destinations {
    allowed: Vec<Network>,
}

impl Destinations {
    /// Public unicast addresses only: the default.
    pub fn public_only() -> Destinations {
        Destinations::default()
    }

    /// Public addresses and these networks.
    pub fn allowing(allowed: Vec<Network>) -> Destinations {
        Destinations { allowed }
    }

    /// Public addresses and loopback (127.0.0.0/8, ::1): tests' receivers.
    pub fn allowing_loopback() -> Destinations {
        Destinations::allowing(vec![
            Network {
                addr: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)),
                prefix: 8,
            },
            Network {
                addr: IpAddr::V6(Ipv6Addr::LOCALHOST),
                prefix: 128,
            },
        ])
    }

    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        is_public(ip) || self.allowed.iter().any(|net| net.contains(ip))
    }

    /// The networks allowed besides public addresses.
    pub fn allowed(&self) -> &[Network] {
        &self.allowed
    }

    /// The scheme and a literal address of `url` (decoded by the URL
    /// parser, whatever its spelling); a host name is the resolver's.
    pub fn check_literal(&self, url: &Url) -> Result<(), Refused> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refused(format!(
                "scheme {} is not http or https",
                url.scheme()
            )));
        }
        let ip = match url.host() {
            None => return Err(Refused("no host".into())),
            Some(url::Host::Domain(_)) => return Ok(()),
            Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        };
        if self.allows(ip) {
            Ok(())
        } else {
            Err(Refused(format!(
                "{ip} is not a public address{}",
                self.hint()
            )))
        }
    }

    /// [`Destinations::check_literal`], and every address a host name
    /// resolves to now (at start and in the commands, before a request).
    /// A name that does not resolve is `Ok(false)`: not refused (DNS may be
    /// down), but not checked either (the resolver checks it at send).
    pub async fn check_url(&self, url: &Url) -> Result<bool, Refused> {
        self.check_literal(url)?;
        let Some(url::Host::Domain(host)) = url.host() else {
            return Ok(true);
        };
        let Ok(addrs) = tokio::net::lookup_host((host, 0)).await else {
            return Ok(false);
        };
        for addr in addrs {
            if !self.allows(addr.ip()) {
                return Err(Refused(format!(
                    "{host} resolves to {}, not a public address{}",
                    addr.ip(),
                    self.hint()
                )));
            }
        }
        Ok(true)
    }

    fn hint(&self) -> &'static str {
        " (an internal receiver needs --outbound-allow-private with its network)"
    }
}

/// A destination the policy refuses, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused: {0}")]
pub struct Refused(pub String);

/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are judged as IPv4.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// A public unicast address (after [`canonical`]).
pub fn is_public(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let special = ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking 198.18/15
        || a >= 240; // reserved
    !special
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    // Global unicast is 2000::/3; everything else (loopback, unspecified,
    // unique-local fc00::/7, link-local fe80::/10, multicast ff00::/8) is not.
    let global_unicast = (first & 0xe000) == 0x2000;
    let documentation = first == 0x2001 && ip.segments()[1] == 0x0db8;
    // 6to4 (2002::/16) and Teredo (2001::/32) embed IPv4 addresses we would
    // have to check too; refuse them rather than decode them.
    let tunnel = first == 0x2002 || (first == 0x2001 && ip.segments()[1] == 0);
    global_unicast && !documentation && !tunnel
}

/// Our resolver's refusal; found again by type in reqwest's error chain.
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves to a non-public address")]
pub struct NonPublicAddress {
    host: String,
}

/// A DNS resolver that answers only with addresses the policy allows, and
/// refuses a name if *any* of its addresses is not allowed.
pub struct CheckedResolver {
    destinations: Destinations,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let destinations = self.destinations.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if addrs.is_empty() || addrs.iter().any(|a| !destinations.allows(a.ip())) {
                return Err(Box::new(NonPublicAddress { host }) as _);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The resolver a client that must keep to `destinations` is built with
/// (`reqwest::ClientBuilder::dns_resolver`); literal addresses bypass any
/// resolver, so callers check them with [`Destinations::check_literal`].
pub fn checked_resolver(destinations: Destinations) -> Arc<CheckedResolver> {
    Arc::new(CheckedResolver { destinations })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).unwrap()
    }

    /// Every spelling of loopback and every private range
    /// is refused by default, without a byte sent (the check is on the
    /// parsed URL; `localhost` is resolved, never connected to).
    #[tokio::test]
    async fn every_spelling_of_a_private_address_is_refused() {
        let public = Destinations::public_only();
        for text in [
            "http://2130706433:18555/x",
            "http://0x7f000001:18555/x",
            "http://0177.0.0.1:18555/x",
            "http://127.1:18555/x",
            "http://0.0.0.0:18555/x",
            "http://[::ffff:127.0.0.1]:18555/x",
            "http://[::1]:18555/x",
            "http://169.254.169.254/latest/meta-data",
            "http://10.1.2.3/x",
            "http://172.16.0.1/x",
            "http://192.168.1.1/x",
            "http://100.64.0.1/x",
            "http://[fe80::1]/x",
            "http://[fd00::1]/x",
            "http://localhost:18555/x",
        ] {
            let refused = public.check_url(&url(text)).await;
            assert!(refused.is_err(), "{text} accepted");
        }
        assert!(public.check_url(&url("ftp://example.com/")).await.is_err());
        assert!(public
            .check_literal(&url("https://93.184.215.14/hook"))
            .is_ok());
        assert!(public
            .check_literal(&url("https://[2606:4700::1]/"))
            .is_ok());
    }

    #[tokio::test]
    async fn named_networks_are_allowed_and_only_they() {
        let allowed = Destinations::allowing(vec![
            "127.0.0.0/8".parse().unwrap(),
            "fd00::/8".parse().unwrap(),
        ]);
        for text in [
            "http://2130706433:18555/x",
            "http://127.1:18555/x",
            "http://[::ffff:127.0.0.1]:18555/x",
            "http://[fd00::1]/x",
        ] {
            assert_eq!(allowed.check_url(&url(text)).await, Ok(true), "{text}");
        }
        for text in [
            "http://10.1.2.3/x",
            "http://[fe80::1]/x",
            "http://169.254.169.254/",
        ] {
            assert!(allowed.check_url(&url(text)).await.is_err(), "{text}");
        }
    }

    #[test]
    fn networks_parse_and_contain() {
        let net: Network = "10.0.0.0/8".parse().unwrap();
        assert!(net.contains("10.255.1.2".parse().unwrap()));
        assert!(net.contains("::ffff:10.0.0.1".parse().unwrap()));
        assert!(!net.contains("11.0.0.1".parse().unwrap()));
        let one: Network = "192.0.2.7".parse().unwrap();
        assert_eq!(one.to_string(), "192.0.2.7/32");
        assert!(!one.contains("192.0.2.8".parse().unwrap()));
        let all: Network = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Network>().is_err());
        assert!("ten/8".parse::<Network>().is_err());
    }
}
