//! The API's OpenAPI description checked by tools nobody here wrote:
//! openapi-spec-validator reads it, and Schemathesis (`st run`) fuzzes
//! every operation of a live server with it (an all-scope key, a database
//! with a built and rolled-up mailing, the live layer on). Both come from
//! PyPI through scripts/prepare.d/85-api-tools.sh; without them the tests
//! say so and pass (the only skip).

use crate::common::client;
use crate::common::stats_api::{rolled_db, SECRET, TOKEN};
use crate::common::TestServer;
use linktrack::server::AppSettings;
use std::path::PathBuf;
use std::process::Command;

/// The virtual environment the prepare step installs the tools into.
fn tools() -> Option<PathBuf> {
    let venv = PathBuf::from(
        std::env::var("LINKTRACK_PYTOOLS").unwrap_or_else(|_| "/opt/linktrack-pytools".to_owned()),
    );
    let ready = venv.join("bin/st").exists() && venv.join("bin/python").exists();
    if !ready {
        eprintln!(
            "SKIPPED: {} has no Schemathesis / openapi-spec-validator: \
             run scripts/prepare.d/85-api-tools.sh (it installs them from PyPI)",
            venv.display()
        );
    }
    ready.then_some(venv)
}

async fn api_server() -> (crate::common::TestDb, TestServer) {
    let db = rolled_db().await;
    let prefix = format!("lt:test:{:x}:", rand::random::<u64>());
    let live = linktrack::live::Live::new("redis://127.0.0.1:6379", &prefix).unwrap();
    let app = TestServer::start(db.pool.clone(), |settings| AppSettings {
        api_token: Some(TOKEN.to_owned()),
        secret: Some(SECRET.to_owned()),
        live: Some(live),
        ..settings
    })
    .await;
    (db, app)
}

#[tokio::test]
async fn the_description_is_valid_openapi_3_1_and_names_the_routes() {
    let (_db, app) = api_server().await;
    let response = client()
        .get(app.url("/api/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "served without a key");
    let text = response.text().await.unwrap();
    let description: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(description["openapi"], "3.1.0");
    for path in [
        "/api/mailings",
        "/api/erase",
        "/api/letters",
        "/api/letters/batch",
        "/api/mailings/{id}/stats",
        "/api/mailings/{id}/recipients",
        "/api/mailings/{id}/breakdowns",
        "/api/keys",
        "/api/events/stream",
        "/api/suppressions",
        "/api/tracking-optouts",
    ] {
        assert!(description["paths"][path].is_object(), "{path} missing");
    }
    app.stop().await;
    let Some(venv) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, &text).unwrap();
    let checked = Command::new(venv.join("bin/openapi-spec-validator"))
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "openapi-spec-validator refused the description:\n{}\n{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

#[tokio::test]
async fn schemathesis_finds_no_failure_in_any_operation() {
    let Some(venv) = tools() else { return };
    let (_db, app) = api_server().await;
    let dir = tempfile::tempdir().unwrap();
    let fuzzed = tokio::task::spawn_blocking({
        let schema = app.url("/api/openapi.json");
        let st = venv.join("bin/st");
        let report = dir.path().join("junit.xml");
        move || {
            Command::new(st)
                .args(["run", &schema])
                .args([
                    "--checks",
                    "not_a_server_error,response_schema_conformance,status_code_conformance",
                ])
                .args(["--max-examples", "25", "--workers", "1", "--seed", "55"])
                .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
                .arg("--report=junit")
                .arg(format!("--report-junit-path={}", report.display()))
                .env("NO_COLOR", "1")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&fuzzed.stdout);
    assert!(
        fuzzed.status.success(),
        "Schemathesis found failures:\n{out}\n{}",
        String::from_utf8_lossy(&fuzzed.stderr)
    );
    app.stop().await;
}
