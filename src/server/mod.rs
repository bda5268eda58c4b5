//! `linktrack serve`: the tracking HTTP server. How to run and watch it:
//! `docs/serve.md`.
//!
//! * [`handlers`]: thin handlers for `/c`, `/o`, `/u`, `/i` and health;
//! * [`state`]: shared state, token checks and the link cache;
//! * [`record`]: classify a hit and journal it (see [`crate::events`]);
//! * [`image`]: the SSRF-safe image proxy;
//! * [`error`]: the one error type, rendered as small pages;
//! * [`metrics`]: Prometheus recorder and request metrics.

pub mod error;
pub mod handlers;
pub mod image;
pub mod metrics;
pub mod pages;
pub mod record;
pub mod request;
pub mod state;
pub mod stats;

use crate::events::journal::{JournalError, JournalSettings};
use crate::events::EventPipeline;
use axum::routing::get;
use axum::Router;
use sqlx::MySqlPool;
use state::{AppState, ServerSettings};
use std::future::Future;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::task::AbortHandle;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnFailure, TraceLayer};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("building the image proxy client: {0}")]
    Client(#[from] reqwest::Error),
    #[error("serving HTTP: {0}")]
    Io(#[from] std::io::Error),
}

/// All tracking routes, with request ids, tracing and metrics.
pub fn router(state: AppState) -> Router {
    app(state, None)
}

/// The tracking routes plus, when given, the stats API and dashboard, all
/// under the same request ids, tracing and metrics.
fn app(state: AppState, stats: Option<stats::StatsState>) -> Router {
    let request_id = axum::http::HeaderName::from_static("x-request-id");
    let tracking = Router::new()
        .route("/c/{token}", get(handlers::click))
        .route("/o/{file}", get(handlers::pixel))
        .route(
            "/u/{token}",
            get(handlers::unsubscribe_page).post(handlers::unsubscribe),
        )
        .route("/i/{token}", get(handlers::image))
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .route("/metrics", get(handlers::metrics))
        .fallback(handlers::not_found)
        .with_state(state);
    let routes = match stats {
        Some(stats) => tracking.merge(stats::router(stats)),
        None => tracking,
    };
    routes
        .layer(axum::middleware::from_fn(metrics::track))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                // A database outage makes every cache miss a 503: counted in
                // the metrics, not logged as an error thousands of times a second.
                .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG)),
        )
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
}

/// The tracing span of a request: its id and route pattern. The raw path is
/// left out on purpose: a token in a log is a working unsubscribe link.
fn request_span(request: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |p| p.as_str());
    tracing::info_span!("request", request_id = %id, method = %request.method(), route)
}

/// A started server: listening, journal recovered, background tasks running.
pub struct Server {
    listener: TcpListener,
    state: AppState,
    pipeline: EventPipeline,
    stats: Option<stats::StatsState>,
}

impl Server {
    /// Recover the journal, start the event pipeline and build the state.
    pub async fn start(
        listener: TcpListener,
        pool: MySqlPool,
        settings: ServerSettings,
        journal: JournalSettings,
    ) -> Result<Server, ServeError> {
        let pipeline = EventPipeline::start(pool.clone(), journal).await?;
        let state = AppState::new(pool, settings, pipeline.recorder(), metrics::prometheus())?;
        Ok(Server {
            listener,
            state,
            pipeline,
            stats: None,
        })
    }

    /// Also serve the stats API and dashboard; `/readyz` then reports Redis too.
    pub fn with_stats(mut self, stats: stats::StatsState) -> Server {
        self.state.live = stats.live.clone();
        self.stats = Some(stats);
        self
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve until `shutdown` completes, let in-flight requests finish, then
    /// flush the journal to the database (bounded by the flush deadline).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let deadline = self.state.settings.flush_deadline;
        let app = app(self.state, self.stats).into_make_service_with_connect_info::<SocketAddr>();
        let served = axum::serve(self.listener, app)
            .with_graceful_shutdown(shutdown)
            .await;
        tracing::info!("stopped accepting requests; flushing events");
        self.pipeline.shutdown(deadline).await;
        served.map_err(ServeError::from)
    }

    /// Serve on a background task that can be killed as a crash would kill
    /// it: nothing flushed. Returns handles that abort everything. For tests.
    pub fn spawn_abortable(self) -> Vec<AbortHandle> {
        let Server {
            listener,
            state,
            pipeline,
            stats,
        } = self;
        let app = app(state, stats).into_make_service_with_connect_info::<SocketAddr>();
        let mut handles = pipeline.abort_handles();
        let serving = tokio::spawn(async move {
            // The pipeline lives as long as the server task.
            let _pipeline = pipeline;
            axum::serve(listener, app).await
        });
        handles.push(serving.abort_handle());
        handles
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(%err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(%err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => tracing::info!("SIGINT received"),
        _ = terminate => tracing::info!("SIGTERM received"),
    }
}
