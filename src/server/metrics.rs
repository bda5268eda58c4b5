//! Prometheus metrics: the recorder, and a middleware counting requests by
//! route and status with a latency histogram.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock, RwLock};
use std::time::Instant;

const LATENCY: &str = "linktrack_http_request_duration_seconds";

/// The process-wide recorder's handle. The first call installs the recorder;
/// later calls (several servers in one test process) share it. If another
/// recorder was installed first, ours still renders, just without data.
pub(crate) fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let buckets = [
                0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ];
            let builder = PrometheusBuilder::new();
            let builder = builder
                .set_buckets_for_metric(Matcher::Full(LATENCY.to_owned()), &buckets)
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
            }
            handle
        })
        .clone()
}

/// The method as a label. Clients can send any token as a method, so only
/// the standard ones get their own label value: labels must stay bounded.
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    }
}

/// One route's request metrics, registered once: the latency histogram and
/// a counter per (method, status) seen so far.
struct RouteMetrics {
    route: String,
    latency: Histogram,
    requests: RwLock<Vec<(&'static str, u16, Counter)>>,
}

impl RouteMetrics {
    fn new(route: &str) -> RouteMetrics {
        RouteMetrics {
            route: route.to_owned(),
            latency: metrics::histogram!(LATENCY, "route" => route.to_owned()),
            requests: RwLock::new(Vec::new()),
        }
    }

    /// The counter of `method` and `status`, registered on first use. A
    /// route answers with a handful of statuses, so a scan is enough.
    fn requests(&self, method: &'static str, status: u16) -> Counter {
        let find = |seen: &[(&'static str, u16, Counter)]| {
            seen.iter()
                .find(|(m, s, _)| *m == method && *s == status)
                .map(|(_, _, counter)| counter.clone())
        };
        if let Some(counter) = self.requests.read().ok().and_then(|seen| find(&seen)) {
            return counter;
        }
        let counter = metrics::counter!("linktrack_http_requests_total",
            "route" => self.route.clone(), "method" => method, "status" => status.to_string());
        if let Ok(mut seen) = self.requests.write() {
            if find(&seen).is_none() {
                seen.push((method, status, counter.clone()));
            }
        }
        counter
    }
}

/// Every route's metrics, by route pattern. Registering a labelled metric
/// builds, hashes and looks up its label set; doing that once per route
/// instead of twice per request is the point (the route label was also a
/// fresh String per request).
fn route_metrics(route: &str) -> Arc<RouteMetrics> {
    static ROUTES: LazyLock<RwLock<HashMap<String, Arc<RouteMetrics>>>> =
        LazyLock::new(Default::default);
    if let Some(found) = ROUTES.read().ok().and_then(|r| r.get(route).cloned()) {
        return found;
    }
    let made = Arc::new(RouteMetrics::new(route));
    match ROUTES.write() {
        Ok(mut routes) => routes.entry(route.to_owned()).or_insert(made).clone(),
        Err(_) => made,
    }
}

/// Count and time every request. The route label is the matched pattern
/// (`/c/{token}`), never the raw path, so label cardinality stays bounded.
/// Handles are registered once per route ([`route_metrics`]), after the
/// recorder is installed ([`prometheus`] runs when a server is built).
pub(crate) async fn track(request: Request, next: Next) -> Response {
    let route = route_metrics(route_pattern(request.extensions()));
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    route.requests(method, status).increment(1);
    route.latency.record(started.elapsed().as_secs_f64());
    response
}

/// The route pattern of a request served past axum's router (the public
/// listener's hot routes), for what reads `MatchedPath`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RoutePattern(pub &'static str);

/// The route pattern a request was served by: axum's `MatchedPath`, or a
/// hot route's ([`RoutePattern`]); `"unmatched"` for neither.
pub(crate) fn route_pattern(extensions: &axum::http::Extensions) -> &str {
    match extensions.get::<MatchedPath>() {
        Some(matched) => matched.as_str(),
        None => extensions
            .get::<RoutePattern>()
            .map_or("unmatched", |pattern| pattern.0),
    }
}
