//! Scanner networks: the published address ranges of mail-security
//! vendors and mail providers' fetchers, each scoped to the event kinds it
//! may judge. The list ships in `networks.toml` (dated, each entry naming
//! its source); an operator's file in the same format adds entries, and
//! its `remove = [...]` drops shipped ones by name or by range.
//!
//! Addresses are matched as the server stores them: truncated to /24
//! (IPv4) or /48 (IPv6). A range narrower than that matches the whole
//! truncated network it lies in: a /26 of a scanner marks its /24.

use crate::kind::EventKind;
use serde::Deserialize;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// The list compiled into the binary.
const SHIPPED: &str = include_str!("networks.toml");

/// What a hit from a range is, for one kind of event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A security scanner following links or fetching for a check: a bot.
    Scanner,
    /// A prefetch that happens whether or not anyone reads: a bot open.
    Machine,
    /// A provider's proxy fetching for a person who opened: a real open.
    Proxy,
}

/// One vendor's ranges.
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    pub name: String,
    pub ranges: Vec<Cidr>,
    /// The role for clicks; `None`: clicks from here are not judged by it.
    pub click: Option<Role>,
    /// The role for opens and image loads.
    pub open: Option<Role>,
}

/// The networks in force: the shipped list with the operator's changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Networks {
    pub networks: Vec<Network>,
}

#[derive(Debug, thiserror::Error)]
pub enum NetworksError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: {source}")]
    Parse {
        origin: String,
        #[source]
        source: toml::de::Error,
    },
    #[error("{origin}: network {name:?}: range {range:?}: {source}")]
    Range {
        origin: String,
        name: String,
        range: String,
        #[source]
        source: BadCidr,
    },
}

/// A text that is no `ADDRESS/PREFIX` range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadCidr {
    #[error("not a range: write ADDRESS/PREFIX")]
    NoSlash,
    #[error("bad address {addr:?}: {source}")]
    Address {
        addr: String,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("bad prefix {prefix:?}: {source}")]
    Prefix {
        prefix: String,
        #[source]
        source: std::num::ParseIntError,
    },
    #[error("prefix {prefix} is longer than {bits} bits")]
    TooLong { prefix: u8, bits: u8 },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    #[allow(dead_code)] // documentation for people; read by nothing
    updated: Option<String>,
    #[serde(default)]
    network: Vec<Entry>,
    /// Names of shipped entries, or ranges, to drop (operator's file only).
    #[serde(default)]
    remove: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    #[serde(default)]
    #[allow(dead_code)]
    vendor: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    source: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    date: Option<String>,
    ranges: Vec<String>,
    click: Option<Role>,
    open: Option<Role>,
}

impl Networks {
    /// The shipped list alone.
    pub fn shipped() -> Networks {
        // The shipped file is checked by a unit test; an error here would
        // be a build of a broken list, so it degrades to no networks.
        parse(SHIPPED, "networks.toml (shipped)")
            .map(|(networks, _)| networks)
            .unwrap_or_else(|err| {
                tracing::error!(%err, "the shipped networks list is unusable");
                Networks::default()
            })
    }

    /// The shipped list changed by the operator's file at `path`.
    pub fn with_operator_file(path: &Path) -> Result<Networks, NetworksError> {
        let text = std::fs::read_to_string(path).map_err(|source| NetworksError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut networks = Networks::shipped();
        let (added, remove) = parse(&text, &path.display().to_string())?;
        networks.remove(&remove);
        networks.networks.extend(added.networks);
        Ok(networks)
    }

    /// Drop the entries named in `remove`, and the ranges it lists.
    fn remove(&mut self, remove: &[String]) {
        let ranges: Vec<Cidr> = remove.iter().filter_map(|r| Cidr::parse(r).ok()).collect();
        self.networks.retain(|n| !remove.contains(&n.name));
        for network in &mut self.networks {
            network.ranges.retain(|range| !ranges.contains(range));
        }
    }

    /// The first network holding `ip` that judges `kind`, with its role.
    pub fn lookup(&self, ip: IpAddr, kind: EventKind) -> Option<(&str, Role)> {
        self.networks.iter().find_map(|network| {
            let role = match kind {
                EventKind::Click => network.click,
                EventKind::Open | EventKind::Image => network.open,
                EventKind::Unsubscribe => None,
            }?;
            network
                .ranges
                .iter()
                .any(|range| range.contains_truncated(ip))
                .then_some((network.name.as_str(), role))
        })
    }
}

fn parse(text: &str, origin: &str) -> Result<(Networks, Vec<String>), NetworksError> {
    let file: File = toml::from_str(text).map_err(|source| NetworksError::Parse {
        origin: origin.to_owned(),
        source,
    })?;
    let mut networks = Vec::with_capacity(file.network.len());
    for entry in file.network {
        let mut ranges = Vec::with_capacity(entry.ranges.len());
        for range in &entry.ranges {
            ranges.push(Cidr::parse(range).map_err(|source| NetworksError::Range {
                origin: origin.to_owned(),
                name: entry.name.clone(),
                range: range.clone(),
                source,
            })?);
        }
        networks.push(Network {
            name: entry.name,
            ranges,
            click: entry.click,
            open: entry.open,
        });
    }
    Ok((Networks { networks }, file.remove))
}

/// An address range: network address and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Result<Cidr, BadCidr> {
        let (addr, prefix) = text.trim().split_once('/').ok_or(BadCidr::NoSlash)?;
        let net: IpAddr = addr.parse().map_err(|source| BadCidr::Address {
            addr: addr.to_owned(),
            source,
        })?;
        let prefix: u8 = prefix.parse().map_err(|source| BadCidr::Prefix {
            prefix: prefix.to_owned(),
            source,
        })?;
        let bits = if net.is_ipv4() { 32 } else { 128 };
        if prefix > bits {
            return Err(BadCidr::TooLong { prefix, bits });
        }
        Ok(Cidr { net, prefix })
    }

    /// Whether `ip`, truncated as the server stores it (/24 or /48), lies
    /// in this range, compared on at most the truncation's prefix.
    pub fn contains_truncated(&self, ip: IpAddr) -> bool {
        match (self.net, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let prefix = self.prefix.min(24);
                same_prefix(u32::from(net).into(), u32::from(ip).into(), prefix, 32)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let prefix = self.prefix.min(48);
                same_prefix(u128::from(net), u128::from(ip), prefix, 128)
            }
            _ => false,
        }
    }
}

fn same_prefix(a: u128, b: u128, prefix: u8, bits: u32) -> bool {
    if prefix == 0 {
        return true;
    }
    let shift = bits - u32::from(prefix);
    (a >> shift) == (b >> shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_shipped_list_parses_and_every_entry_has_a_source_and_a_date() {
        let (networks, remove) = parse(SHIPPED, "shipped").unwrap();
        assert!(remove.is_empty());
        assert!(networks.networks.len() >= 6);
        let file: toml::Value = toml::from_str(SHIPPED).unwrap();
        for entry in file["network"].as_array().unwrap() {
            assert!(entry["source"].as_str().unwrap().contains("https://"));
            assert!(entry["date"].as_str().unwrap().starts_with("20"));
        }
    }

    #[test]
    fn ranges_are_scoped_per_kind() {
        let n = Networks::shipped();
        // Exchange Online Protection scans links and fetches pixels.
        let eop = ip("40.107.3.0");
        assert_eq!(
            n.lookup(eop, EventKind::Click),
            Some(("microsoft_eop", Role::Scanner))
        );
        assert_eq!(
            n.lookup(eop, EventKind::Open),
            Some(("microsoft_eop", Role::Scanner))
        );
        // Apple prefetches pixels; a click from Apple's network is a person.
        let apple = ip("17.58.0.0");
        assert_eq!(
            n.lookup(apple, EventKind::Open),
            Some(("apple_mpp", Role::Machine))
        );
        assert_eq!(n.lookup(apple, EventKind::Click), None);
        assert_eq!(
            n.lookup(ip("66.249.84.0"), EventKind::Open),
            Some(("google_image_proxy", Role::Proxy))
        );
        assert_eq!(n.lookup(ip("192.0.2.0"), EventKind::Click), None);
        assert_eq!(n.lookup(eop, EventKind::Unsubscribe), None);
    }

    #[test]
    fn a_narrow_range_matches_its_truncated_network() {
        let r = Cidr::parse("209.66.100.64/26").unwrap();
        assert!(r.contains_truncated(ip("209.66.100.0")));
        assert!(!r.contains_truncated(ip("209.66.101.0")));
        let v6 = Cidr::parse("2a01:111:f400::/48").unwrap();
        assert!(v6.contains_truncated(ip("2a01:111:f400::")));
        assert!(!v6.contains_truncated(ip("2a01:111:f401::")));
        assert!(!v6.contains_truncated(ip("40.92.0.0")));
    }

    #[test]
    fn the_operators_file_adds_and_removes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("networks.toml");
        std::fs::write(
            &path,
            "remove = [\"apple_mpp\", \"40.107.0.0/16\"]\n\
             [[network]]\nname = \"our_gateway\"\nranges = [\"198.51.100.0/24\"]\nclick = \"scanner\"\n",
        )
        .unwrap();
        let n = Networks::with_operator_file(&path).unwrap();
        assert_eq!(n.lookup(ip("17.58.0.0"), EventKind::Open), None);
        assert_eq!(n.lookup(ip("40.107.3.0"), EventKind::Click), None);
        assert!(n.lookup(ip("40.92.3.0"), EventKind::Click).is_some());
        assert_eq!(
            n.lookup(ip("198.51.100.0"), EventKind::Click),
            Some(("our_gateway", Role::Scanner))
        );
    }

    #[test]
    fn a_bad_range_is_named_with_its_file_and_entry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ours.toml");
        std::fs::write(
            &path,
            "[[network]]\nname = \"x\"\nranges = [\"10.0.0.0/33\"]\nclick = \"scanner\"\n",
        )
        .unwrap();
        let err = Networks::with_operator_file(&path).unwrap_err().to_string();
        assert!(err.contains("ours.toml"), "{err}");
        assert!(err.contains("\"x\""), "{err}");
        assert!(err.contains("10.0.0.0/33"), "{err}");
    }
}
