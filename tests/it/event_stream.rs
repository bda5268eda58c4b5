//! `GET /api/events/stream` over a real socket: clicks and opens taken by
//! the server reach SSE clients (reqwest reading the body as it comes, and
//! `curl -N`) as the webhooks' JSON, filtered by mailing and type; a client
//! resuming with `Last-Event-ID` gets what it missed; a key without
//! `events:read` is refused with 403, and a key's sixth stream with 429.

use crate::common::wait::{self, PATIENCE};
use crate::common::{days_ago, seal_of, sealed_token, TestDb, TestServer, BROWSER};
use chrono::Utc;
use futures_util::StreamExt;
use linktrack::server::AppSettings;
use linktrack::store::bounces::{self, Decision, LetterRow};
use linktrack::store::links::{self, LinkKind, NewLink};
use linktrack::token::Token;
use serde_json::Value;
use std::io::BufRead;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

const TOKEN: &str = "stream-token-0123456789";
const KEY_SECRET: &str = "stream-key-secret-0123456789";

async fn server(db: &TestDb) -> TestServer {
    TestServer::start(db.pool.clone(), |settings| {
        let mut journal = settings.journal.clone();
        journal.seal_after = Duration::from_millis(50);
        AppSettings {
            journal,
            api_token: Some(TOKEN.to_owned()),
            api_key_secret: Some(KEY_SECRET.to_owned()),
            ..settings
        }
    })
    .await
}

/// A letter of `mailing`: a click link and the open pixel.
struct Letter {
    click: Token,
    pixel: Token,
}

async fn letter(db: &TestDb, mailing: &str, letter_id: u64) -> Letter {
    let seal = seal_of(&db.pool).await;
    let made = Utc::now() - chrono::Duration::hours(1);
    let link = |kind, position: u32, url: &str| NewLink {
        token: sealed_token(&seal, made, kind),
        kind,
        mailing_id: mailing.into(),
        letter_id,
        email: format!("r{letter_id}@example.com"),
        position,
        url: url.into(),
        meta: Some(serde_json::json!({"tags": ["ruby"]})),
    };
    let rows = vec![
        link(LinkKind::Click, 1, "https://example.com/sale"),
        link(LinkKind::Pixel, 0, ""),
    ];
    links::insert(&db.pool, &rows).await.unwrap();
    Letter {
        click: rows[0].token,
        pixel: rows[1].token,
    }
}

fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(BROWSER)
        .build()
        .unwrap()
}

async fn click(app: &TestServer, token: Token) {
    let r = browser().get(app.url(&format!("/c/{token}"))).send().await;
    assert_eq!(r.unwrap().status(), 302);
}

async fn open(app: &TestServer, token: Token) {
    let r = browser()
        .get(app.url(&format!("/o/{token}.gif")))
        .send()
        .await;
    assert_eq!(r.unwrap().status(), 200);
}

/// One server-sent event.
#[derive(Debug)]
struct Sse {
    id: Option<String>,
    data: Value,
}

/// An SSE client: reqwest reading the response body as it arrives.
struct Stream {
    body: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>,
    >,
    buffer: String,
    comments: usize,
}

impl Stream {
    async fn open(url: String, key: &str, last_event_id: Option<&str>) -> Stream {
        let response = stream_request(url, key, last_event_id).await;
        if response.status() != 200 {
            let status = response.status();
            panic!("{status}: {}", response.text().await.unwrap_or_default());
        }
        Stream::reading(response)
    }

    fn reading(response: reqwest::Response) -> Stream {
        let content_type = response.headers()["content-type"].to_str().unwrap();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Stream {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
            comments: 0,
        }
    }

    /// The next event with data. The server pushes it, so there is nothing
    /// to poll: the wait is one read of the body under `wait::PATIENCE` as a
    /// hang guard (a ceiling, not a measure: the stream's promise is 2 s).
    async fn next(&mut self) -> Sse {
        tokio::time::timeout(wait::scaled(PATIENCE), self.read_event())
            .await
            .expect("an event within the test's patience")
    }

    async fn read_event(&mut self) -> Sse {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut id, mut data) = (None, String::new());
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("id:") {
                        id = Some(value.trim_start().to_owned());
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim_start());
                    } else if line.starts_with(':') {
                        self.comments += 1;
                    }
                }
                if !data.is_empty() {
                    let data = serde_json::from_str(&data).expect("each event's data is JSON");
                    return Sse { id, data };
                }
                continue;
            }
            let chunk = self
                .body
                .next()
                .await
                .expect("the stream stays open")
                .expect("the stream reads");
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

/// The first line curl has printed so far that `wanted` picks, or what
/// was seen instead (the last line, or that curl has printed nothing new).
fn curl_line<T>(
    from_curl: &Receiver<String>,
    wanted: impl Fn(&str) -> Option<T>,
) -> Result<T, String> {
    let mut last = String::from("no line yet");
    loop {
        match from_curl.try_recv() {
            Ok(line) => match wanted(&line) {
                Some(found) => return Ok(found),
                None => last = line,
            },
            Err(TryRecvError::Empty) => return Err(last),
            Err(TryRecvError::Disconnected) => return Err(format!("curl ended after {last:?}")),
        }
    }
}

async fn stream_request(url: String, key: &str, last_event_id: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(url).bearer_auth(key);
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id);
    }
    request.send().await.unwrap()
}

/// A key made through the API with `scopes`.
async fn key(app: &TestServer, name: &str, scopes: &[&str]) -> String {
    let response = reqwest::Client::new()
        .post(app.url("/api/keys"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(serde_json::json!({"name": name, "scopes": scopes}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    body["key"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_and_opens_reach_the_stream_filtered_and_a_reconnect_gets_what_it_missed() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let spring = letter(&db, "spring", 7).await;
    let autumn = letter(&db, "autumn", 8).await;
    let app = server(&db).await;
    let url = app.url("/api/events/stream");

    let mut all = Stream::open(url.clone(), TOKEN, None).await;
    let mut autumn_only = Stream::open(format!("{url}?mailing=autumn"), TOKEN, None).await;
    let mut opens_only = Stream::open(format!("{url}?types=email.opened"), TOKEN, None).await;

    click(&app, spring.click).await;
    let clicked = all.next().await;
    assert_eq!(clicked.data["type"], "email.clicked", "{clicked:?}");
    let data = &clicked.data["data"];
    assert_eq!(data["mailing_id"], "spring");
    assert_eq!(data["letter_id"], 7);
    assert_eq!(data["email"], "r7@example.com");
    assert_eq!(data["url"], "https://example.com/sale");
    assert_eq!(data["tags"], serde_json::json!(["ruby"]));
    assert_eq!(data["bot"]["verdict"], false);
    let stored: Vec<u8> = sqlx::query_scalar("SELECT event_id FROM events WHERE kind = 'click'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        data["event_id"],
        hex::encode(stored),
        "the stored event's id"
    );
    let missed_from = clicked.id.clone().expect("every event has an id");
    // The client goes away; two more events happen.
    drop(all);

    open(&app, spring.pixel).await;
    let opened = opens_only.next().await;
    assert_eq!(
        opened.data["type"], "email.opened",
        "the click was filtered out"
    );
    assert_eq!(opened.data["data"]["mailing_id"], "spring");
    click(&app, autumn.click).await;
    let autumn_click = autumn_only.next().await;
    assert_eq!(autumn_click.data["type"], "email.clicked");
    assert_eq!(
        autumn_click.data["data"]["mailing_id"], "autumn",
        "spring's click and open were filtered out"
    );

    // Resuming: what was stored after the click, in order, then live.
    let mut resumed = Stream::open(url.clone(), TOKEN, Some(&missed_from)).await;
    let first = resumed.next().await;
    assert_eq!(first.data["type"], "email.opened", "{first:?}");
    let second = resumed.next().await;
    assert_eq!(second.data["type"], "email.clicked");
    assert_eq!(second.data["data"]["mailing_id"], "autumn");
    assert_eq!(
        second.id, autumn_click.id,
        "the same cursor on every stream"
    );
    // A decision the bounce ingest stores goes out too.
    let letter_row = LetterRow {
        mailing_id: "spring".into(),
        letter_id: 7,
        email: "r7@example.com".into(),
    };
    let decision = Decision {
        source_key: [9; 32],
        source_message_id: "<bounce-1@example.net>",
        letter: &letter_row,
        kind: "hard",
        status: "5.1.1",
        diagnostic: "550 5.1.1 no such user",
        action: "suppressed",
    };
    assert!(bounces::record(&db.pool, &decision).await.unwrap());
    let bounced = resumed.next().await;
    assert_eq!(bounced.data["type"], "email.bounced", "{bounced:?}");
    assert_eq!(bounced.data["data"]["bounce_type"], "hard");
    assert_eq!(bounced.data["data"]["letter_id"], 7);

    // A stream a client resumes from an id it was never sent: 400.
    let response = stream_request(url.clone(), TOKEN, Some("yesterday")).await;
    assert_eq!(response.status(), 400);
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "bad_request");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Last-Event-ID"),
        "{body}"
    );
    let response =
        stream_request(format!("{url}?types=email.clicked,email.read"), TOKEN, None).await;
    assert_eq!(response.status(), 400);
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("types") && message.contains("email.read"),
        "{message}"
    );
    drop((resumed, autumn_only, opens_only));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_needs_events_read_and_a_key_holds_five_streams_at_most() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let spring = letter(&db, "spring", 7).await;
    let app = server(&db).await;
    let url = app.url("/api/events/stream");

    let stats_only = key(&app, "stats-only", &["stats:read"]).await;
    let response = stream_request(url.clone(), &stats_only, None).await;
    assert_eq!(response.status(), 403);
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "missing_scope");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("needs scope events:read"), "{message}");
    let response = stream_request(url.clone(), "lt_wrong_key", None).await;
    assert_eq!(response.status(), 401);

    let watcher = key(&app, "dashboard", &["events:read"]).await;
    let mut streams = Vec::new();
    for _ in 0..5 {
        streams.push(Stream::open(url.clone(), &watcher, None).await);
    }
    let response = stream_request(url.clone(), &watcher, None).await;
    assert_eq!(response.status(), 429);
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "too_many_requests");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("5 event streams"));
    // Another key is counted apart.
    let mut other = Stream::open(url.clone(), TOKEN, None).await;

    // curl -N, a client no one here wrote, sees the click too.
    let mut curl = std::process::Command::new("curl")
        .args([
            "-N",
            "-s",
            "-H",
            &format!("Authorization: Bearer {TOKEN}"),
            &url,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("curl runs");
    let stdout = curl.stdout.take().unwrap();
    let (lines, from_curl) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    // The stream's first line (a comment) says curl's stream is open.
    wait::eventually(PATIENCE, "curl prints the stream's opening comment", || {
        std::future::ready(curl_line(&from_curl, |line| {
            line.starts_with(':').then_some(())
        }))
    })
    .await;
    click(&app, spring.click).await;
    let seen = other.next().await;
    assert_eq!(seen.data["type"], "email.clicked");
    let curl_data: Value = wait::eventually(PATIENCE, "curl prints the event", || {
        std::future::ready(curl_line(&from_curl, |line| {
            let data = line.strip_prefix("data:")?;
            Some(serde_json::from_str::<Value>(data.trim()).unwrap())
        }))
    })
    .await;
    let _ = curl.kill();
    let _ = curl.wait();
    assert_eq!(curl_data["type"], "email.clicked");
    assert_eq!(curl_data["data"]["event_id"], seen.data["data"]["event_id"]);

    // Closing one of the key's streams gives its place back.
    drop(streams.pop());
    let back = wait::eventually(PATIENCE, "the closed stream's place comes back", || {
        let request = stream_request(url.clone(), &watcher, None);
        async move {
            let response = request.await;
            if response.status() == 200 {
                return Ok(response);
            }
            assert_eq!(response.status(), 429);
            Err(response.status())
        }
    })
    .await;
    streams.push(Stream::reading(back));
    drop((streams, other));
    app.stop().await;
}

/// Issue 55: a click goes out at once with its first verdict, unsettled;
/// when the rollup settles it, a `verdict` event follows on the stream
/// with the click's event id, its type and mailing, and the settled verdict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_verdict_follows_its_click_on_the_stream() {
    use linktrack::bots::letter_judgement::VerdictRules;
    use linktrack::store::rollup::{self, RollupOptions};

    let db = TestDb::with_days_since(days_ago(1)).await;
    let spring = letter(&db, "spring", 7).await;
    let app = server(&db).await;
    let mut stream = Stream::open(app.url("/api/events/stream"), TOKEN, None).await;

    click(&app, spring.click).await;
    let clicked = stream.next().await;
    assert_eq!(clicked.data["type"], "email.clicked", "{clicked:?}");
    assert_eq!(
        clicked.data["data"]["bot"]["settled"], false,
        "first verdict: {clicked:?}"
    );
    let event_id = clicked.data["data"]["event_id"].clone();

    // The rollup (not running in this server) settles it now.
    let settle_now = RollupOptions {
        verdicts: std::sync::Arc::new(VerdictRules {
            settle: Duration::ZERO,
            ..VerdictRules::default()
        }),
        ..Default::default()
    };
    let report = rollup::rollup_with(&db.pool, &settle_now).await.unwrap();
    assert_eq!(report.events(), 1, "the click rolled up");

    let verdict = stream.next().await;
    assert_eq!(verdict.data["type"], "verdict", "{verdict:?}");
    let data = &verdict.data["data"];
    assert_eq!(data["event_id"], event_id, "the click's verdict");
    assert_eq!(data["event_type"], "email.clicked");
    assert_eq!(data["mailing_id"], "spring");
    assert_eq!(data["bot"]["settled"], true);
    assert_eq!(data["bot"]["verdict"], false, "a browser's lone click");
    assert_eq!(data["changed"], false);
    assert!(verdict.id.is_some(), "a verdict has a cursor too");
    drop(stream);
    app.stop().await;
}
