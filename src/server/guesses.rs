//! One limiter of wrong secrets for every place the server checks one: the
//! stats API's bearer token, the dashboard's session cookie, the login
//! form and the admin listener's token.
//!
//! * **Keyed by client network**, not address: a /24 for IPv4, a /64 for
//!   IPv6 (one customer's allocation), so a client cannot rotate through
//!   the addresses it holds. An IPv4-mapped IPv6 address is its IPv4.
//! * **Counts wrong secrets only**: a request without credentials costs
//!   nothing; [`MAX_WRONG_GUESSES`] wrong ones within [`GUESS_WINDOW`] block
//!   the network for a whole window, and a blocked network is answered 429
//!   with `Retry-After` *before* its credentials are looked at, so a right
//!   token is no use from it either. Guesses that arrive together and were
//!   checked before the block are counted one by one: those past the limit
//!   are answered 429 as well, so never more than the limit hear 401.
//! * **Bounded memory that keeps the blocks**: the counters of networks
//!   live in one bounded cache, which a flood of new addresses may evict;
//!   blocked networks are also kept in a second bounded cache that only a
//!   block enters, evicted least recently blocked first. Unblocking a network
//!   therefore takes as many *other blocked* networks as that cache holds
//!   ([`BLOCKED_NETWORKS`], each needing [`MAX_WRONG_GUESSES`] wrong guesses),
//!   never merely many addresses.

use crate::locks::LockEvenPoisoned;
use axum::extract::ConnectInfo;
use axum::http::{Extensions, HeaderMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Wrong secrets one client network may present within [`GUESS_WINDOW`]
/// before it is blocked for a window.
pub const MAX_WRONG_GUESSES: u32 = 10;
/// How long wrong guesses are remembered, and how long a block lasts.
pub const GUESS_WINDOW: Duration = Duration::from_secs(300);
/// Networks whose wrong guesses are being counted (bounded; evicted first).
pub const COUNTED_NETWORKS: u64 = 100_000;
/// Blocked networks remembered at once (each one took
/// [`MAX_WRONG_GUESSES`] wrong guesses to get here).
pub const BLOCKED_NETWORKS: u64 = 100_000;

/// The network a client address counts under: its /24 (IPv4) or /64 (IPv6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientNetwork {
    V4([u8; 3]),
    V6([u16; 4]),
}

impl ClientNetwork {
    pub fn of(ip: IpAddr) -> ClientNetwork {
        match ip {
            IpAddr::V4(v4) => Self::of_v4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::of_v4(v4),
                None => {
                    let s = v6.segments();
                    ClientNetwork::V6([s[0], s[1], s[2], s[3]])
                }
            },
        }
    }

    fn of_v4(v4: std::net::Ipv4Addr) -> ClientNetwork {
        let [a, b, c, _] = v4.octets();
        ClientNetwork::V4([a, b, c])
    }
}

impl std::fmt::Display for ClientNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientNetwork::V4([a, b, c]) => write!(f, "{a}.{b}.{c}.0/24"),
            ClientNetwork::V6([a, b, c, d]) => {
                let net = std::net::Ipv6Addr::new(*a, *b, *c, *d, 0, 0, 0, 0);
                write!(f, "{net}/64")
            }
        }
    }
}

/// A blocked network's answer: wait this many seconds (at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    pub retry_after_secs: u64,
}

/// Wrong guesses counted in one window: when the first came, how many.
type Window = Arc<Mutex<(Instant, u32)>>;

/// The limiter (cheap to clone: every clone is the same limiter).
#[derive(Clone)]
pub struct GuessLimiter {
    counting: moka::future::Cache<ClientNetwork, Window>,
    /// Blocked networks and until when.
    blocked: moka::future::Cache<ClientNetwork, Instant>,
}

impl Default for GuessLimiter {
    fn default() -> Self {
        GuessLimiter::with_capacity(COUNTED_NETWORKS, BLOCKED_NETWORKS)
    }
}

impl std::fmt::Debug for GuessLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuessLimiter")
            .field("counting", &self.counting.entry_count())
            .field("blocked", &self.blocked.entry_count())
            .finish()
    }
}

impl GuessLimiter {
    /// A limiter counting at most `counted` networks and remembering at most
    /// `blocked` blocked ones.
    pub fn with_capacity(counted: u64, blocked: u64) -> GuessLimiter {
        GuessLimiter {
            counting: moka::future::Cache::builder()
                .max_capacity(counted)
                .time_to_live(GUESS_WINDOW)
                .build(),
            // Least recently blocked goes first, and no admission filter: a
            // new block is always remembered.
            blocked: moka::future::Cache::builder()
                .max_capacity(blocked)
                .time_to_live(GUESS_WINDOW)
                .eviction_policy(moka::policy::EvictionPolicy::lru())
                .build(),
        }
    }

    /// `Err` when the client's network is blocked: answer 429 without
    /// looking at its credentials. A client without an address (none known)
    /// is never blocked.
    pub async fn check(&self, client: Option<IpAddr>) -> Result<(), Blocked> {
        let Some(client) = client else { return Ok(()) };
        let network = ClientNetwork::of(client);
        match self.blocked.get(&network).await {
            Some(until) => match until.checked_duration_since(Instant::now()) {
                Some(left) => Err(Blocked {
                    retry_after_secs: left.as_secs().max(1),
                }),
                None => Ok(()),
            },
            None => Ok(()),
        }
    }

    /// Count one wrong secret from `client`; the one that reaches the limit
    /// blocks its network for a window (and is logged once). `Err` for a
    /// guess past the limit: one that passed [`GuessLimiter::check`] while
    /// the guesses before it were still being counted (concurrent requests)
    /// is answered as blocked too, so no more than [`MAX_WRONG_GUESSES`] are
    /// ever told only that they were wrong.
    pub async fn wrong(&self, client: Option<IpAddr>, what: &'static str) -> Result<(), Blocked> {
        let Some(client) = client else { return Ok(()) };
        let network = ClientNetwork::of(client);
        let window = self
            .counting
            .get_with(network, async { Arc::new(Mutex::new((Instant::now(), 0))) })
            .await;
        let counted = {
            let mut window = window.lock_even_poisoned();
            if window.0.elapsed() >= GUESS_WINDOW {
                *window = (Instant::now(), 0);
            }
            window.1 = window.1.saturating_add(1);
            window.1
        };
        metrics::counter!("linktrack_wrong_secrets_total", "what" => what).increment(1);
        if counted > MAX_WRONG_GUESSES {
            let whole_window = Blocked {
                retry_after_secs: GUESS_WINDOW.as_secs(),
            };
            return Err(self.check(Some(client)).await.err().unwrap_or(whole_window));
        }
        if counted == MAX_WRONG_GUESSES {
            // The window's count stays (it ends with the block), so a guess
            // counted after this one is past the limit whenever it arrives.
            self.blocked
                .insert(network, Instant::now() + GUESS_WINDOW)
                .await;
            metrics::counter!("linktrack_guessing_networks_blocked_total").increment(1);
            tracing::warn!(
                %network,
                what,
                "{MAX_WRONG_GUESSES} wrong secrets from one network: blocked for {} s (429)",
                GUESS_WINDOW.as_secs()
            );
        }
        Ok(())
    }

    /// Blocked networks held now (after pending evictions), for tests.
    pub async fn blocked_count(&self) -> u64 {
        self.blocked.run_pending_tasks().await;
        self.blocked.entry_count()
    }
}

/// The client address the limiter counts: our own proxy's
/// `X-Forwarded-For` when trusted (`--trust-forwarded-for`), else the peer.
pub fn client_address(
    trust_forwarded_for: bool,
    extensions: &Extensions,
    headers: &HeaderMap,
) -> Option<IpAddr> {
    let forwarded = trust_forwarded_for
        .then(|| super::request::forwarded_for(headers))
        .flatten();
    forwarded.or_else(|| {
        extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| peer.ip())
    })
}

/// The 429 every guarded route answers to a blocked network.
pub fn too_many(
    blocked: Blocked,
    body: impl axum::response::IntoResponse,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        [(
            axum::http::header::RETRY_AFTER,
            blocked.retry_after_secs.to_string(),
        )],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn networks_are_slash_24_and_slash_64() {
        let net = |s: &str| ClientNetwork::of(s.parse().unwrap());
        assert_eq!(net("192.0.2.1"), net("192.0.2.254"));
        assert_ne!(net("192.0.2.1"), net("192.0.3.1"));
        assert_eq!(net("2001:db8:1:2::1"), net("2001:db8:1:2:ffff:1:2:3"));
        assert_ne!(net("2001:db8:1:2::1"), net("2001:db8:1:3::1"));
        assert_eq!(net("::ffff:192.0.2.9"), net("192.0.2.1"));
        assert_eq!(net("192.0.2.77").to_string(), "192.0.2.0/24");
        assert_eq!(net("2001:db8:1:2::9").to_string(), "2001:db8:1:2::/64");
    }

    #[tokio::test]
    async fn the_limit_blocks_the_whole_network_and_only_it() {
        let limiter = GuessLimiter::default();
        for n in 0..MAX_WRONG_GUESSES {
            assert_eq!(limiter.check(ip("192.0.2.1")).await, Ok(()), "guess {n}");
            // Rotating through the /24 changes nothing.
            let counted = limiter
                .wrong(ip(&format!("192.0.2.{}", n + 1)), "test")
                .await;
            assert_eq!(counted, Ok(()), "guess {n}");
        }
        let blocked = limiter.check(ip("192.0.2.200")).await.unwrap_err();
        assert!((1..=GUESS_WINDOW.as_secs()).contains(&blocked.retry_after_secs));
        assert_eq!(limiter.check(ip("192.0.3.1")).await, Ok(()));
        assert_eq!(limiter.check(None).await, Ok(()));
    }

    /// A hundred wrong guesses at once, all past `check` before the first
    /// is counted: exactly the limit's worth are told they were wrong, the
    /// rest that they are blocked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_guesses_past_the_limit_are_answered_as_blocked() {
        let limiter = GuessLimiter::default();
        let mut guesses = tokio::task::JoinSet::new();
        for n in 0..100 {
            let limiter = limiter.clone();
            guesses.spawn(async move {
                limiter
                    .wrong(ip(&format!("192.0.2.{}", n + 1)), "test")
                    .await
            });
        }
        let answers = guesses.join_all().await;
        let wrong_only = answers.iter().filter(|answer| answer.is_ok()).count();
        assert_eq!(wrong_only, MAX_WRONG_GUESSES as usize);
        assert!(answers
            .iter()
            .filter_map(|answer| answer.err())
            .all(|blocked| (1..=GUESS_WINDOW.as_secs()).contains(&blocked.retry_after_secs)));
        assert!(limiter.check(ip("192.0.2.9")).await.is_err());
    }

    /// 120,000 other addresses (each its own network, one wrong
    /// guess each) fill the counters many times over and do not unblock.
    #[tokio::test]
    async fn a_flood_of_other_networks_does_not_unblock() {
        let limiter = GuessLimiter::with_capacity(1_000, 1_000);
        for _ in 0..MAX_WRONG_GUESSES {
            let _ = limiter.wrong(ip("2001:db8:aa:ff01::1"), "test").await;
        }
        for n in 0u32..120_000 {
            let (a, b) = (n >> 16, n & 0xffff);
            let _ = limiter
                .wrong(ip(&format!("2001:db8:{a:x}:{b:x}::1")), "test")
                .await;
            if n % 10_000 == 0 {
                limiter.counting.run_pending_tasks().await;
            }
        }
        limiter.counting.run_pending_tasks().await;
        assert!(limiter.counting.entry_count() <= 1_000, "bounded");
        assert_eq!(limiter.blocked_count().await, 1);
        assert!(limiter.check(ip("2001:db8:aa:ff01:9::9")).await.is_err());
    }

    /// When the blocked networks fill their cache, the oldest block goes:
    /// a new block is always remembered.
    #[tokio::test]
    async fn new_blocks_are_always_remembered() {
        let limiter = GuessLimiter::with_capacity(100, 10);
        for net in 0..30u8 {
            for _ in 0..MAX_WRONG_GUESSES {
                let _ = limiter.wrong(ip(&format!("198.51.{net}.1")), "test").await;
            }
        }
        assert!(limiter.blocked_count().await <= 10);
        assert!(limiter.check(ip("198.51.29.1")).await.is_err());
    }
}
