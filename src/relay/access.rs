//! Who may hand the relay a message: a client in one of the open networks
//! (`--relay-open-to`), or one that authenticated with a credential that
//! grants `relay:send`. Everyone else is refused at MAIL FROM: the relay
//! is never open.

use ipnet::IpNet;
use std::net::IpAddr;
use subtle::ConstantTimeEq;

/// Whether `peer` may submit without AUTH.
pub(crate) fn is_open_to(peer: IpAddr, open_to: &[IpNet]) -> bool {
    let peer = match peer {
        // An IPv4 client on a dual-stack socket: compared as IPv4.
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    open_to.iter().any(|net| net.contains(&peer))
}

/// Whether `password` grants the scope `relay:send`. Until API keys with
/// scopes exist this is `LINKTRACK_API_TOKEN` (unset: nobody), compared in
/// constant time; the user name is not checked.
pub(crate) fn grants_relay_send(api_token: Option<&str>, password: &[u8]) -> bool {
    match api_token {
        Some(token) if !token.is_empty() => bool::from(token.as_bytes().ct_eq(password)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_networks_are_open() {
        let open: Vec<IpNet> = vec!["127.0.0.3/32".parse().unwrap()];
        assert!(is_open_to("127.0.0.3".parse().unwrap(), &open));
        assert!(!is_open_to("127.0.0.2".parse().unwrap(), &open));
        assert!(is_open_to("::ffff:127.0.0.3".parse().unwrap(), &open));
        assert!(!is_open_to("127.0.0.3".parse().unwrap(), &[]));
    }

    #[test]
    fn the_password_is_the_api_token() {
        assert!(grants_relay_send(
            Some("s3cret-token-0123"),
            b"s3cret-token-0123"
        ));
        assert!(!grants_relay_send(
            Some("s3cret-token-0123"),
            b"s3cret-token-012"
        ));
        assert!(!grants_relay_send(None, b""));
        assert!(!grants_relay_send(Some(""), b""));
    }
}
