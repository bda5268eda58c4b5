//! API keys and scopes over real HTTP: keys made with `linktrack keys`
//! and `POST /api/keys`, stored only as keyed hashes, each limited to its
//! scopes (403 naming the one missing), refused by every server once
//! revoked or expired; the OpenAPI description served and valid.

use crate::common::client;
use crate::common::stats::MAILING;
use crate::common::stats_api::{rolled_db, SECRET, TOKEN};
use crate::common::wait::{eventually_eq, PATIENCE};
use crate::common::{linktrack_binary, TestDb, TestServer};
use linktrack::server::AppSettings;
use reqwest::StatusCode;
use serde_json::{json, Value};

const KEY_SECRET: &str = "api-key-secret-0123456789";

/// A server with the token, the login secret and the dedicated key secret.
async fn server(db: &TestDb) -> TestServer {
    TestServer::start(db.pool.clone(), |settings| AppSettings {
        api_token: Some(TOKEN.to_owned()),
        api_key_secret: Some(KEY_SECRET.to_owned()),
        secret: Some(SECRET.to_owned()),
        ..settings
    })
    .await
}

/// `linktrack keys …` on the test's database with the key secret.
fn keys(db: &TestDb, args: &[&str]) -> std::process::Output {
    std::process::Command::new(linktrack_binary())
        .arg("keys")
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("LINKTRACK_API_KEY_SECRET", KEY_SECRET)
        .env("RUST_LOG", "warn")
        .output()
        .expect("running linktrack")
}

fn stdout(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "linktrack failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

async fn get(url: String, key: &str) -> (StatusCode, Value) {
    let response = client().get(url).bearer_auth(key).send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Poll until `url` answers `want` to `key`.
async fn until_status(url: String, key: &str, want: StatusCode) {
    let what = format!("{url} answers {want}");
    eventually_eq(PATIENCE, &what, want, || async {
        get(url.clone(), key).await.0
    })
    .await;
}

#[tokio::test]
async fn a_stats_key_reads_stats_is_refused_the_export_and_is_revoked_on_every_server() {
    let db = rolled_db().await;
    let (one, two) = (server(&db).await, server(&db).await);
    let created = keys(
        &db,
        &["create", "--name", "bars-stats", "--scope", "stats:read"],
    );
    let key = stdout(&created).trim().to_owned();
    assert!(key.starts_with("lt_"), "{key}");
    let prefix = &key[3..11];

    let list = stdout(&keys(&db, &["list"]));
    assert!(list.contains("bars-stats"), "{list}");
    assert!(list.contains(&format!("lt_{prefix}")), "{list}");
    assert!(
        !list.contains(&key[12..]),
        "keys list printed the key: {list}"
    );
    let stored: Vec<(String, String, Vec<u8>, String)> =
        sqlx::query_as("SELECT name, prefix, key_hash, scopes FROM api_keys")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(stored.len(), 1);
    let row = format!("{:?}{}", stored[0], hex::encode(&stored[0].2));
    assert!(
        !row.contains(&key[12..]),
        "the key is stored in clear: {row}"
    );

    let stats = |app: &TestServer| app.url(&format!("/api/mailings/{MAILING}/stats"));
    let export = one.url(&format!("/api/mailings/{MAILING}/recipients"));
    for app in [&one, &two] {
        let (status, body) = get(stats(app), &key).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["mailing_id"], MAILING);
    }
    let (status, body) = get(export.clone(), &key).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "missing_scope");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("needs scope export:read"), "{message}");
    // The shared token keeps every scope.
    let (status, _) = get(export.clone(), TOKEN).await;
    assert_eq!(status, StatusCode::OK);
    // A key of the right shape that was never made is a wrong guess.
    let forged = format!("lt_{prefix}_{}", "0".repeat(64));
    let (status, body) = get(stats(&one), &forged).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
    let (status, body) = get(stats(&one), "").await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::UNAUTHORIZED, &json!("unauthorized"))
    );

    let revoked = stdout(&keys(&db, &["revoke", prefix]));
    assert!(revoked.contains("bars-stats"), "{revoked}");
    for app in [&one, &two] {
        until_status(stats(app), &key, StatusCode::UNAUTHORIZED).await;
    }
    let list = stdout(&keys(&db, &["list"]));
    let line = list.lines().find(|l| l.starts_with("bars-stats")).unwrap();
    assert!(!line.contains("\t-\t"), "no revocation time listed: {line}");
    let again = keys(&db, &["revoke", "no-such-key"]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("no-such-key"));
    one.stop().await;
    two.stop().await;
}

#[tokio::test]
async fn keys_are_made_listed_and_revoked_over_the_api_with_keys_admin() {
    let db = rolled_db().await;
    let app = server(&db).await;
    let keys_url = app.url("/api/keys");
    let created = client()
        .post(&keys_url)
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(json!({"name": "reader", "scopes": ["stats:read"], "expires_days": 30}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let created: Value = serde_json::from_str(&created.text().await.unwrap()).unwrap();
    let key = created["key"].as_str().unwrap().to_owned();
    assert_eq!(created["scopes"], json!(["stats:read"]));
    assert!(created["expires"].is_string(), "{created}");

    let (status, list) = get(keys_url.clone(), TOKEN).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["keys"][0]["name"], "reader");
    assert!(!list.to_string().contains(&key), "the list shows the key");
    // The key reads stats but may not manage keys.
    let (status, body) = get(keys_url.clone(), &key).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("keys:admin"));

    for (body, code, status) in [
        (
            json!({"name": "reader", "scopes": ["stats:read"]}),
            "conflict",
            StatusCode::CONFLICT,
        ),
        (
            json!({"name": "x", "scopes": ["stats:write"]}),
            "bad_request",
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "x", "scopes": []}),
            "bad_request",
            StatusCode::BAD_REQUEST,
        ),
        (json!({"name": "x"}), "bad_request", StatusCode::BAD_REQUEST),
    ] {
        let response = client()
            .post(&keys_url)
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{body}");
        let answer: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
    }

    let stats = app.url(&format!("/api/mailings/{MAILING}/stats"));
    until_status(stats.clone(), &key, StatusCode::OK).await;
    let revoked = client()
        .delete(app.url("/api/keys/reader"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::OK);
    until_status(stats, &key, StatusCode::UNAUTHORIZED).await;
    let missing = client()
        .delete(app.url("/api/keys/nobody"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    app.stop().await;
}

#[tokio::test]
async fn an_expired_key_is_refused() {
    let db = rolled_db().await;
    let app = server(&db).await;
    let key = stdout(&keys(
        &db,
        &[
            "create",
            "--name",
            "brief",
            "--scope",
            "stats:read",
            "--expires",
            "1",
        ],
    ))
    .trim()
    .to_owned();
    let stats = app.url(&format!("/api/mailings/{MAILING}/stats"));
    until_status(stats.clone(), &key, StatusCode::OK).await;
    sqlx::query("UPDATE api_keys SET expires = UTC_TIMESTAMP() - INTERVAL 1 SECOND")
        .execute(&db.pool)
        .await
        .unwrap();
    until_status(stats, &key, StatusCode::UNAUTHORIZED).await;
    app.stop().await;
}
