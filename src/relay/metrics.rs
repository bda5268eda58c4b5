//! `--metrics-listen`: the relay's counters (accepted, forwarded,
//! rejected, spooled, DKIM signed and removed, …) for Prometheus,
//! `GET /metrics` on an address of the operator's, as `serve`'s admin
//! listener gives its own. Off unless asked for.

use axum::routing::get;
use std::net::SocketAddr;
use tokio::net::TcpListener;

/// Listen on `addr` (the process's one recorder installed first, so the
/// sessions' counters are kept from the start); returns the bound address
/// and the task serving it (it ends with the process).
pub(crate) async fn listen(
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let handle = crate::server::metrics::prometheus();
    let router = axum::Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move { handle.render() }
        }),
    );
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let serving = tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, router).await {
            tracing::warn!(%err, "the relay's metrics listener stopped");
        }
    });
    Ok((bound, serving))
}
