//! Accepting and serving connections, with limits against slow and abusive
//! clients. axum's `serve` has none of these, so connections are served by
//! hyper's HTTP/1 builder directly:
//!
//! * a connection that has not sent a request's complete headers within
//!   [`ConnectionLimits::header_timeout`] is closed. The wait for the next
//!   request on a keep-alive connection is also a wait for headers, so an
//!   idle keep-alive connection is closed after the same time;
//! * headers larger than [`ConnectionLimits::max_header_bytes`] are answered
//!   `431 Request Header Fields Too Large`;
//! * at most [`ConnectionLimits::max_connections`] connections are open;
//!   beyond that, new connections wait in the kernel's listen backlog, and
//!   the moment the cap is hit is logged once.
//!
//! HTTP/1.1, plain (behind a TLS-terminating proxy or load balancer, which
//! speaks HTTP/1.1 to its backends) or over TLS (`--tls-listen`, the
//! tracking domains' certificates, docs/domains.md): the handshake must end
//! within the header timeout too.

use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tower_http::add_extension::AddExtension;

/// Limits on every connection of a listener.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Longest wait for a request's complete headers (and so for the next
    /// request on an idle keep-alive connection).
    pub header_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Largest request head (request line and headers) accepted.
    pub max_header_bytes: usize,
}

/// Default of `--header-timeout`.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of `--max-connections`: far above what a healthy load balancer
/// opens, well below the file descriptors a service is usually given.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Tracking URLs are short and our only cookie is the dashboard's: 16 KiB
/// leaves room for any browser's headers and none for abuse.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 16 * 1024;

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
        }
    }
}

/// Serve `router` (axum's, or the public listener's hot routes before it) on `listener` until `shutdown` completes; then stop
/// accepting and wait for the open connections' requests to finish.
/// Handlers see the peer address as `ConnectInfo<SocketAddr>`. With `tls`,
/// every connection is a TLS one.
pub async fn serve<S>(
    listener: TcpListener,
    router: S,
    limits: ConnectionLimits,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
) where
    S: tower::Service<
            axum::http::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_header_size(limits.max_header_bytes);
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = accept(&listener, &permits, limits.max_connections) => accepted,
            () = &mut shutdown => break,
        };
        let Some((stream, peer, permit)) = accepted else {
            continue;
        };
        let service =
            TowerToHyperService::new(AddExtension::new(router.clone(), ConnectInfo(peer)));
        let Some(acceptor) = tls.clone() else {
            let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(finish(connection, peer, permit));
            continue;
        };
        let (http, watcher) = (http.clone(), graceful.watcher());
        tokio::spawn(async move {
            let handshake = tokio::time::timeout(limits.header_timeout, acceptor.accept(stream));
            let stream = match handshake.await {
                Ok(Ok(stream)) => stream,
                Ok(Err(err)) => return cut(peer, "tls_handshake", &err),
                Err(elapsed) => return cut(peer, "tls_handshake_timeout", &elapsed),
            };
            let connection = watcher.watch(http.serve_connection(TokioIo::new(stream), service));
            finish(connection, peer, permit).await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Waits for a connection to end, counting how it was cut.
async fn finish(
    connection: impl Future<Output = Result<(), hyper::Error>>,
    peer: SocketAddr,
    permit: OwnedSemaphorePermit,
) {
    if let Err(err) = connection.await {
        let reason = if err.is_timeout() {
            "header_timeout"
        } else {
            "error"
        };
        cut(peer, reason, &err);
    }
    drop(permit);
}

fn cut(peer: SocketAddr, reason: &'static str, err: &dyn std::fmt::Display) {
    metrics::counter!("linktrack_connections_cut_total", "reason" => reason).increment(1);
    tracing::debug!(%err, %peer, reason, "connection closed");
}

/// The next connection, once the cap leaves room for it. `None` after an
/// accept error that only concerns that one connection (or after waiting
/// out a lack of file descriptors).
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
    max_connections: usize,
) -> Option<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
    let permit = match permits.clone().try_acquire_owned() {
        Ok(permit) => permit,
        Err(_) => {
            tracing::warn!(
                max_connections,
                "connection cap reached (--max-connections): new connections wait in the \
                 listen backlog until open ones close"
            );
            metrics::counter!("linktrack_connection_cap_reached_total").increment(1);
            permits.clone().acquire_owned().await.ok()?
        }
    };
    match listener.accept().await {
        Ok((stream, peer)) => {
            // Small responses: send them at once instead of waiting for more.
            let _ = stream.set_nodelay(true);
            Some((stream, peer, permit))
        }
        Err(err) if is_connection_error(&err) => None,
        Err(err) => {
            // Out of file descriptors or memory: wait, or this loop spins.
            tracing::error!(%err, "accepting a connection failed; retrying in 1s");
            tokio::time::sleep(Duration::from_secs(1)).await;
            None
        }
    }
}

/// Errors of one failed handshake, not of the listener.
fn is_connection_error(err: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        err.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    )
}
