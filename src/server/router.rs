//! The routes of the public listener, under one request id, trace span and
//! metrics layer ([`public_router`]), and the demo's stand-in CDN
//! ([`serve_demo_images`]).

use super::state::AppState;
use super::{api, handlers, hosts, metrics, stats, well_known};
use axum::routing::get;
use axum::Router;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnFailure, TraceLayer};

/// The public host: tracking routes, `/healthz`, the stats API and
/// dashboard, the providers' webhooks (`hooks`), all under the same request ids, tracing and metrics.
/// Readiness and metrics are on the admin listener only ([`app`](super::app)).
pub(super) async fn public_router(state: AppState, api: api::ApiState, hooks: Router) -> Router {
    let stats = api.stats.clone();
    let request_id = axum::http::HeaderName::from_static("x-request-id");
    let known_hosts = std::sync::Arc::new(hosts::KnownHosts::new(
        state.pool.clone(),
        &state.settings.base_url,
    ));
    // Read before the first request, so that no request reads it.
    known_hosts.read().await;
    known_hosts.follow();
    let tracking = Router::new()
        .route("/c/{token}", get(handlers::click))
        .route("/o/{file}", get(handlers::pixel))
        .route(
            "/u/{token}",
            get(handlers::unsubscribe_page).post(handlers::unsubscribe),
        )
        .route(
            "/t/{token}",
            get(handlers::stop_tracking_page).post(handlers::stop_tracking),
        )
        .route("/i/{token}", get(handlers::image))
        .route("/healthz", get(handlers::healthz))
        .route(
            "/.well-known/apple-app-site-association",
            get(well_known::apple_app_site_association),
        )
        .route("/.well-known/assetlinks.json", get(well_known::assetlinks))
        .route(
            "/.well-known/acme-challenge/{token}",
            get(well_known::acme_challenge),
        )
        .fallback(handlers::not_found)
        .with_state(state);
    tracking
        .merge(stats::router(stats))
        .merge(api::router(api))
        .merge(hooks)
        .layer(axum::middleware::from_fn_with_state(
            known_hosts,
            hosts::only_known_hosts,
        ))
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
///
/// At DEBUG: under the default filter (`info`) a span is formatted for the
/// log whether or not anything is logged inside it, which was about 8,000
/// instructions of a redirect's 190,000 (callgrind, `bench_serve
/// --callgrind`). Warnings on the request path name what they are about;
/// `RUST_LOG=linktrack=debug,tower_http=debug` brings the request ids back.
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
    tracing::debug_span!("request", request_id = %id, method = %request.method(), route)
}

/// `linktrack demo`'s stand-in CDN: the fixture mailing's pictures at
/// `/demo/{file}`, on a listener of their own (the builder does not proxy
/// images under the letters' own base URL).
pub async fn serve_demo_images(listener: tokio::net::TcpListener) {
    let app = Router::new().route("/demo/{file}", get(handlers::demo_image));
    if let Err(err) = axum::serve(listener, app).await {
        tracing::warn!(%err, "the demo's pictures are not served");
    }
}
