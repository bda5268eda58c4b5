//! The routes of the public listener, under one request id, trace span and
//! metrics layer ([`public_router`]), the hot routes served past axum's
//! router ([`HotRoutes`]), and the demo's stand-in CDN
//! ([`serve_demo_images`]).

use super::metrics::RoutePattern;
use super::state::AppState;
use super::{api, handlers, hosts, metrics, stats, well_known};
use axum::extract::Request;
use axum::handler::{Handler, HandlerService};
use axum::http::{HeaderName, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures_util::FutureExt;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnFailure, TraceLayer};

/// The public host: tracking routes, `/healthz`, the stats API and
/// dashboard, the providers' webhooks (`hooks`), all under the same request ids, tracing and metrics.
/// Readiness and metrics are on the admin listener only ([`app`](super::app)).
/// Clicks and opens are served past the router ([`HotRoutes`]).
pub(super) async fn public_router(
    state: AppState,
    api: api::ApiState,
    hooks: Router,
) -> HotRoutes<impl HotService, impl HotService> {
    let stats = api.stats.clone();
    let known_hosts = std::sync::Arc::new(hosts::KnownHosts::new(
        state.pool.clone(),
        &state.settings.base_url,
    ));
    // Read before the first request, so that no request reads it.
    known_hosts.read().await;
    known_hosts.follow();
    let click = layered(handlers::click.with_state(state.clone()), &known_hosts);
    let pixel = layered(handlers::pixel.with_state(state.clone()), &known_hosts);
    let tracking = Router::new()
        .route(CLICK_ROUTE, get(handlers::click))
        .route(PIXEL_ROUTE, get(handlers::pixel))
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
    let router = tracking
        .merge(stats::router(stats))
        .merge(api::router(api))
        .merge(hooks)
        .layer(axum::middleware::from_fn_with_state(
            known_hosts,
            hosts::only_known_hosts,
        ))
        .layer(axum::middleware::from_fn(metrics::track))
        .layer(trace_layer())
        .layer(PropagateRequestIdLayer::new(request_id()))
        .layer(SetRequestIdLayer::new(request_id(), MakeRequestUuid));
    HotRoutes {
        router,
        click,
        pixel,
    }
}

/// What a hot route's layered handler is.
pub(super) trait HotService:
    Service<Request, Response = Response, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + 'static
{
}

impl<S> HotService for S where
    S: Service<Request, Response = Response, Error = Infallible, Future: Send + 'static>
        + Clone
        + Send
        + 'static
{
}

/// The click's route pattern: its metrics label and span field.
const CLICK_ROUTE: &str = "/c/{token}";
/// The pixel's.
const PIXEL_ROUTE: &str = "/o/{file}";

fn request_id() -> HeaderName {
    HeaderName::from_static("x-request-id")
}

type Trace = TraceLayer<
    tower_http::classify::SharedClassifier<tower_http::classify::ServerErrorsAsFailures>,
    fn(&Request) -> tracing::Span,
    tower_http::trace::DefaultOnRequest,
    tower_http::trace::DefaultOnResponse,
    tower_http::trace::DefaultOnBodyChunk,
    tower_http::trace::DefaultOnEos,
    DefaultOnFailure,
>;

fn trace_layer() -> Trace {
    TraceLayer::new_for_http()
        .make_span_with(request_span as fn(&Request) -> tracing::Span)
        // A database outage makes every cache miss a 503: counted in
        // the metrics, not logged as an error thousands of times a second.
        .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG))
}

/// A hot route's handler under the layers every public route has, in the
/// same order ([`public_router`]).
fn layered<H, T>(
    handler: HandlerService<H, T, AppState>,
    known_hosts: &Arc<hosts::KnownHosts>,
) -> impl HotService
where
    H: Handler<T, AppState>,
    T: 'static,
{
    let hosts_layer =
        axum::middleware::from_fn_with_state(Arc::clone(known_hosts), hosts::only_known_hosts);
    let service = hosts_layer.layer(handler);
    let service = axum::middleware::from_fn(metrics::track).layer(service);
    let service = trace_layer().layer(service);
    let service = PropagateRequestIdLayer::new(request_id()).layer(service);
    let service = SetRequestIdLayer::new(request_id(), MakeRequestUuid).layer(service);
    // The trace layer's body made an axum body, as the router does.
    tower::ServiceExt::map_response(service, IntoResponse::into_response)
}

/// The public listener's service: clicks and opens go straight to their
/// handlers (under the same layers), everything else to axum's router.
///
/// The router matches every path against every route and then gives the
/// parameter as axum's `Path` wants it (its name and its percent-decoded
/// value, each an allocation, in a list of its own, per request) before any
/// handler runs; the token extractor ([`RouteToken`](super::request::RouteToken))
/// reads the path itself. What is served here is what the router would
/// route to the same handler: a `GET` of `/c/` or `/o/` and one segment
/// without a percent escape, its answer given the `Content-Length` the
/// router gives. Anything else (`HEAD`, whose body the router removes,
/// another method, an escape to decode, an empty or deeper path) takes
/// the router, which answers it as it always did (405, the decoded
/// parameter, 404). The route pattern is set for the metrics and the span
/// as the router sets `MatchedPath` ([`RoutePattern`]).
#[derive(Clone)]
pub(super) struct HotRoutes<C, P> {
    router: Router,
    click: C,
    pixel: P,
}

/// Which hot route serves `path`, if one does.
fn hot_route(method: &Method, path: &str) -> Option<HotRoute> {
    if method != Method::GET {
        return None;
    }
    let (route, segment) = if let Some(segment) = path.strip_prefix("/c/") {
        (HotRoute::Click, segment)
    } else if let Some(segment) = path.strip_prefix("/o/") {
        (HotRoute::Pixel, segment)
    } else {
        return None;
    };
    let plain = !segment.is_empty() && !segment.bytes().any(|b| b == b'/' || b == b'%');
    plain.then_some(route)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum HotRoute {
    Click,
    Pixel,
}

type Either<A, B> = futures_util::future::Either<A, B>;
/// What finishes a hot route's answer ([`with_content_length`]).
type Finish = fn(Result<Response, Infallible>) -> Result<Response, Infallible>;
/// A hot route's answer as the router would finish it.
type Finished<F> = futures_util::future::Map<F, Finish>;

/// What the router does last to a `GET`'s answer: a body of known length
/// gets its `Content-Length` (axum sets it before the answer leaves; hyper
/// would too, the same value).
fn with_content_length(answer: Result<Response, Infallible>) -> Result<Response, Infallible> {
    use axum::body::HttpBody;
    use axum::http::header::CONTENT_LENGTH;
    let Ok(mut response) = answer;
    if !response.headers().contains_key(CONTENT_LENGTH) {
        if let Some(size) = response.body().size_hint().exact() {
            let value = axum::http::HeaderValue::from(size);
            response.headers_mut().insert(CONTENT_LENGTH, value);
        }
    }
    Ok(response)
}

impl<B, C, P> Service<axum::http::Request<B>> for HotRoutes<C, P>
where
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
    C: Service<Request, Response = Response, Error = Infallible> + Clone,
    P: Service<Request, Response = Response, Error = Infallible> + Clone,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<
        <Router as Service<Request>>::Future,
        Either<Finished<C::Future>, Finished<P::Future>>,
    >;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The router and the layered handlers are always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let mut request = request.map(axum::body::Body::new);
        match hot_route(request.method(), request.uri().path()) {
            Some(HotRoute::Click) => {
                request.extensions_mut().insert(RoutePattern(CLICK_ROUTE));
                let answer = self.click.clone().call(request);
                Either::Right(Either::Left(answer.map(with_content_length as Finish)))
            }
            Some(HotRoute::Pixel) => {
                request.extensions_mut().insert(RoutePattern(PIXEL_ROUTE));
                let answer = self.pixel.clone().call(request);
                Either::Right(Either::Right(answer.map(with_content_length as Finish)))
            }
            None => Either::Left(self.router.call(request)),
        }
    }
}

/// The tracing span of a request: its id and route pattern. The raw path is
/// left out on purpose: a token in a log is a working unsubscribe link.
///
/// At DEBUG: under the default filter (`info`) a span is formatted for the
/// log whether or not anything is logged inside it, a cost every
/// redirect would pay for nothing (`bench_serve --callgrind` shows it).
/// Warnings on the request path name what they are about;
/// `RUST_LOG=linktrack=debug,tower_http=debug` brings the request ids back.
///
/// Nothing is read from the request when no filter enables DEBUG anywhere
/// (the span would be disabled): the header lookup and the route pattern
/// were most of what a disabled span cost a hit.
fn request_span(request: &Request) -> tracing::Span {
    if !tracing::level_enabled!(tracing::Level::DEBUG) {
        return tracing::Span::none();
    }
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    let route = metrics::route_pattern(request.extensions());
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

#[cfg(test)]
mod tests {
    use super::{hot_route, HotRoute};
    use axum::http::Method;

    #[test]
    fn only_a_get_of_one_plain_segment_is_served_past_the_router() {
        let get = |path: &str| hot_route(&Method::GET, path);
        assert_eq!(
            get("/c/0192f5a0c0de7000800000000000abcd"),
            Some(HotRoute::Click)
        );
        assert_eq!(
            get("/o/0192f5a0c0de7000800000000000abcd.gif"),
            Some(HotRoute::Pixel)
        );
        assert_eq!(
            get("/c/é"),
            Some(HotRoute::Click),
            "as the router matches it"
        );
        for routed in [
            "/c/", "/o/", "/c/a%62c", "/c/abc/", "/c/a/b", "/c", "/healthz", "/u/abc", "/cc/abc",
        ] {
            assert_eq!(get(routed), None, "{routed}");
        }
        for method in [Method::HEAD, Method::POST, Method::OPTIONS] {
            assert_eq!(hot_route(&method, "/c/abc"), None, "{method}");
        }
    }
}
