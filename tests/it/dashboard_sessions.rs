//! Issue 29, item 6: dashboard logins are random server-side sessions that
//! expire, end on logout and are new at every login; wrong tokens are
//! rate-limited per client address.

use crate::common::stats_api::{rolled_db, SECRET, TOKEN};
use crate::common::{client, TestServer};
use reqwest::header;
use reqwest::StatusCode;
use sqlx::MySqlPool;

/// Serves the dashboard with login on, trusting `X-Forwarded-For` so each
/// test can speak from several client addresses.
async fn serve(pool: MySqlPool) -> TestServer {
    TestServer::start(pool, |settings| linktrack::server::AppSettings {
        api_token: Some(TOKEN.to_owned()),
        secret: Some(SECRET.to_owned()),
        server: linktrack::server::state::ServerSettings {
            trust_forwarded_for: true,
            ..settings.server
        },
        ..settings
    })
    .await
}

async fn login(base: &str, from: &str, token: &str, cookie: Option<&str>) -> reqwest::Response {
    let mut request = client()
        .post(format!("{base}/login"))
        .header("x-forwarded-for", from)
        .form(&[("token", token)]);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    request.send().await.unwrap()
}

/// `lt_session=<id>` from a login's answer.
fn session_pair(response: &reqwest::Response) -> String {
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let cookie = response.headers()[header::SET_COOKIE].to_str().unwrap();
    let pair = cookie.split(';').next().unwrap().to_owned();
    assert!(
        pair.starts_with("lt_session=") && pair.len() == "lt_session=".len() + 64,
        "{cookie}"
    );
    pair
}

/// The index's status for a browser carrying this cookie (200 in, 303 out).
async fn index_status(base: &str, cookie: &str) -> StatusCode {
    client()
        .get(format!("{base}/mailings"))
        .header(header::COOKIE, cookie)
        .send()
        .await
        .unwrap()
        .status()
}

async fn sessions_in_table(pool: &MySqlPool) -> Vec<String> {
    sqlx::query_scalar("SELECT HEX(id_hash) FROM dashboard_sessions")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn each_login_is_a_new_session_that_logout_ends() {
    let db = rolled_db().await;
    let app = serve(db.pool.clone()).await;
    let base = &app.base;

    let first = session_pair(&login(base, "192.0.2.1", TOKEN, None).await);
    let second = session_pair(&login(base, "192.0.2.1", TOKEN, None).await);
    assert_ne!(first, second, "every login gets a new random id");
    assert_eq!(index_status(base, &first).await, StatusCode::OK);
    assert_eq!(index_status(base, &second).await, StatusCode::OK);
    // The table keeps hashes, never a cookie that would log someone in.
    let stored = sessions_in_table(&db.pool).await;
    assert_eq!(stored.len(), 2);
    for id in [&first, &second] {
        let id = id.trim_start_matches("lt_session=").to_uppercase();
        assert!(!stored.contains(&id), "the raw session id is stored");
    }

    let out = client()
        .post(format!("{base}/logout"))
        .header(header::COOKIE, &first)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert_eq!(out.headers()[header::LOCATION], "/login");
    let cleared = out.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(cleared.starts_with("lt_session=; Max-Age=0"), "{cleared}");
    assert_eq!(
        index_status(base, &first).await,
        StatusCode::SEE_OTHER,
        "logged out"
    );
    assert_eq!(
        index_status(base, &second).await,
        StatusCode::OK,
        "the other browser stays in"
    );
    assert_eq!(sessions_in_table(&db.pool).await.len(), 1);

    // Logging in again with a cookie in hand ends that session: rotation.
    let third = session_pair(&login(base, "192.0.2.1", TOKEN, Some(&second)).await);
    assert_ne!(third, second);
    assert_eq!(index_status(base, &second).await, StatusCode::SEE_OTHER);
    assert_eq!(index_status(base, &third).await, StatusCode::OK);
    app.stop().await;
}

#[tokio::test]
async fn an_expired_session_is_refused_and_cleaned_at_the_next_login() {
    let db = rolled_db().await;
    let app = serve(db.pool.clone()).await;
    let base = &app.base;
    let pair = session_pair(&login(base, "192.0.2.1", TOKEN, None).await);
    assert_eq!(index_status(base, &pair).await, StatusCode::OK);

    sqlx::query("UPDATE dashboard_sessions SET expires = UTC_TIMESTAMP() - INTERVAL 1 SECOND")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(index_status(base, &pair).await, StatusCode::SEE_OTHER);
    let api = client()
        .get(format!(
            "{base}/api/mailings/{}/stats",
            crate::common::stats::MAILING
        ))
        .header(header::COOKIE, &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::UNAUTHORIZED);

    let fresh = session_pair(&login(base, "192.0.2.1", TOKEN, None).await);
    assert_eq!(index_status(base, &fresh).await, StatusCode::OK);
    assert_eq!(
        sessions_in_table(&db.pool).await.len(),
        1,
        "the expired row is deleted"
    );
    app.stop().await;
}

#[tokio::test]
async fn wrong_tokens_are_limited_per_client_network() {
    let db = rolled_db().await;
    let app = serve(db.pool.clone()).await;
    let base = &app.base;
    let limit = linktrack::server::stats::MAX_FAILED_LOGINS;
    for attempt in 0..limit {
        let wrong = login(base, "192.0.2.66", "guess", None).await;
        assert_eq!(
            wrong.status(),
            StatusCode::UNAUTHORIZED,
            "attempt {attempt}"
        );
    }
    // Past the limit even the right token waits: guessing must not go on.
    for token in ["guess", TOKEN] {
        let limited = login(base, "192.0.2.66", token, None).await;
        assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
        let wait: u64 = limited.headers()[header::RETRY_AFTER]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let window = linktrack::server::stats::LOGIN_WINDOW.as_secs();
        assert!((1..=window).contains(&wait), "Retry-After {wait}");
        assert!(limited
            .text()
            .await
            .unwrap()
            .contains("Too many wrong tokens"));
    }
    assert_eq!(sessions_in_table(&db.pool).await.len(), 0);
    // The limit is the network's (issue 43): another address of the same
    // /24 is held back too, and its right token with it.
    let neighbour = login(base, "192.0.2.67", TOKEN, None).await;
    assert_eq!(neighbour.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another network is not held back by the first one's guesses.
    let other = session_pair(&login(base, "198.51.100.67", TOKEN, None).await);
    assert_eq!(index_status(base, &other).await, StatusCode::OK);
    app.stop().await;
}
