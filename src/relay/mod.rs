//! `linktrack relay`: an ESMTP server (RFC 5321) in front of the sending
//! pool's MTA, for platforms that compose and send their own mail. Each
//! accepted message is tracked as `build` tracks a letter, one letter per
//! recipient, handed to the MTA or spooled on disk before the client hears
//! 250; the spool worker forwards what was spooled (docs/relay.md).
//!
//! A file per part, this one only wiring them: the settings
//! (`settings.rs`), who may submit (`access.rs`), a command line read
//! (`command.rs`), AUTH (`auth.rs`), the data after DATA (`data.rs`),
//! where a recipient stands, in memory (`standing.rs`: suppressed, erased,
//! opted out), the session (`session.rs`) with what its sessions share
//! (`shared.rs`), the
//! header fields (`headers.rs`) and HTML parts (`mime.rs`) of a message,
//! a message tracked (`track.rs`) and DKIM for what tracking changed
//! (`dkim.rs`), its letters handed to the MTA while the client waits
//! (`hand_over.rs`), the spool (`spool.rs`) and its worker (`forward.rs`),
//! the certificates of STARTTLS (`tls.rs`) and the counters' listener
//! (`metrics.rs`).

mod access;
mod auth;
mod command;
mod data;
mod dkim;
mod forward;
mod hand_over;
mod headers;
mod metrics;
mod mime;
mod session;
mod settings;
mod shared;
mod spool;
mod standing;
mod tls;
mod track;

pub use dkim::{BadDkimKeySpec, DkimKeyError, DkimKeySpec};
pub use forward::DownstreamError;
pub use settings::{RelaySettings, SuppressedAction};
pub use tls::{RelayTls, TlsError};

use crate::api_keys::KeyVerifier;
use crate::builder::tracked_letters::{LetterTracker, LetterTrackerSettings};
use crate::store::{seal_keys, StoreError};
use shared::Shared;
use spool::Spool;
use sqlx::MySqlPool;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use track::{Tracker, TrackerSettings};

/// Why the relay cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("--listen {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("--spool {path}: {source}")]
    Spool {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--metrics-listen {addr}: {source}")]
    MetricsListen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Downstream(#[from] DownstreamError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Dkim(#[from] DkimKeyError),
}

/// Serve until `shutdown` resolves; the spool worker stops with it (what
/// is queued stays queued for the next start).
pub async fn run(
    pool: MySqlPool,
    settings: RelaySettings,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), RelayError> {
    // First: a key that cannot be used stops the start, not the first message.
    let dkim = Arc::new(dkim::Dkim::load(&settings.dkim_keys)?);
    let secrets = seal_keys::RingSecrets {
        current: settings.secret.clone(),
        previous: Vec::new(),
        new_secret: false,
    };
    let ring = seal_keys::open_ring(&pool, &secrets, seal_keys::Purpose::Build).await?;
    let seal = ring.ring.current().clone();
    let spool = Spool::open(&settings.spool).map_err(|source| RelayError::Spool {
        path: settings.spool.clone(),
        source,
    })?;
    let downstream = Arc::new(forward::Downstream::open(
        &settings.smtp,
        settings.pools.as_deref(),
    )?);
    if let Some(pools) = downstream.pools() {
        if !pools.contains(&settings.default_pool) {
            tracing::warn!(
                pool = %settings.default_pool,
                pools = %pools.join(","),
                "--pool names no pool of the file: messages without X-Linktrack-Pool are refused"
            );
        }
    }
    let listener =
        TcpListener::bind(settings.listen)
            .await
            .map_err(|source| RelayError::Listen {
                addr: settings.listen,
                source,
            })?;
    let bound = listener.local_addr().map_err(|source| RelayError::Listen {
        addr: settings.listen,
        source,
    })?;
    let metrics = match settings.metrics_listen {
        Some(addr) => {
            let (bound, serving) = metrics::listen(addr)
                .await
                .map_err(|source| RelayError::MetricsListen { addr, source })?;
            tracing::info!(metrics = %bound, "the relay's counters at /metrics");
            Some(serving)
        }
        None => None,
    };
    let letters = LetterTracker::new(
        pool.clone(),
        seal,
        LetterTrackerSettings {
            base_url: settings.base_url.clone(),
            bounce_domain: settings.bounce_domain.clone(),
            max_letter_bytes: settings.max_message_bytes,
        },
    );
    let tracker = Tracker::new(
        Arc::new(letters),
        TrackerSettings {
            default_mailing: settings.default_mailing.clone(),
            pools: downstream.pools(),
            default_pool: settings.default_pool.clone(),
        },
        dkim,
    );
    let wake = Arc::new(Notify::new());
    let retry_after = settings.retry_after;
    let (tls, reloading) = match tls::acceptor(&settings.tls, &pool).await? {
        Some((acceptor, reloading)) => (Some(acceptor), reloading),
        None => (None, None),
    };
    let key_secret = crate::api_keys::KeySecret::in_force(
        settings.api_key_secret.as_deref(),
        settings.secret.as_deref(),
    );
    let keys = KeyVerifier::new(pool.clone(), key_secret, settings.api_token.as_deref());
    let (hand_over, recorder) = if settings.forward_now {
        let (hand_over, recorder) = hand_over::HandOver::new(&downstream, pool.clone());
        (Some(hand_over), Some(recorder))
    } else {
        (None, None)
    };
    let address_key = crate::store::privacy::load_key(&pool).await?;
    // Its name among the servers `erase` waits for.
    let server = format!(
        "relay {} {} {}",
        settings.hostname,
        bound,
        settings.spool.display()
    );
    let recipients =
        standing::Recipients::load(&pool, server, address_key, settings.privacy).await?;
    let mut followers = crate::workers::Workers::new();
    {
        let (recipients, pool) = (recipients.clone(), pool.clone());
        followers.spawn("privacy", move |stopping| {
            recipients.follow_privacy(pool, stopping)
        });
    }
    {
        let (recipients, pool) = (recipients.clone(), pool.clone());
        followers.spawn("suppressions", move |stopping| {
            recipients.follow_suppressions(pool, stopping)
        });
    }
    let shared = Arc::new(Shared {
        settings,
        keys,
        recipients,
        pool,
        tracker,
        hand_over,
        spool: Arc::new(spool),
        wake: Arc::clone(&wake),
        dropped: AtomicU64::new(0),
        tls,
    });
    let (stop, stopped) = watch::channel(false);
    let worker = tokio::spawn(forward::run(
        shared.pool.clone(),
        Arc::clone(&shared.spool),
        Arc::clone(&downstream),
        Arc::clone(&wake),
        retry_after,
        stopped,
    ));
    // What an earlier run left queued goes first.
    wake.notify_one();
    tracing::info!(
        listen = %bound,
        downstream = downstream.hosts(),
        spool = %shared.settings.spool.display(),
        starttls = shared.tls.is_some(),
        "serving SMTP relay"
    );
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(session::serve(stream, peer, Arc::clone(&shared)));
                }
                Err(e) => tracing::warn!(error = %e, "accepting an SMTP connection"),
            },
            _ = &mut shutdown => break,
        }
    }
    let _ = stop.send(true);
    if let Some(reloading) = reloading {
        reloading.abort();
    }
    let _ = worker.await;
    followers.shutdown(std::time::Duration::from_secs(5)).await;
    // The sessions still running hold the hand-over; what they answered is
    // recorded by the time the last lets it go.
    drop(shared);
    if let Some(metrics) = metrics {
        metrics.abort();
    }
    if let Some(recorder) = recorder {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), recorder).await;
    }
    Ok(())
}
