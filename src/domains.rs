//! Checking a tracking domain's DNS (docs/domains.md, "Verification"): a
//! domain is verified when its CNAME names the service's host (the base
//! URL's, or `--target`), or when every address it resolves to is one of
//! that host's. The resolver is the system's, or a given name server (the
//! tests point it at a DNS server of their own on loopback).

use crate::store::tracking_domains::DomainState;
use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::TokioResolver;
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The resolver could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the DNS resolver: {0}")]
pub struct ResolverError(#[source] hickory_resolver::net::NetError);

/// What one check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub state: DomainState,
    /// What was found, in a line for `domains list`.
    pub detail: String,
}

pub struct DomainChecker {
    resolver: TokioResolver,
}

impl DomainChecker {
    /// With the system's resolver (`/etc/resolv.conf`), or the name server
    /// at `nameserver` (UDP and TCP).
    pub fn new(nameserver: Option<SocketAddr>) -> Result<DomainChecker, ResolverError> {
        let mut builder = match nameserver {
            None => TokioResolver::builder_tokio().map_err(ResolverError)?,
            Some(address) => {
                let mut server = NameServerConfig::udp_and_tcp(address.ip());
                for connection in &mut server.connections {
                    connection.port = address.port();
                }
                TokioResolver::builder_with_config(
                    ResolverConfig::from_name_servers(vec![server]),
                    TokioRuntimeProvider::default(),
                )
            }
        };
        let options = builder.options_mut();
        options.timeout = Duration::from_secs(5);
        options.attempts = 2;
        // Every check asks again: a record just changed must be seen.
        options.cache_size = 0;
        let resolver = builder.build().map_err(ResolverError)?;
        Ok(DomainChecker { resolver })
    }

    /// Checks that `host` points at `target` (a host name or an address).
    pub async fn check(&self, host: &str, target: &str) -> Check {
        let target = normalise(target);
        let cnames = self.cnames(host).await;
        if cnames.contains(&target) {
            return Check {
                state: DomainState::Verified,
                detail: format!("CNAME {target}"),
            };
        }
        let addresses = self.addresses(host).await;
        let wanted = match target.parse::<IpAddr>() {
            Ok(address) => BTreeSet::from([address]),
            Err(_) => self.addresses(&target).await,
        };
        if !addresses.is_empty() && addresses.is_subset(&wanted) {
            return Check {
                state: DomainState::Verified,
                detail: format!("address {} of {target}", join(&addresses)),
            };
        }
        let found = match (cnames.is_empty(), addresses.is_empty()) {
            (true, true) => "no CNAME or address record".to_owned(),
            _ => format!(
                "CNAME [{}], addresses [{}]",
                cnames.iter().cloned().collect::<Vec<_>>().join(", "),
                join(&addresses)
            ),
        };
        let looked_for = Found {
            cnames: &cnames,
            addresses: &addresses,
            wanted: &wanted,
        };
        Check {
            state: DomainState::Failed,
            detail: format!("{found}; {}", looked_for.what_to_change(host, &target)),
        }
    }

    async fn cnames(&self, host: &str) -> BTreeSet<String> {
        let Ok(lookup) = self.resolver.lookup(fqdn(host), RecordType::CNAME).await else {
            return BTreeSet::new();
        };
        lookup
            .answers()
            .iter()
            .filter_map(|record| match &record.data {
                RData::CNAME(name) => Some(normalise(&name.to_string())),
                _ => None,
            })
            .collect()
    }

    async fn addresses(&self, host: &str) -> BTreeSet<IpAddr> {
        match self.resolver.lookup_ip(fqdn(host)).await {
            Ok(found) => found.iter().collect(),
            Err(_) => BTreeSet::new(),
        }
    }
}

/// What a failed check found, to say what to change.
struct Found<'a> {
    cnames: &'a BTreeSet<String>,
    addresses: &'a BTreeSet<IpAddr>,
    /// The target's addresses.
    wanted: &'a BTreeSet<IpAddr>,
}

impl Found<'_> {
    /// What was expected and what to change in DNS (or in the settings)
    /// for `host` to point at `target`.
    fn what_to_change(&self, host: &str, target: &str) -> String {
        let by_address = target.parse::<IpAddr>().is_ok();
        let expected = if by_address {
            format!("expected the address {target}")
        } else {
            format!(
                "expected CNAME {target} or its addresses [{}]",
                join(self.wanted)
            )
        };
        let extra: BTreeSet<IpAddr> = self.addresses.difference(self.wanted).copied().collect();
        let fix = if by_address && !self.cnames.is_empty() {
            format!(
                "a CNAME names a host, never an address: set LINKTRACK_BASE_URL to the \
                 service's host name (or give --target HOST) to check the CNAME, or give \
                 {host} an A/AAAA record {target} instead"
            )
        } else if !self.cnames.is_empty() {
            format!("change {host}'s CNAME to {target}")
        } else if self.addresses.is_empty() && by_address {
            format!(
                "give {host} an A/AAAA record {target}; for a CNAME, set LINKTRACK_BASE_URL \
                 to the service's host name (or give --target HOST): a CNAME cannot point \
                 at an address"
            )
        } else if self.addresses.is_empty() {
            format!("add a CNAME {host} -> {target}")
        } else {
            let or_cname = if by_address {
                String::new()
            } else {
                format!(", or make it a CNAME to {target}")
            };
            format!(
                "remove {host}'s records for [{}], which are not the service's \
                 (every address must be){or_cname}",
                join(&extra)
            )
        };
        format!("{expected}: {fix}")
    }
}

/// An absolute name, so no search domain is tried.
fn fqdn(host: &str) -> String {
    format!("{}.", host.trim_end_matches('.'))
}

fn normalise(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn join(addresses: &BTreeSet<IpAddr>) -> String {
    addresses
        .iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A text that is no host name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a host name (letters, digits and hyphens in dot-separated labels, such as click.brand.example)")]
pub struct NotAHostName(pub String);

/// A host name as `domains add` takes it: lowercase, no trailing dot,
/// labels of letters, digits and hyphens, at least two of them.
pub fn host_name(text: &str) -> Result<String, NotAHostName> {
    let host = normalise(text.trim());
    let labels_ok = host.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    });
    if host.len() > 253 || !host.contains('.') || !labels_ok {
        return Err(NotAHostName(text.to_owned()));
    }
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(cnames: &[&str], addresses: &[&str], wanted: &[&str]) -> String {
        let cnames = cnames.iter().map(|c| (*c).to_owned()).collect();
        let parse = |list: &[&str]| -> BTreeSet<IpAddr> {
            list.iter().map(|a| a.parse().unwrap()).collect()
        };
        let (addresses, wanted) = (parse(addresses), parse(wanted));
        let target = wanted
            .iter()
            .next()
            .map(IpAddr::to_string)
            .unwrap_or_default();
        Found {
            cnames: &cnames,
            addresses: &addresses,
            wanted: &wanted,
        }
        .what_to_change("click.brand.example", &target)
    }

    #[test]
    fn a_failure_says_what_to_change_and_never_expects_a_cname_to_an_address() {
        let to_address = found(&["elsewhere.example"], &["127.0.0.2"], &["127.0.0.1"]);
        assert!(!to_address.contains("CNAME 127.0.0.1"), "{to_address}");
        assert!(to_address.contains("LINKTRACK_BASE_URL"), "{to_address}");
        let none = found(&[], &[], &["127.0.0.1"]);
        assert!(
            none.contains("an A/AAAA record 127.0.0.1")
                && none.contains("cannot point at an address"),
            "{none}"
        );
        let extra = found(&[], &["127.0.0.1", "::1"], &["127.0.0.1"]);
        assert!(extra.contains("records for [::1]"), "{extra}");
        assert!(!extra.contains("CNAME to"), "{extra}");
    }

    #[test]
    fn host_names_are_lowercased_and_checked() {
        assert_eq!(
            host_name(" Click.Brand.Example. "),
            Ok("click.brand.example".into())
        );
        for bad in ["localhost", "a..b", "-a.b", "a_b.c", "", "ä.example"] {
            assert!(host_name(bad).is_err(), "{bad:?}");
        }
    }
}
