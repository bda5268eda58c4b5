//! `POST /api/letters` and `POST /api/letters/batch` over a real socket:
//! a letter's HTML comes back tracked byte-exactly (only the hrefs
//! changed, the pixel before `</body>`, a `data-linktrack="off"` link
//! left as written but for that attribute), its
//! text's copy of the link tracked with the same token, its rows stored,
//! and its tokens redirect on the same server to the originals; a batch
//! with bad letters tracks the others and names each bad one's index and
//! field; 1,001 letters, no key and a key without `letters:write` are
//! refused; a suppressed recipient gets nothing stored; a server whose
//! seal key is no longer the current one answers 503 saying so.

use crate::common::{client, TestDb, TestServer};
use linktrack::server::AppSettings;
use linktrack::store::seal_keys::{self, Purpose, RingSecrets};
use reqwest::StatusCode;
use serde_json::{json, Value};

const TOKEN: &str = "letters-token-0123456789";
const KEY_SECRET: &str = "letters-key-secret-0123456789";
const SECRET: &str = "letters-secret-0123456789abcdef";

/// The letter's HTML: CRLF, odd spacing, an `&amp;` in the href, a link
/// left alone, a link whose text shows another site's address.
const HTML: &str = "<html><body>\r\n<p  class=x >Caf\u{e9} <a  href=\"https://example.com/page?a=1&amp;b=2\" >read</a>\r\n\
<a href=\"https://example.com/off\" data-linktrack=\"off\">plain</a>\r\n\
<a href=\"https://other.example/x\">https://other.example/x</a></p>\r\n</body></html>\r\n";
const TEXT: &str = "Read https://example.com/page?a=1&b=2 now.\r\nOr https://example.com/off\r\n";
const PAGE: &str = "https://example.com/page?a=1&b=2";

async fn server(db: &TestDb, secret: &str, previous: Vec<String>) -> TestServer {
    let (secret, previous) = (secret.to_owned(), previous);
    TestServer::start(db.pool.clone(), move |settings| AppSettings {
        api_token: Some(TOKEN.to_owned()),
        api_key_secret: Some(KEY_SECRET.to_owned()),
        secret: Some(secret),
        previous_secrets: previous,
        ..settings
    })
    .await
}

async fn post(
    app: &TestServer,
    path: &str,
    key: Option<&str>,
    body: &Value,
) -> (StatusCode, Value) {
    let mut request = client()
        .post(app.url(path))
        .timeout(std::time::Duration::from_secs(60))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

async fn key(app: &TestServer, name: &str, scope: &str) -> String {
    let body = json!({"name": name, "scopes": [scope]});
    let (status, created) = post(app, "/api/keys", Some(TOKEN), &body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["key"].as_str().unwrap().to_owned()
}

fn letter(mailing: &str, recipient: &str) -> Value {
    json!({
        "mailing_id": mailing,
        "recipient": recipient,
        "from": "News <news@example.com>",
        "subject": "Spring news",
        "html": HTML,
        "text": TEXT,
        "tags": ["spring"],
    })
}

/// The tokens of `kind`'s URLs (`/c/`, `/o/`, …) in `text`, in order.
fn tokens(text: &str, route: &str) -> Vec<String> {
    text.match_indices(route)
        .map(|(at, _)| {
            text[at + route.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn a_letter_comes_back_tracked_byte_exactly_and_its_links_redirect() {
    let db = TestDb::new().await;
    let app = server(&db, SECRET, Vec::new()).await;
    let writer = key(&app, "crm", "letters:write").await;

    let (status, done) = post(
        &app,
        "/api/letters",
        Some(&writer),
        &letter("api-spring", " Ann@Example.COM"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["status"], "tracked");
    assert_eq!(done["recipient"], "ann@example.com");
    assert_eq!(done["track"], "all");
    assert_eq!(done["links"], 1, "one link tracked: {done}");
    let html = done["html"].as_str().unwrap();

    // Byte-exact: the letter as written up to the href, the tracked URL,
    // then the letter as written up to `</body>`, before which the tail goes.
    let href = "https://example.com/page?a=1&amp;b=2";
    let (before, after) = HTML.split_once(href).unwrap();
    assert!(html.starts_with(before), "{html}");
    let rest = &html[before.len()..];
    let tracked_url = &rest[..rest.find('"').unwrap()];
    let click = tokens(tracked_url, "/c/")
        .pop()
        .expect("a tracked click URL");
    assert!(tracked_url.ends_with(&format!("/c/{click}")), "{rest}");
    // Only the `data-linktrack` attribute goes (readers never see it).
    let (kept, _) = after.split_once("</body>").unwrap();
    let kept = kept.replace(" data-linktrack=\"off\"", "");
    assert!(
        rest[tracked_url.len()..].starts_with(&kept),
        "everything else as written: {rest}"
    );
    assert!(html.contains("<a href=\"https://example.com/off\">plain</a>"));
    assert!(
        html.contains("href=\"https://other.example/x\">https://other.example/x</a>"),
        "the link-text rule leaves a link that shows another site: {html}"
    );
    let mut pixels = tokens(html, "/o/");
    pixels.dedup();
    assert_eq!(pixels.len(), 1, "the pixel (img and VML area): {html}");

    // The text's copy of the link is the HTML's tracked URL; the link the
    // HTML leaves alone stays in the text too.
    let text = done["text"].as_str().unwrap();
    assert_eq!(
        text,
        format!("Read {tracked_url} now.\r\nOr https://example.com/off\r\n")
    );
    let unsubscribe = done["headers"]["List-Unsubscribe"].as_str().unwrap();
    assert!(
        unsubscribe.starts_with("<http") && unsubscribe.contains("/u/"),
        "{unsubscribe}"
    );

    // The rows: the link's with its original URL and the letter's address.
    let rows: Vec<(String, String, u64)> = sqlx::query_as(
        "SELECT email, url, letter_id FROM links WHERE mailing_id = 'api-spring' \
         AND kind = 'click' AND url <> ''",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let letter_id = done["letter_id"].as_u64().unwrap();
    assert_eq!(
        rows,
        vec![("ann@example.com".to_owned(), PAGE.to_owned(), letter_id)]
    );
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links WHERE letter_id = ?")
        .bind(letter_id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(Some(stored as u64), done["rows"].as_u64(), "{done}");
    let subject: String =
        sqlx::query_scalar("SELECT subject FROM mailings WHERE mailing_id = 'api-spring'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(subject, "Spring news");

    // The served redirect leads to the original.
    let response = client()
        .get(app.url(&format!("/c/{click}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 302);
    assert_eq!(response.headers()["location"], PAGE);
    app.stop().await;
}

#[tokio::test]
async fn a_batch_tracks_the_good_letters_and_names_each_bad_one() {
    let db = TestDb::new().await;
    let app = server(&db, SECRET, Vec::new()).await;
    let writer = key(&app, "crm", "letters:write").await;
    let mut no_html = letter("api-batch", "cy@example.com");
    no_html.as_object_mut().unwrap().remove("html");
    let mut untracked = letter("api-batch", "dee@example.com");
    untracked["track"] = json!("none");
    let batch = json!({"letters": [
        letter("api-batch", "bo@example.com"),
        letter("api-batch", "not an address"),
        no_html,
        untracked,
        letter("api-batch-2", "eve@example.com"),
    ]});
    let (status, answer) = post(&app, "/api/letters/batch", Some(&writer), &batch).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        (
            &answer["tracked"],
            &answer["refused"],
            &answer["suppressed"]
        ),
        (&json!(3), &json!(2), &json!(0)),
        "{answer}"
    );
    let letters = answer["letters"].as_array().unwrap();
    let statuses: Vec<&str> = letters
        .iter()
        .map(|l| l["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["tracked", "refused", "refused", "tracked", "tracked"]
    );
    for (n, l) in letters.iter().enumerate() {
        assert_eq!(l["index"], n);
    }
    assert_eq!(letters[1]["error"]["field"], "letters[1].recipient");
    assert_eq!(letters[2]["error"]["field"], "letters[2].html");
    assert!(
        letters[1].get("html").is_none(),
        "nothing for a refused letter"
    );
    // Mode none: the HTML as written, no link rows, the unsubscribe row only.
    assert_eq!(letters[3]["track"], "none");
    assert_eq!(letters[3]["html"], HTML);
    assert_eq!(letters[3]["text"], TEXT);
    let mut ids: Vec<u64> = [0, 3, 4]
        .iter()
        .map(|n| letters[*n]["letter_id"].as_u64().unwrap())
        .collect();
    ids.dedup();
    assert_eq!(ids.len(), 3, "a letter id each");
    let emails: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT email FROM links WHERE mailing_id LIKE 'api-batch%' ORDER BY email",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        emails,
        ["bo@example.com", "dee@example.com", "eve@example.com"]
    );
    let kinds: Vec<String> =
        sqlx::query_scalar("SELECT CAST(kind AS CHAR) FROM links WHERE email = 'dee@example.com'")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(kinds, ["unsubscribe"]);
    // One letter: a bad field is a 422 naming it.
    let mut bad = letter("api-batch", "fay@example.com");
    bad["track"] = json!("sometimes");
    let (status, refused) = post(&app, "/api/letters", Some(&writer), &bad).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("track:"), "{message}");
    app.stop().await;
}

#[tokio::test]
async fn too_many_letters_no_key_and_a_key_without_the_scope_are_refused() {
    let db = TestDb::new().await;
    let app = server(&db, SECRET, Vec::new()).await;
    let writer = key(&app, "crm", "letters:write").await;
    let reader = key(&app, "bars", "stats:read").await;
    let small = json!({"mailing_id": "api-many", "recipient": "a@example.com",
        "from": "news@example.com", "subject": "s", "html": "<p>hi</p>"});
    let many = json!({"letters": vec![small.clone(); 1_001]});
    let (status, refused) = post(&app, "/api/letters/batch", Some(&writer), &many).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("1000") && message.contains("1001"),
        "{message}"
    );
    let (status, _) = post(
        &app,
        "/api/letters/batch",
        Some(&writer),
        &json!({"letters": []}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, 0, "nothing of a refused batch is stored");

    for path in ["/api/letters", "/api/letters/batch"] {
        let body = if path.ends_with("batch") {
            json!({"letters": [small.clone()]})
        } else {
            small.clone()
        };
        let (status, refused) = post(&app, path, None, &body).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {refused}");
        assert_eq!(refused["error"]["code"], "unauthorized");
        let (status, refused) = post(&app, path, Some(&reader), &body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {refused}");
        assert_eq!(refused["error"]["code"], "missing_scope");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains("letters:write"), "{message}");
    }
    app.stop().await;
}

#[tokio::test]
async fn a_suppressed_recipient_gets_nothing_and_an_opted_out_one_an_untracked_letter() {
    let db = TestDb::new().await;
    let app = server(&db, SECRET, Vec::new()).await;
    let writer = key(&app, "crm", "letters:write").await;
    let add = json!({"addresses": ["gone@example.org"]});
    let (status, added) = post(&app, "/api/suppressions", Some(TOKEN), &add).await;
    assert_eq!(status, StatusCode::OK, "{added}");
    let add = json!({"addresses": ["private@example.org"]});
    let (status, added) = post(&app, "/api/tracking-optouts", Some(TOKEN), &add).await;
    assert_eq!(status, StatusCode::OK, "{added}");

    let batch = json!({"letters": [
        letter("api-privacy", "Gone@Example.org"),
        letter("api-privacy", "private@example.org"),
        letter("api-privacy", "here@example.org"),
    ]});
    let (status, answer) = post(&app, "/api/letters/batch", Some(&writer), &batch).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let letters = &answer["letters"];
    assert_eq!(letters[0]["status"], "suppressed", "{answer}");
    assert_eq!(letters[0]["recipient"], "gone@example.org");
    assert!(letters[0]["reason"]
        .as_str()
        .unwrap()
        .contains("suppression list"));
    assert!(letters[0].get("html").is_none());
    assert_eq!(letters[1]["status"], "tracked");
    assert_eq!(
        letters[1]["track"], "none",
        "an opted-out reader is not tracked"
    );
    assert_eq!(letters[1]["html"], HTML);
    assert_eq!(letters[2]["track"], "all");
    let rows: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM links WHERE email = 'gone@example.org'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(rows, 0, "no row for the suppressed recipient");
    let (status, one) = post(
        &app,
        "/api/letters",
        Some(&writer),
        &letter("api-privacy", "gone@example.org"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["status"], "suppressed");
    app.stop().await;
}

#[tokio::test]
async fn a_server_whose_seal_key_is_no_longer_current_answers_503_saying_why() {
    let db = TestDb::new().await;
    let old = "letters-old-secret-0123456789abcdef";
    let open = |current: &str, previous: Vec<String>, new_secret| RingSecrets {
        current: Some(current.to_owned()),
        previous,
        new_secret,
    };
    seal_keys::open_ring(&db.pool, &open(old, Vec::new(), false), Purpose::Build)
        .await
        .unwrap();
    // SECRET becomes the current key; a server still runs with the old
    // one (SECRET among its previous ones, so it starts).
    seal_keys::open_ring(
        &db.pool,
        &open(SECRET, vec![old.to_owned()], true),
        Purpose::Build,
    )
    .await
    .unwrap();
    let app = server(&db, old, vec![SECRET.to_owned()]).await;
    let (status, refused) = post(
        &app,
        "/api/letters",
        Some(TOKEN),
        &letter("api-stale", "ann@example.com"),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{refused}");
    assert_eq!(refused["error"]["code"], "unavailable");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("cannot seal") && message.contains("LINKTRACK_SECRET"),
        "{message}"
    );
    assert!(
        !message.contains(SECRET) && !message.contains(old),
        "no secret shown"
    );
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, 0);
    app.stop().await;
}
