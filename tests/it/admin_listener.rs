//! The operators' listener (issue 29, item 5): an optional bearer token on
//! `/metrics` and `/readyz`, a loud warning when it is reachable from other
//! hosts, and a `/readyz` that names the database as unavailable without
//! its error text (the log keeps the detail). Real sockets, real MariaDB.

use crate::common::wait::{eventually, PATIENCE};
use crate::common::{TestDb, TestServer};
use reqwest::StatusCode;

const ADMIN_TOKEN: &str = "admin-token-0123456789abcdef0123456789";

#[tokio::test]
async fn the_admin_token_guards_metrics_and_readyz_not_healthz() {
    let db = TestDb::new().await;
    let app = TestServer::start(db.pool.clone(), |settings| linktrack::server::AppSettings {
        admin_token: Some(ADMIN_TOKEN.to_owned()),
        ..settings
    })
    .await;
    let http = reqwest::Client::new();
    for path in ["/metrics", "/readyz"] {
        let url = format!("{}{path}", app.admin);
        let bare = http.get(&url).send().await.unwrap();
        assert_eq!(
            bare.status(),
            StatusCode::UNAUTHORIZED,
            "{path} without a token"
        );
        let body = bare.text().await.unwrap();
        assert!(!body.contains("linktrack_"), "{path} leaks metrics: {body}");
        let wrong = http
            .get(&url)
            .bearer_auth("not-the-token")
            .send()
            .await
            .unwrap();
        assert_eq!(
            wrong.status(),
            StatusCode::UNAUTHORIZED,
            "{path} wrong token"
        );
        let right = http
            .get(&url)
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(right.status(), StatusCode::OK, "{path} with the token");
    }
    let health = http
        .get(format!("{}/healthz", app.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK, "/healthz stays open");
    app.stop().await;
}

#[tokio::test]
async fn without_a_token_the_admin_listener_stays_open() {
    let db = TestDb::new().await;
    let app = TestServer::start(db.pool.clone(), |settings| settings).await;
    let metrics = reqwest::get(format!("{}/metrics", app.admin))
        .await
        .unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    app.stop().await;
}

#[tokio::test]
async fn the_binary_warns_on_an_exposed_admin_listener_and_readyz_hides_the_database_error() {
    let journal = tempfile::tempdir().unwrap();
    // A password the database refuses: its error names the user.
    let refused = format!(
        "{}/linktrack_nowhere",
        crate::common::server_url().replace("://root@", "://lt_refused_user:wrong-pass@")
    );
    // Both listeners on port 0; the child logs the addresses it bound.
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_linktrack"));
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--admin-listen", "0.0.0.0:0"])
        .arg("--journal")
        .arg(journal.path())
        .env("LINKTRACK_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("DATABASE_URL", &refused)
        .env("RUST_LOG", "warn,linktrack=info");
    let mut child = crate::common::Serving::spawn(command).await;
    let admin = child.admin.expect("the admin listener's address is logged");
    assert!(admin.ip().is_unspecified(), "bound as asked: {admin}");
    let http = reqwest::Client::new();
    let readyz = format!("{}/readyz", crate::common::loopback_url(admin));
    let response = eventually(PATIENCE, "the admin listener comes up", || {
        http.get(&readyz).bearer_auth(ADMIN_TOKEN).send()
    })
    .await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = response.text().await.unwrap();
    assert!(body.contains("database unavailable"), "{body}");
    for secret in ["Access denied", "lt_refused_user", "wrong-pass"] {
        assert!(!body.contains(secret), "/readyz leaks {secret:?}: {body}");
    }
    child.terminate().await;
    let log = child.log();
    assert!(
        log.contains("reachable from other hosts"),
        "no warning about 0.0.0.0: {log}"
    );
    assert!(
        log.contains("lt_refused_user"),
        "the log keeps the detail: {log}"
    );
    assert!(
        !log.contains(ADMIN_TOKEN),
        "the admin token is never logged"
    );
}
