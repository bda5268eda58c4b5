//! Who may hand the relay a message: a client in one of the open networks
//! (`--relay-open-to`), or one that authenticated with a credential that
//! grants `relay:send`. Everyone else is refused at MAIL FROM: the relay
//! is never open.

use crate::api_keys::{KeyVerifier, Scope};
use ipnet::IpNet;
use std::net::IpAddr;

/// Whether `peer` may submit without AUTH.
pub(crate) fn is_open_to(peer: IpAddr, open_to: &[IpNet]) -> bool {
    let peer = match peer {
        // An IPv4 client on a dual-stack socket: compared as IPv4.
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    open_to.iter().any(|net| net.contains(&peer))
}

/// Whether `password` grants the scope `relay:send`: `LINKTRACK_API_TOKEN`
/// (every scope, compared in constant time) or a live API key with the
/// scope. The user name is not checked. A database that cannot answer
/// refuses (the client may try again), logged.
pub(crate) async fn grants_relay_send(keys: &KeyVerifier, password: &[u8]) -> bool {
    let Ok(password) = std::str::from_utf8(password) else {
        return false;
    };
    match keys.verify(password).await {
        Ok(Some(caller)) => caller.scopes.contains(Scope::RelaySend),
        Ok(None) => false,
        Err(err) => {
            tracing::warn!(error = %err, "relay AUTH: the key could not be checked");
            false
        }
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

    #[tokio::test]
    async fn the_api_token_grants_relay_send_and_nothing_else_does_without_keys() {
        // No key secret: only the token is compared, the database never asked.
        let pool = sqlx::MySqlPool::connect_lazy("mysql://root@127.0.0.1:9/none").unwrap();
        let keys = KeyVerifier::new(pool.clone(), None, Some("s3cret-token-0123"));
        assert!(grants_relay_send(&keys, b"s3cret-token-0123").await);
        assert!(!grants_relay_send(&keys, b"s3cret-token-012").await);
        assert!(!grants_relay_send(&keys, b"").await);
        assert!(!grants_relay_send(&keys, b"\xff\xfe").await);
        let off = KeyVerifier::new(pool, None, None);
        assert!(!grants_relay_send(&off, b"").await);
    }
}
