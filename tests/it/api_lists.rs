//! The suppression and tracking opt-out lists over the API: pages by
//! address with a cursor, add (invalid addresses refused by place), import
//! a CSV body (bad rows by line), remove; each scope checked (403 naming
//! it), bad input answered 400/422 naming the field, and the CLI sees
//! what the API wrote.

use crate::common::{days_ago, linktrack, TestDb, TestServer};
use linktrack::server::AppSettings;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const TOKEN: &str = "lists-token-0123456789";
const KEY_SECRET: &str = "lists-key-secret-0123456789";

async fn server(db: &TestDb) -> TestServer {
    TestServer::start(db.pool.clone(), |settings| AppSettings {
        api_token: Some(TOKEN.to_owned()),
        api_key_secret: Some(KEY_SECRET.to_owned()),
        ..settings
    })
    .await
}

async fn call(
    app: &TestServer,
    method: Method,
    path: &str,
    key: &str,
    body: Option<(&str, String)>,
) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new()
        .request(method, app.url(path))
        .bearer_auth(key);
    if let Some((content_type, body)) = body {
        request = request.header("content-type", content_type).body(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn json_body(value: Value) -> Option<(&'static str, String)> {
    Some(("application/json", value.to_string()))
}

async fn key(app: &TestServer, name: &str, scope: &str) -> String {
    let body = json_body(json!({"name": name, "scopes": [scope]}));
    let (status, created) = call(app, Method::POST, "/api/keys", TOKEN, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["key"].as_str().unwrap().to_owned()
}

fn assert_refused(status: StatusCode, body: &Value, want: StatusCode, words: &[&str]) {
    assert_eq!(status, want, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    for word in words {
        assert!(message.contains(word), "{message:?} lacks {word:?}");
    }
}

#[tokio::test]
async fn suppressions_are_paged_added_imported_and_removed_each_with_its_scope() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let app = server(&db).await;
    let reader = key(&app, "reader", "suppressions:read").await;
    let writer = key(&app, "writer", "suppressions:write").await;

    let add = json!({"addresses": ["Ann@Example.COM", "not-an-address", "bob@example.com"], "note": "bounce"});
    let (status, body) = call(
        &app,
        Method::POST,
        "/api/suppressions",
        &reader,
        json_body(add.clone()),
    )
    .await;
    assert_refused(
        status,
        &body,
        StatusCode::FORBIDDEN,
        &["suppressions:write"],
    );
    assert_eq!(body["error"]["code"], "missing_scope");
    let (status, report) = call(
        &app,
        Method::POST,
        "/api/suppressions",
        &writer,
        json_body(add),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["taken"], 2);
    assert_eq!(report["added"], 2);
    assert_eq!(report["refused_count"], 1);
    assert_eq!(report["refused"][0]["at"], "addresses[1]");
    assert_eq!(report["refused"][0]["value"], "not-an-address");

    let (status, body) = call(
        &app,
        Method::POST,
        "/api/suppressions",
        &writer,
        json_body(json!({"addresses": ["nope"]})),
    )
    .await;
    assert_refused(
        status,
        &body,
        StatusCode::UNPROCESSABLE_ENTITY,
        &["addresses[0]", "nope"],
    );
    let long = "x".repeat(65);
    let (status, body) = call(
        &app,
        Method::POST,
        "/api/suppressions",
        &writer,
        json_body(json!({"addresses": ["c@example.com"], "note": long})),
    )
    .await;
    assert_refused(status, &body, StatusCode::UNPROCESSABLE_ENTITY, &["note"]);
    let (status, body) = call(
        &app,
        Method::POST,
        "/api/suppressions",
        &writer,
        json_body(json!({"emails": []})),
    )
    .await;
    assert_refused(status, &body, StatusCode::BAD_REQUEST, &["emails"]);

    // A CSV body: a header, a bad row named by its line, a quoted field.
    let csv =
        "email,name\ncarl@example.com,Carl\nbad row,x\n\"dora@example.com\",Dora\n".to_owned();
    let (status, report) = call(
        &app,
        Method::POST,
        "/api/suppressions/import",
        &writer,
        Some(("text/csv", csv)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["taken"], 2);
    assert_eq!(report["added"], 2);
    assert_eq!(report["refused"][0]["at"], "line 3");
    assert_eq!(report["refused"][0]["value"], "bad row");
    let (status, body) = call(
        &app,
        Method::POST,
        "/api/suppressions/import",
        &writer,
        Some(("text/csv", "a@example.com\n".into())),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Pages by address: ann, bob, carl, dora, a@.
    let (status, body) = call(
        &app,
        Method::GET,
        "/api/suppressions?limit=2",
        &writer,
        None,
    )
    .await;
    assert_refused(status, &body, StatusCode::FORBIDDEN, &["suppressions:read"]);
    let mut seen = Vec::new();
    let mut path = "/api/suppressions?limit=2".to_owned();
    loop {
        let (status, page) = call(&app, Method::GET, &path, &reader, None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        for entry in page["entries"].as_array().unwrap() {
            seen.push((
                entry["email"].as_str().unwrap().to_owned(),
                entry["reason"].as_str().unwrap().to_owned(),
            ));
        }
        match page["next"].as_str() {
            Some(next) => path = format!("/api/suppressions?limit=2&after={next}"),
            None => break,
        }
    }
    let want: Vec<(String, String)> = [
        ("a@example.com", "import"),
        ("ann@example.com", "bounce"),
        ("bob@example.com", "bounce"),
        ("carl@example.com", "import"),
        ("dora@example.com", "import"),
    ]
    .iter()
    .map(|(e, r)| (e.to_string(), r.to_string()))
    .collect();
    assert_eq!(seen, want);
    let (status, body) = call(
        &app,
        Method::GET,
        "/api/suppressions?limit=0",
        &reader,
        None,
    )
    .await;
    assert_refused(status, &body, StatusCode::BAD_REQUEST, &["limit"]);

    let (status, body) = call(
        &app,
        Method::DELETE,
        "/api/suppressions/Ann@Example.com",
        &writer,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["email"], "ann@example.com");
    let (status, body) = call(
        &app,
        Method::DELETE,
        "/api/suppressions/ann@example.com",
        &writer,
        None,
    )
    .await;
    assert_refused(status, &body, StatusCode::NOT_FOUND, &["ann@example.com"]);

    // The CLI reads what the API wrote.
    let listed = linktrack(&db, &["suppressions", "list"]);
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(listed.contains("carl@example.com\timport"), "{listed}");
    assert!(!listed.contains("ann@example.com"), "{listed}");
    app.stop().await;
}

#[tokio::test]
async fn tracking_optouts_are_added_listed_and_removed() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let app = server(&db).await;
    let add = json!({"addresses": ["Eve@Example.com"]});
    let (status, report) = call(
        &app,
        Method::POST,
        "/api/tracking-optouts",
        TOKEN,
        json_body(add),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["added"], 1);
    let csv = "fay@example.com\n# a comment\n\nnot one\n".to_owned();
    let (status, report) = call(
        &app,
        Method::POST,
        "/api/tracking-optouts/import?note=form",
        TOKEN,
        Some(("text/csv", csv)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["taken"], 1);
    assert_eq!(report["refused"][0]["at"], "line 4");

    let (status, page) = call(&app, Method::GET, "/api/tracking-optouts", TOKEN, None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["entries"][0]["email"], "eve@example.com");
    assert_eq!(page["entries"][0]["source"], "manual");
    assert_eq!(page["entries"][1]["source"], "form");
    assert_eq!(page["next"], Value::Null);
    let listed = linktrack(&db, &["tracking-optouts", "list"]);
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(listed.contains("eve@example.com\tmanual"), "{listed}");

    let (status, _) = call(
        &app,
        Method::DELETE,
        "/api/tracking-optouts/eve@example.com",
        TOKEN,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, page) = call(&app, Method::GET, "/api/tracking-optouts", TOKEN, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["entries"].as_array().unwrap().len(), 1);
    app.stop().await;
}

/// `POST /api/erase`: the scope `erase` only; the address's rows gone
/// everywhere, its letters counted in the answer, which names it by its
/// place alone; a repeat says so; bad bodies refused naming the field.
#[tokio::test]
async fn erase_over_the_api_scrubs_the_address_and_needs_its_scope() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let mailing = dir.path().join("mailing.json");
    let file = json!({
        "mailing_id": "m-erase-api",
        "subject": "Hello",
        "from": "News <news@example.com>",
        "html": "<p><a href=\"https://example.com/a\">A</a></p>",
    });
    std::fs::write(&mailing, file.to_string()).unwrap();
    let recipients = dir.path().join("r.jsonl");
    std::fs::write(
        &recipients,
        "{\"email\":\"ann@example.com\"}\n{\"email\":\"bob@example.com\"}\n",
    )
    .unwrap();
    linktrack::builder::run(
        &db.pool,
        &crate::common::build::options(dir.path(), mailing, recipients),
    )
    .await
    .unwrap();
    let app = server(&db).await;
    let stats_key = key(&app, "stats-only", "stats:read").await;
    let erase_key = key(&app, "eraser", "erase").await;
    let body = || json_body(json!({"addresses": ["ann@example.com"], "wait_secs": 1}));

    let (status, refused) = call(&app, Method::POST, "/api/erase", &stats_key, body()).await;
    assert_refused(status, &refused, StatusCode::FORBIDDEN, &["erase"]);
    let rows = |email: &'static str| {
        let pool = db.pool.clone();
        async move {
            let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM links WHERE email = ?")
                .bind(email)
                .fetch_one(&pool)
                .await
                .unwrap();
            n
        }
    };
    assert!(rows("ann@example.com").await > 0, "nothing erased yet");

    let (status, answer) = call(&app, Method::POST, "/api/erase", &erase_key, body()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let erased = &answer["erased"][0];
    assert_eq!(erased["at"], "addresses[0]");
    assert_eq!(erased["repeated"], false);
    assert_eq!(erased["letters"], 1, "{answer}");
    assert!(erased["links"].as_u64().unwrap() >= 1, "{answer}");
    assert!(
        !answer.to_string().contains("ann@"),
        "the answer names no address"
    );
    assert_eq!(rows("ann@example.com").await, 0);
    assert!(rows("bob@example.com").await > 0, "only the address named");

    let (_, again) = call(&app, Method::POST, "/api/erase", &erase_key, body()).await;
    assert_eq!(again["erased"][0]["repeated"], true, "{again}");

    let bad = json_body(json!({"addresses": ["someone@example.com", "no-at-sign"]}));
    let (status, refused) = call(&app, Method::POST, "/api/erase", &erase_key, bad).await;
    assert_refused(
        status,
        &refused,
        StatusCode::UNPROCESSABLE_ENTITY,
        &["addresses[1]"],
    );
    let long = json_body(json!({"addresses": ["bob@example.com"], "wait_secs": 99}));
    let (status, refused) = call(&app, Method::POST, "/api/erase", &erase_key, long).await;
    assert_refused(
        status,
        &refused,
        StatusCode::UNPROCESSABLE_ENTITY,
        &["wait_secs"],
    );
    assert!(
        rows("bob@example.com").await > 0,
        "a refused body erases nothing"
    );
}
