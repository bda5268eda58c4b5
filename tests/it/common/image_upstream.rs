//! A local upstream image server for the image proxy tests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A local image server counting the requests that reach it.
pub struct Upstream {
    pub base: String,
    pub hits: Arc<AtomicUsize>,
}

pub async fn upstream() -> Upstream {
    use axum::http::header as h;
    use axum::response::IntoResponse;
    use axum::routing::get;
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new()
        .route(
            "/img.png",
            get(|| async {
                (
                    [
                        (h::CONTENT_TYPE, "image/png"),
                        (h::CACHE_CONTROL, "max-age=60"),
                    ],
                    "PNGDATA",
                )
            }),
        )
        .route(
            "/fresh.png",
            get(|| async {
                (
                    [
                        (h::CONTENT_TYPE, "image/png"),
                        (h::CACHE_CONTROL, "no-store"),
                    ],
                    "FRESH",
                )
            }),
        )
        .route(
            "/slow.png",
            get(|| async {
                // The slowness is what is tested: the fetch is still in
                // flight when the other readers of the same image come
                // (image_proxy.rs), so they must share it.
                tokio::time::sleep(Duration::from_millis(300)).await;
                ([(h::CONTENT_TYPE, "image/png")], "SLOW")
            }),
        )
        .route(
            "/page",
            get(|| async { ([(h::CONTENT_TYPE, "text/html")], "<html>") }),
        )
        .route(
            "/big.png",
            get(|| async { ([(h::CONTENT_TYPE, "image/png")], vec![0u8; 6 << 20]) }),
        )
        .route(
            "/moved",
            get(|| async {
                (axum::http::StatusCode::FOUND, [(h::LOCATION, "/img.png")]).into_response()
            }),
        )
        .route(
            "/loop",
            get(|| async {
                (axum::http::StatusCode::FOUND, [(h::LOCATION, "/loop")]).into_response()
            }),
        )
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    next.run(request).await
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Upstream { base, hits }
}
