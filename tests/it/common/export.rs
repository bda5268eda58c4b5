//! What the export and privacy tests share: a mailing built from JSON
//! through the builder and its letters read back, a letter's tracked
//! tokens, the settings under which the tests' quick clicks are people's
//! (on the server and in the rollup), and a server with the stats API on.

use super::build::{options, tracked_tokens};
use super::stats_api::TOKEN;
use super::{client, quick, server_pool, test_settings, TestDb, TestServer};
use linktrack::builder::{self, Summary};
use linktrack::kind::LinkKind;
use linktrack::server::state::ServerSettings;
use linktrack::server::AppSettings;
use linktrack::store::rollup;
use linktrack::token::Token;
use serde_json::Value;
use std::path::Path;

/// Build `mailing` (its JSON) for `recipients` (one JSON object each) in
/// `dir`: the builder's summary and the letters as its output has them
/// (none when every recipient was left out).
pub async fn build_letters(
    db: &TestDb,
    dir: &Path,
    mailing: Value,
    recipients: &[Value],
) -> (Summary, Vec<Value>) {
    let (m, r) = (dir.join("m.json"), dir.join("r.jsonl"));
    std::fs::write(&m, mailing.to_string()).unwrap();
    let lines: Vec<String> = recipients.iter().map(Value::to_string).collect();
    std::fs::write(&r, lines.join("\n")).unwrap();
    let summary = builder::run(&db.pool, &options(dir, m, r)).await.unwrap();
    let letters = std::fs::read_to_string(dir.join("letters.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (summary, letters)
}

/// Build mailing `id`, a letter with two links, for `recipients`, none of
/// whom may be rejected; its letters.
pub async fn build_mailing(db: &TestDb, dir: &Path, id: &str, recipients: &[Value]) -> Vec<Value> {
    let html = "<p>Hi</p><a href=\"https://example.com/one\">one</a> \
                <a href=\"https://example.com/two\">two</a></body>";
    let mailing = serde_json::json!({"mailing_id": id, "subject": "S",
        "from": "news@example.com", "html": html});
    let (summary, letters) = build_letters(db, dir, mailing, recipients).await;
    assert_eq!(summary.rejected, 0, "{summary}");
    letters
}

/// The letter to `email` (as the output spells it).
pub fn letter<'a>(letters: &'a [Value], email: &str) -> &'a Value {
    letters
        .iter()
        .find(|l| l["email"] == email)
        .unwrap_or_else(|| panic!("no letter to {email}: {letters:?}"))
}

/// A letter's tokens of `kind`, in order (HTML, then the List-Unsubscribe
/// header).
pub fn tokens(letter: &Value, kind: LinkKind) -> Vec<Token> {
    let text = format!(
        "{} {}",
        letter["html"], letter["headers"]["List-Unsubscribe"]
    );
    tracked_tokens(&text)
        .into_iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, t)| t)
        .collect()
}

/// Server settings under which every click the test makes is a human's
/// (no minimum delay after delivery, no burst rule).
pub fn humans_only() -> ServerSettings {
    let mut settings = test_settings();
    settings.bots.min_click_delay = std::time::Duration::ZERO;
    settings.bots.burst_links = 1_000;
    settings
}

/// The rollup with verdicts under which the tests' quick clicks are
/// people's, as [`humans_only`] on the server.
pub fn lenient_rollup() -> rollup::RollupOptions {
    let verdicts = linktrack::bots::letter_judgement::VerdictRules {
        min_click_delay: std::time::Duration::ZERO,
        burst_links: 1_000,
        ..Default::default()
    };
    rollup::RollupOptions {
        verdicts: std::sync::Arc::new(verdicts),
        ..Default::default()
    }
}

/// A server on the test's database with `settings` and the stats API on
/// (its token: [`TOKEN`]).
pub async fn api_server(db: &TestDb, settings: ServerSettings) -> TestServer {
    TestServer::start(server_pool(db).await, |s| AppSettings {
        server: settings,
        api_token: Some(TOKEN.into()),
        ..quick(s)
    })
    .await
}

/// `GET path` on `app`, with `token` as the bearer if given.
pub async fn get(app: &TestServer, path: &str, token: Option<&str>) -> reqwest::Response {
    let request = client().get(app.url(path));
    let request = match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    };
    request.send().await.unwrap()
}
