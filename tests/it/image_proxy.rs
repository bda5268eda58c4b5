//! The image proxy over real sockets: a local upstream image server, the
//! addresses the proxy refuses, what it serves, checks and caches.

use crate::common::image_upstream::upstream;
use crate::common::{
    add_link, client, db, header, quick_with, server_pool, test_settings, wait_for_events,
    TestServer,
};
use linktrack::server::image::AddressPolicy;
use linktrack::store::links::LinkKind;
use linktrack::token::Token;
use reqwest::{header, StatusCode};
use std::sync::atomic::Ordering;
use std::time::Duration;

#[tokio::test]
async fn the_image_proxy_refuses_non_public_targets() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let up = upstream().await;
    let port = up.base.rsplit(':').next().unwrap().to_owned();
    let targets = [
        format!("http://127.0.0.1:{port}/img.png"),
        format!("http://[::1]:{port}/img.png"),
        format!("http://localhost:{port}/img.png"),
        "http://10.0.0.1/img.png".to_owned(),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://[::ffff:127.0.0.1]/img.png".to_owned(),
        "ftp://example.com/img.png".to_owned(),
        "file:///etc/passwd".to_owned(),
    ];
    let mut tokens = Vec::new();
    for (n, target) in targets.iter().enumerate() {
        tokens.push(add_link(&db.pool, LinkKind::Image, target, n as u32).await);
    }
    // Default settings: the strict address policy. The proxy's own time
    // limit is set far past the client's (10 s): a request that went out to
    // 10.0.0.1 or 169.254.169.254, where nothing answers, would leave the
    // client without an answer, so every 502 below was refused before any
    // connection (rather than failed at a connect timeout).
    let mut settings = test_settings();
    settings.images.total_timeout = Duration::from_secs(3_600);
    let server =
        TestServer::start_in(server_pool(&db).await, dir.path(), quick_with(settings)).await;
    let http = client();
    for (token, target) in tokens.iter().zip(&targets) {
        let response = http
            .get(server.url(&format!("/i/{token}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY, "{target}");
    }
    assert_eq!(up.hits.load(Ordering::SeqCst), 0, "no request left");
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn the_image_proxy_serves_checks_and_caches_images() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let up = upstream().await;
    let image = add_link(
        &db.pool,
        LinkKind::Image,
        &format!("{}/img.png", up.base),
        1,
    )
    .await;
    let fresh = add_link(
        &db.pool,
        LinkKind::Image,
        &format!("{}/fresh.png", up.base),
        2,
    )
    .await;
    let page = add_link(&db.pool, LinkKind::Image, &format!("{}/page", up.base), 3).await;
    let big = add_link(
        &db.pool,
        LinkKind::Image,
        &format!("{}/big.png", up.base),
        4,
    )
    .await;
    let moved = add_link(&db.pool, LinkKind::Image, &format!("{}/moved", up.base), 5).await;
    let looping = add_link(&db.pool, LinkKind::Image, &format!("{}/loop", up.base), 6).await;
    let click = add_link(
        &db.pool,
        LinkKind::Click,
        &format!("{}/img.png", up.base),
        7,
    )
    .await;
    let slow = add_link(
        &db.pool,
        LinkKind::Image,
        &format!("{}/slow.png", up.base),
        8,
    )
    .await;
    let mut settings = test_settings();
    settings.images.policy = AddressPolicy::AllowLoopback;
    let server =
        TestServer::start_in(server_pool(&db).await, dir.path(), quick_with(settings)).await;
    let http = client();
    let get = |token: Token| http.get(server.url(&format!("/i/{token}"))).send();
    let hits = || up.hits.load(Ordering::SeqCst);

    for _ in 0..2 {
        let response = get(image).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, header::CONTENT_TYPE), "image/png");
        assert_eq!(header(&response, header::X_CONTENT_TYPE_OPTIONS), "nosniff");
        assert_eq!(response.text().await.unwrap(), "PNGDATA");
    }
    assert_eq!(hits(), 1, "the second load came from the cache");

    for _ in 0..2 {
        assert_eq!(get(fresh).await.unwrap().status(), StatusCode::OK);
    }
    assert_eq!(hits(), 3, "no-store is not cached");

    let response = get(moved).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "one redirect is followed"
    );
    assert_eq!(response.text().await.unwrap(), "PNGDATA");

    for (token, what) in [(page, "html"), (big, "6 MB"), (looping, "redirect loop")] {
        let response = get(token).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY, "{what}");
    }
    assert_eq!(get(click).await.unwrap().status(), StatusCode::NOT_FOUND);

    // Ten readers open the letter at once: one upstream fetch serves them
    // all (without coalescing, each concurrent miss would fetch).
    let before = hits();
    let url = server.url(&format!("/i/{slow}"));
    let readers: Vec<_> = (0..10)
        .map(|_| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move { http.get(url).send().await.unwrap().text().await.unwrap() })
        })
        .collect();
    for reader in readers {
        assert_eq!(reader.await.unwrap(), "SLOW");
    }
    assert_eq!(hits() - before, 1, "concurrent misses share one fetch");

    // Every load is recorded, served or not: 2 + 2 + 1 + 3 + 10 (the click
    // token on /i/ is not an image link and records nothing).
    let loads = wait_for_events(&db.pool, 18).await;
    assert_eq!(loads.len(), 18, "{loads:?}");
    assert!(loads.iter().all(|e| e.kind == "image"), "{loads:?}");
    drop(http);
    server.stop().await;
}
