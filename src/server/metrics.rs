//! Prometheus metrics: the recorder, and a middleware counting requests by
//! route and status with a latency histogram.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::Instant;

const LATENCY: &str = "linktrack_http_request_duration_seconds";

/// The process-wide recorder's handle. The first call installs the recorder;
/// later calls (several servers in one test process) share it. If another
/// recorder was installed first, ours still renders, just without data.
pub fn prometheus() -> PrometheusHandle {
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

/// Count and time every request. The route label is the matched pattern
/// (`/c/{token}`), never the raw path, so label cardinality stays bounded.
pub async fn track(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_owned();
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!("linktrack_http_requests_total", "route" => route.clone(), "method" => method, "status" => status)
        .increment(1);
    metrics::histogram!(LATENCY, "route" => route).record(started.elapsed().as_secs_f64());
    response
}
