//! The tracking server over real sockets against real MariaDB: each test
//! binds 127.0.0.1:0, runs the app on a task, and talks to it with reqwest
//! (redirects off). Every wait is bounded by a deadline.

use crate::common::{
    assert_route_within, days_ago, metrics_text, seal_of, sealed_token, today, token_on, TestDb,
};
use chrono::Utc;
use linktrack::events::journal::JournalSettings;
use linktrack::server::state::ServerSettings;
use linktrack::server::{App, AppSettings, ServeError};
use linktrack::store::links::{self, LinkKind, NewLink};
use linktrack::store::{self, PoolSettings};
use linktrack::token::Token;
use reqwest::{header, Client, Method, StatusCode};
use sqlx::MySqlPool;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio::task::{AbortHandle, JoinHandle};

const BROWSER: &str =
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_0) AppleWebKit/605.1.15 Version/17.0 Safari/605.1.15";

/// A server running on a task, stopped gracefully by [`TestServer::stop`].
pub(crate) struct TestServer {
    base: String,
    /// The admin listener: `/readyz` and `/metrics`.
    admin: String,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<Result<(), ServeError>>,
}

fn fast_journal(dir: &Path) -> JournalSettings {
    JournalSettings {
        seal_after: Duration::from_millis(50),
        retry_after: Duration::from_millis(100),
        ..JournalSettings::new(dir)
    }
}

pub(crate) fn test_settings() -> ServerSettings {
    ServerSettings {
        flush_deadline: Duration::from_secs(2),
        ..ServerSettings::default()
    }
}

async fn started(pool: MySqlPool, journal: &Path, settings: ServerSettings) -> App {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let settings = AppSettings {
        server: settings,
        ..AppSettings::new(pool, fast_journal(journal))
    };
    App::build(settings, listener).await.expect("server starts")
}

impl TestServer {
    pub(crate) async fn start(pool: MySqlPool, journal: &Path) -> TestServer {
        Self::start_with(pool, journal, test_settings()).await
    }

    pub(crate) async fn start_with(
        pool: MySqlPool,
        journal: &Path,
        settings: ServerSettings,
    ) -> TestServer {
        let server = started(pool, journal, settings).await;
        let base = format!("http://{}", server.local_addr().unwrap());
        let admin = format!("http://{}", server.admin_addr().expect("an admin listener"));
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = stop.await;
        }));
        TestServer {
            base,
            admin,
            shutdown,
            task,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) fn admin_url(&self, path: &str) -> String {
        format!("{}{path}", self.admin)
    }

    /// Graceful stop: in-flight requests finish, the journal is flushed.
    pub(crate) async fn stop(self) {
        let _ = self.shutdown.send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("server stops within 10s")
            .expect("server task")
            .expect("server ran cleanly");
    }
}

pub(crate) fn client() -> Client {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .user_agent(BROWSER)
        .build()
        .unwrap()
}

/// A pool of the server's own, so a test can close it without closing the test's.
pub(crate) async fn server_pool(db: &TestDb) -> MySqlPool {
    let settings = PoolSettings {
        max_connections: 4,
        acquire_timeout: Duration::from_millis(1500),
    };
    store::connect(&db.url, &settings).await.unwrap()
}

/// A pool that was closed: any database read fails at once.
async fn closed_pool(db: &TestDb) -> MySqlPool {
    let pool = server_pool(db).await;
    pool.close().await;
    pool
}

/// A `kind` token built an hour ago: old enough that a click is not "too
/// fast", sealed as the builder seals it (the routes check its kind).
async fn settled_token(pool: &MySqlPool, kind: LinkKind) -> Token {
    let seal = seal_of(pool).await;
    sealed_token(&seal, Utc::now() - chrono::Duration::hours(1), kind)
}

pub(crate) async fn add_link(pool: &MySqlPool, kind: LinkKind, url: &str, position: u32) -> Token {
    let token = settled_token(pool, kind).await;
    let row = NewLink {
        token,
        kind,
        mailing_id: "m-1".into(),
        letter_id: 7,
        email: " Ann@Example.com".into(),
        position,
        url: url.into(),
        meta: None,
    };
    links::insert(pool, &[row]).await.unwrap();
    token
}

/// A sealed `kind` token made `days` ago at noon, with no template.
pub(crate) async fn expired_token(pool: &MySqlPool, kind: LinkKind, days: u64) -> Token {
    let noon = days_ago(days).and_hms_opt(12, 0, 0).unwrap().and_utc();
    sealed_token(&seal_of(pool).await, noon, kind)
}

/// A database with partitions for yesterday through tomorrow (a token from
/// an hour ago may be dated yesterday just after midnight).
pub(crate) async fn db() -> TestDb {
    TestDb::with_days_since(days_ago(1)).await
}

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub(crate) struct StoredEvent {
    pub(crate) kind: String,
    token: String,
    link_id: Option<u64>,
    bot: bool,
    bot_reason: Option<String>,
    ip: Option<String>,
    user_agent: Option<String>,
}

pub(crate) async fn events(pool: &MySqlPool) -> Vec<StoredEvent> {
    sqlx::query_as(
        "SELECT CAST(kind AS CHAR) AS kind, LOWER(HEX(uuid)) AS token, link_id, bot, bot_reason, \
         ip, user_agent FROM events ORDER BY occurred_at, id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Poll until at least `n` events are stored (10 s at most).
pub(crate) async fn wait_for_events(pool: &MySqlPool, n: usize) -> Vec<StoredEvent> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = events(pool).await;
        if found.len() >= n || Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) fn header(response: &reqwest::Response, name: header::HeaderName) -> &str {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[tokio::test]
async fn a_click_redirects_with_privacy_headers_and_head_is_not_a_human_click() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let url = "https://example.com/landing?a=1&b=%C3%A9";
    let token = add_link(&db.pool, LinkKind::Click, url, 1).await;
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let http = client();

    let response = http
        .get(server.url(&format!("/c/{token}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(header(&response, header::LOCATION), url);
    assert_eq!(header(&response, header::CACHE_CONTROL), "no-store");
    assert_eq!(header(&response, header::REFERRER_POLICY), "no-referrer");
    assert!(!header(&response, "x-request-id".parse().unwrap()).is_empty());

    let long_agent = format!("LinkChecker/1.0 {}", "é".repeat(600));
    let head = http
        .head(server.url(&format!("/c/{token}")))
        .header(header::USER_AGENT, long_agent.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::FOUND);
    assert_eq!(header(&head, header::LOCATION), url);

    let stored = wait_for_events(&db.pool, 2).await;
    let humans: Vec<_> = stored.iter().filter(|e| !e.bot).collect();
    assert_eq!(humans.len(), 1, "exactly one human click: {stored:?}");
    assert_eq!(humans[0].kind, "click");
    assert_eq!(humans[0].token, token.to_string());
    assert_eq!(
        humans[0].ip.as_deref(),
        Some("127.0.0.0"),
        "a /24, not the host"
    );
    assert_eq!(humans[0].user_agent.as_deref(), Some(BROWSER));
    let checker = stored.iter().find(|e| e.bot).unwrap();
    let stored_agent = checker.user_agent.clone().unwrap_or_default();
    assert_eq!(
        stored_agent.chars().count(),
        512,
        "user agents are cut to 512"
    );
    assert!(humans[0].link_id.is_some());
    assert!(
        stored
            .iter()
            .any(|e| e.bot_reason.as_deref() == Some("head")),
        "HEAD is kept as a bot event: {stored:?}"
    );
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn bots_are_stored_with_their_reason() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let settled = add_link(&db.pool, LinkKind::Click, "https://example.com/a", 1).await;
    let fresh = sealed_token(&seal_of(&db.pool).await, Utc::now(), LinkKind::Click);
    links::insert(
        &db.pool,
        &[NewLink {
            token: fresh,
            kind: LinkKind::Click,
            mailing_id: "m-1".into(),
            letter_id: 8,
            email: "bob@example.com".into(),
            position: 1,
            url: "https://example.com/b".into(),
            meta: None,
        }],
    )
    .await
    .unwrap();
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let http = client();
    let curl = http
        .get(server.url(&format!("/c/{settled}")))
        .header(header::USER_AGENT, "curl/8.5.0")
        .send()
        .await
        .unwrap();
    assert_eq!(
        curl.status(),
        StatusCode::FOUND,
        "bots are answered like people"
    );
    let fast = http
        .get(server.url(&format!("/c/{fresh}")))
        .send()
        .await
        .unwrap();
    assert_eq!(fast.status(), StatusCode::FOUND);

    let stored = wait_for_events(&db.pool, 2).await;
    let reason_of = |t: Token| {
        stored
            .iter()
            .find(|e| e.token == t.to_string())
            .map(|e| (e.bot, e.bot_reason.clone()))
    };
    assert_eq!(reason_of(settled), Some((true, Some("ua:curl".into()))));
    assert_eq!(reason_of(fresh), Some((true, Some("too_fast".into()))));
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn bad_and_expired_tokens_are_answered_without_a_database_read() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    // Any read on a closed pool fails (503), so a 404/410 proves there was none.
    let server = TestServer::start(closed_pool(&db).await, dir.path()).await;
    let http = client();
    let good = token_on(today()).to_string();
    let future = token_on(today() + chrono::Days::new(3)).to_string();
    let cases = [
        ("/c/not-a-token".to_owned(), StatusCode::NOT_FOUND),
        (format!("/c/{}", good.to_uppercase()), StatusCode::NOT_FOUND),
        (format!("/c/{}", &good[..31]), StatusCode::NOT_FOUND),
        (format!("/c/{future}"), StatusCode::NOT_FOUND),
        (format!("/c/{}", token_on(days_ago(91))), StatusCode::GONE),
        (format!("/u/{}", token_on(days_ago(400))), StatusCode::GONE),
        (format!("/i/{}", token_on(days_ago(400))), StatusCode::GONE),
    ];
    for (path, expected) in cases {
        let response = http.get(server.url(&path)).send().await.unwrap();
        assert_eq!(response.status(), expected, "{path}");
        let body = response.text().await.unwrap();
        assert!(body.contains("<h1>"), "a human page for {path}: {body}");
    }
    // None of them waited for anything (the server's own latencies).
    let metrics = metrics_text(&server.admin_url("")).await;
    for route in ["/c/{token}", "/u/{token}", "/i/{token}"] {
        assert_route_within(&metrics, route, "1");
    }
    // The control: a well-formed, current token does need the database.
    let response = http
        .get(server.url(&format!("/c/{good}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn an_unknown_token_is_not_found_and_a_wrong_kind_too() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let pixel = add_link(&db.pool, LinkKind::Pixel, "", 0).await;
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let http = client();
    for path in [
        format!("/c/{}", settled_token(&db.pool, LinkKind::Click).await),
        format!("/c/{pixel}"),
        "/nowhere".into(),
    ] {
        let response = http.get(server.url(&path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
    }
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn the_pixel_is_always_a_gif_and_counts_opens_of_known_tokens() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let known = add_link(&db.pool, LinkKind::Pixel, "", 0).await;
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let http = client();
    let paths = [
        format!("/o/{known}.gif"),
        format!("/o/{}.gif", settled_token(&db.pool, LinkKind::Pixel).await),
        "/o/garbage.gif".to_owned(),
        "/o/%ff%fe".to_owned(),
        format!(
            "/o/{}.gif",
            expired_token(&db.pool, LinkKind::Pixel, 365).await
        ),
    ];
    for path in &paths {
        let response = http.get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(header(&response, header::CONTENT_TYPE), "image/gif");
        assert_eq!(header(&response, header::CACHE_CONTROL), "no-store");
        let body = response.bytes().await.unwrap();
        assert_eq!(body.len(), 43);
        assert!(body.starts_with(b"GIF89a"));
    }
    // A marker: the known pixel once more, after every other request. The
    // journal keeps the order of the hits, so once the marker's open is
    // stored, whatever the other requests journaled is stored too.
    let marker = http
        .get(server.url(&format!("/o/{known}.gif")))
        .send()
        .await
        .unwrap();
    assert_eq!(marker.status(), StatusCode::OK);
    let stored = wait_for_events(&db.pool, 2).await;
    assert_eq!(stored.len(), 2, "only the known pixel's opens: {stored:?}");
    for event in &stored {
        assert_eq!(
            (event.kind.as_str(), event.token.clone()),
            ("open", known.to_string())
        );
    }
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn unsubscribe_confirms_on_get_and_suppresses_on_one_click_post() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let token = add_link(&db.pool, LinkKind::Unsubscribe, "", 0).await;
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let http = client();
    let url = server.url(&format!("/u/{token}"));

    let page = http.get(&url).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(html.contains("<form method=\"post\""), "{html}");
    let suppressed = || async {
        sqlx::query_as::<_, (String, String)>(
            "SELECT CONVERT(email USING utf8mb4), reason FROM suppressions",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    assert!(suppressed().await.is_empty(), "a GET never unsubscribes");

    for _ in 0..2 {
        let response = http
            .post(&url)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body("List-Unsubscribe=One-Click")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.text().await.unwrap().contains("unsubscribed"));
    }
    assert_eq!(
        suppressed().await,
        vec![("ann@example.com".to_owned(), "unsubscribe".to_owned())]
    );
    // Both one-click POSTs are recorded (the suppression once); `all` alone
    // would pass on an empty list if the wait ran out.
    let stored = wait_for_events(&db.pool, 2).await;
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert!(stored.iter().all(|e| e.kind == "unsubscribe"), "{stored:?}");
    drop(http);
    server.stop().await;
}

/// Both unsubscribe pages say which subscription the button ends: the
/// masked address and the mailing, HTML-escaped (a mailing id is the
/// sender's text).
#[tokio::test]
async fn unsubscribe_pages_name_the_masked_address_and_the_mailing() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let token = settled_token(&db.pool, LinkKind::Unsubscribe).await;
    let row = NewLink {
        token,
        kind: LinkKind::Unsubscribe,
        mailing_id: "spring <news> & more".into(),
        letter_id: 7,
        email: "Zoe.Long@Example.org".into(),
        position: 0,
        url: String::new(),
        meta: None,
    };
    links::insert(&db.pool, &[row]).await.unwrap();
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let http = client();
    let url = server.url(&format!("/u/{token}"));

    let confirm = http.get(&url).send().await.unwrap();
    assert_eq!(confirm.status(), StatusCode::OK);
    let done = http
        .post(&url)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), StatusCode::OK);
    for html in [confirm.text().await.unwrap(), done.text().await.unwrap()] {
        assert!(html.contains("z***@example.org"), "{html}");
        assert!(
            !html.contains("zoe.long"),
            "the local part stays masked: {html}"
        );
        assert!(html.contains("spring &lt;news&gt; &amp; more"), "{html}");
        assert!(!html.contains("<news>"), "{html}");
    }
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn events_wait_for_a_missing_partition_to_be_created() {
    let db = TestDb::with_days_since(today()).await;
    let tomorrow = today() + chrono::Days::new(1);
    let token = sealed_token(&seal_of(&db.pool).await, Utc::now(), LinkKind::Pixel);
    links::insert(
        &db.pool,
        &[NewLink {
            token,
            kind: LinkKind::Pixel,
            mailing_id: "m".into(),
            letter_id: 1,
            email: "a@example.com".into(),
            position: 0,
            url: String::new(),
            meta: None,
        }],
    )
    .await
    .unwrap();
    let drop_sql = format!(
        "ALTER TABLE events DROP PARTITION {}, {}",
        store::partitions::partition_name(today()),
        store::partitions::partition_name(tomorrow)
    );
    sqlx::query(&drop_sql).execute(&db.pool).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let response = client()
        .get(server.url(&format!("/o/{token}.gif")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(wait_for_events(&db.pool, 1).await.len(), 1);
    server.stop().await;
}

/// The journal segments (`.active` and `.jsonl`) of a directory.
fn segments(dir: &Path) -> Vec<PathBuf> {
    linktrack::events::journal::unreplayed_segments(dir).unwrap()
}

/// Wait (up to 10 s) until the server has replayed every segment of `dir`.
async fn wait_replayed(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !segments(dir).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every segment of a journal directory, concatenated.
fn journal_text(dir: &Path) -> String {
    let mut text = String::new();
    for path in segments(dir) {
        text.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
    }
    text
}

/// Copy the segments of `from` into `to`.
fn copy_segments(from: &Path, to: &Path) -> Vec<PathBuf> {
    let mut copied = Vec::new();
    for path in segments(from) {
        let target = to.join(path.file_name().unwrap());
        std::fs::copy(&path, &target).unwrap();
        copied.push(target);
    }
    copied
}

fn abort_all(handles: Vec<AbortHandle>) {
    for handle in handles {
        handle.abort();
    }
}

#[tokio::test]
async fn acknowledged_events_survive_a_crash_and_are_replayed_exactly_once() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let token = add_link(&db.pool, LinkKind::Pixel, "", 0).await;
    // First instance: its database is gone, so events can only be journaled.
    let crashed = started(closed_pool(&db).await, dir.path(), test_settings()).await;
    let base = format!("http://{}", crashed.local_addr().unwrap());
    let handles = crashed.spawn_abortable();
    let http = client();
    for n in 1..=5 {
        let response = http
            .get(format!("{base}/o/{token}.gif"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        // Acknowledged means written: the journal has it before we read the answer.
        let lines = journal_text(dir.path()).matches(&token.to_string()).count();
        assert_eq!(lines, n, "journaled before the response");
    }
    abort_all(handles);
    #[cfg(unix)]
    for path in segments(dir.path()) {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "journal files are private");
    }
    drop(http);
    let backup = tempfile::tempdir().unwrap();
    assert!(!copy_segments(dir.path(), backup.path()).is_empty());

    // A new instance on the same journal replays everything.
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let stored = wait_for_events(&db.pool, 5).await;
    assert_eq!(stored.len(), 5, "{stored:?}");
    assert!(stored
        .iter()
        .all(|e| e.token == token.to_string() && e.kind == "open"));
    server.stop().await;

    // Replaying the same segments again (a crash between commit and delete)
    // adds nothing.
    copy_segments(backup.path(), dir.path());
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    wait_replayed(dir.path()).await;
    assert!(segments(dir.path()).is_empty(), "replayed");
    assert_eq!(events(&db.pool).await.len(), 5, "each event exactly once");
    server.stop().await;
}

#[tokio::test]
async fn while_the_database_is_down_hot_links_redirect_and_events_wait() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let hot = add_link(&db.pool, LinkKind::Click, "https://example.com/hot", 1).await;
    let cold = add_link(&db.pool, LinkKind::Click, "https://example.com/cold", 2).await;
    let unsubscribe = add_link(&db.pool, LinkKind::Unsubscribe, "", 0).await;
    let pool = server_pool(&db).await;
    let server = TestServer::start(pool.clone(), dir.path()).await;
    let http = client();
    let get = |path: String| http.get(server.url(&path)).send();
    let ready = || http.get(server.admin_url("/readyz")).send();

    assert_eq!(
        get(format!("/c/{hot}")).await.unwrap().status(),
        StatusCode::FOUND
    );
    assert_eq!(ready().await.unwrap().status(), StatusCode::OK);
    // Viewing the confirmation page caches the unsubscribe link.
    let page = get(format!("/u/{unsubscribe}")).await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    pool.close().await;

    let response = get(format!("/c/{hot}")).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::FOUND,
        "served from the cache"
    );
    assert_eq!(
        header(&response, header::LOCATION),
        "https://example.com/hot"
    );
    let response = get(format!("/c/{cold}")).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(header(&response, header::RETRY_AFTER)
        .parse::<u64>()
        .is_ok());
    // A miss fails fast: no click waited as long as 2.5 s.
    let metrics = metrics_text(&server.admin_url("")).await;
    assert_route_within(&metrics, "/c/{token}", "2.5");
    let ready = ready().await.unwrap();
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(ready.text().await.unwrap().contains("unavailable"));
    let one_click = http
        .post(server.url(&format!("/u/{unsubscribe}")))
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    assert_eq!(
        one_click.status(),
        StatusCode::OK,
        "accepted into the journal"
    );
    drop(http);
    server.stop().await;

    // Back with a working database, the journaled click and unsubscribe land.
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let stored = wait_for_events(&db.pool, 3).await;
    let hot_clicks = stored.iter().filter(|e| e.token == hot.to_string()).count();
    assert_eq!(hot_clicks, 2, "{stored:?}");
    let suppressed: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM suppressions WHERE email = 'ann@example.com' AND reason = 'unsubscribe'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(suppressed, 1, "the deferred suppression was applied");
    server.stop().await;
}

#[tokio::test]
async fn hostile_requests_never_cause_a_server_error() {
    use rand::{Rng, RngExt};
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let good = add_link(&db.pool, LinkKind::Click, "https://example.com/ok", 1).await;
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let http = client();
    let valid = good.to_string();
    let mut wrong_version = *good.as_bytes();
    wrong_version[6] = (wrong_version[6] & 0x0f) | 0x40;
    let wrong_version = uuid::Uuid::from_bytes(wrong_version).simple().to_string();
    let long = "a".repeat(16 * 1024);
    let mut rng = rand::rng();
    for i in 0..2_000u32 {
        let mut junk = vec![0u8; rng.random_range(0..200)];
        rng.fill_bytes(&mut junk);
        let junk: String = junk.iter().map(|b| format!("%{b:02x}")).collect();
        let (method, path) = match i % 9 {
            0 => (Method::GET, format!("/c/{junk}")),
            1 => (Method::GET, format!("/c/{long}")),
            2 => (Method::GET, format!("/c/{}g", &valid[..31])),
            3 => (Method::GET, format!("/c/{}", valid.to_uppercase())),
            4 => (Method::GET, format!("/c/{wrong_version}")),
            5 => (Method::from_bytes(b"BREW").unwrap(), format!("/c/{valid}")),
            6 => (Method::DELETE, format!("/u/{valid}")),
            7 => (Method::GET, format!("/o/{junk}.gif")),
            _ => (Method::POST, format!("/i/{junk}")),
        };
        let response = http
            .request(method.clone(), server.url(&path))
            .send()
            .await
            .unwrap();
        assert!(
            !response.status().is_server_error(),
            "{method} {path} answered {}",
            response.status()
        );
    }
    let huge = "x".repeat(64 * 1024);
    let response = http
        .get(server.url(&format!("/c/{valid}")))
        .header("x-huge", huge)
        .send()
        .await;
    if let Ok(response) = response {
        assert!(
            !response.status().is_server_error(),
            "{}",
            response.status()
        );
    }
    let response = http
        .get(server.url(&format!("/c/{valid}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FOUND, "still serving");
    drop(http);
    server.stop().await;
}

/// The journal's backlog gauge goes up with each journaled open and back
/// to zero once they are replayed. (The journal keeps the gauge's handle:
/// taken before the metrics recorder was installed, it counted nothing,
/// and the replay's decrements took the gauge below zero.)
#[tokio::test]
async fn the_journal_backlog_gauge_returns_to_zero_after_the_replay() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let known = add_link(&db.pool, LinkKind::Pixel, "", 0).await;
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let http = client();
    for _ in 0..3 {
        let path = format!("/o/{known}.gif");
        let response = http.get(server.url(&path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    wait_for_events(&db.pool, 3).await;
    wait_replayed(dir.path()).await;
    let text = crate::common::metrics_text(&server.admin_url("")).await;
    let backlog = crate::common::metric_value(&text, "linktrack_journal_backlog_events");
    assert_eq!(backlog, Some(0.0), "{text}");
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn health_and_metrics_answer() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let http = client();
    let health = http.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let ready = http.get(server.admin_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    assert!(ready.text().await.unwrap().contains("\"ok\""));
    let _ = http.get(server.url("/c/zzz")).send().await.unwrap();
    let brew = Method::from_bytes(b"BREW").unwrap();
    let _ = http
        .request(brew, server.url("/c/zzz"))
        .send()
        .await
        .unwrap();
    let metrics = http.get(server.admin_url("/metrics")).send().await.unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    let text = metrics.text().await.unwrap();
    assert!(text.contains("linktrack_http_requests_total"), "{text}");
    assert!(text.contains("route=\"/c/{token}\""), "{text}");
    assert!(text.contains("method=\"other\""), "{text}");
    assert!(
        !text.contains("BREW"),
        "client-chosen methods are no labels"
    );
    assert!(
        text.contains("linktrack_http_request_duration_seconds_bucket"),
        "{text}"
    );
    for operators_only in ["/readyz", "/metrics"] {
        let public = http.get(server.url(operators_only)).send().await.unwrap();
        assert_eq!(
            public.status(),
            StatusCode::NOT_FOUND,
            "{operators_only} answers on the admin listener only"
        );
    }
    let admin_health = http.get(server.admin_url("/healthz")).send().await.unwrap();
    assert_eq!(admin_health.status(), StatusCode::OK);
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn the_binary_flushes_journaled_events_on_sigterm() {
    let db = db().await;
    let token = add_link(&db.pool, LinkKind::Pixel, "", 0).await;
    let dir = tempfile::tempdir().unwrap();
    let addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_linktrack"))
        .args(["serve", "--listen", &addr.to_string(), "--journal"])
        .arg(dir.path())
        .env("LINKTRACK_ADMIN_LISTEN", "127.0.0.1:0")
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    let http = client();
    let base = format!("http://{addr}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(Instant::now() < deadline, "server did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A second server on the same journal would lose events: it is refused.
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_linktrack"))
        .args(["serve", "--listen", "127.0.0.1:0", "--journal"])
        .arg(dir.path())
        .env("LINKTRACK_ADMIN_LISTEN", "127.0.0.1:0")
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("is in use by another server"), "{stderr}");
    for _ in 0..3 {
        let response = http
            .get(format!("{base}/o/{token}.gif"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    drop(http);
    // At once, before the writer seals its segment (250 ms): only the
    // shutdown flush can bring these events to the database.
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("server did not exit after SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
    assert_eq!(events(&db.pool).await.len(), 3, "flushed before exit");
    // Only the lock file stays (an flock: free once the process is gone).
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "lock")
        .collect();
    assert_eq!(left.len(), 0, "journal emptied: {left:?}");
}

#[tokio::test]
async fn a_stalled_database_answers_503_instead_of_hanging() {
    use sqlx::Connection;
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let token = add_link(&db.pool, LinkKind::Click, "https://example.com/", 1).await;
    let settings = ServerSettings {
        db_timeout: Duration::from_millis(500),
        ..test_settings()
    };
    let server = TestServer::start_with(server_pool(&db).await, dir.path(), settings).await;
    // Another session's write lock makes every read of `links` wait.
    let mut locker = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
    sqlx::query("LOCK TABLES links WRITE")
        .execute(&mut locker)
        .await
        .unwrap();
    let response = client()
        .get(server.url(&format!("/c/{token}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    // It gave up at the timeout (500 ms), not at the lock's end, which only
    // comes when this test unlocks (the server's own latency).
    let metrics = metrics_text(&server.admin_url("")).await;
    assert_route_within(&metrics, "/c/{token}", "2.5");
    sqlx::query("UNLOCK TABLES")
        .execute(&mut locker)
        .await
        .unwrap();
    let response = client()
        .get(server.url(&format!("/c/{token}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FOUND, "recovered");
    server.stop().await;
}

/// `host:port` of the test database server.
fn mysql_address() -> String {
    let url = crate::common::server_url();
    let after_scheme = url.split("://").nth(1).unwrap_or(&url);
    let host = after_scheme.rsplit('@').next().unwrap_or(after_scheme);
    host.trim_end_matches('/').to_owned()
}

/// A TCP relay in front of MariaDB that can fail like a real outage:
/// `go_down` cuts every open connection and refuses new ones until `come_up`.
struct FlakyDatabase {
    addr: std::net::SocketAddr,
    up: Arc<std::sync::atomic::AtomicBool>,
    connections: Arc<std::sync::Mutex<Vec<AbortHandle>>>,
}

impl FlakyDatabase {
    async fn start() -> FlakyDatabase {
        use std::sync::atomic::AtomicBool;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let connections = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (is_up, tasks) = (up.clone(), connections.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !is_up.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is refused
                }
                let relay = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(mysql_address()).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                tasks.lock().unwrap().push(relay.abort_handle());
            }
        });
        FlakyDatabase {
            addr,
            up,
            connections,
        }
    }

    fn url(&self, db: &TestDb) -> String {
        format!("mysql://root@{}/{}", self.addr, db.name)
    }

    fn go_down(&self) {
        self.up.store(false, Ordering::SeqCst);
        for relay in self.connections.lock().unwrap().drain(..) {
            relay.abort();
        }
    }

    fn come_up(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_database_outage_is_ridden_out_without_a_restart() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let hot = add_link(&db.pool, LinkKind::Click, "https://example.com/hot", 1).await;
    let cold = add_link(&db.pool, LinkKind::Click, "https://example.com/cold", 2).await;
    let flaky = FlakyDatabase::start().await;
    let pool_settings = PoolSettings {
        max_connections: 4,
        acquire_timeout: Duration::from_millis(500),
    };
    let pool = store::connect(&flaky.url(&db), &pool_settings)
        .await
        .unwrap();
    let settings = ServerSettings {
        db_timeout: Duration::from_millis(800),
        ..test_settings()
    };
    let server = TestServer::start_with(pool, dir.path(), settings).await;
    let http = client();
    let click = |token: Token| http.get(server.url(&format!("/c/{token}"))).send();

    assert_eq!(click(hot).await.unwrap().status(), StatusCode::FOUND);
    flaky.go_down();
    for _ in 0..3 {
        assert_eq!(
            click(hot).await.unwrap().status(),
            StatusCode::FOUND,
            "cached"
        );
    }
    let miss = click(cold).await.unwrap();
    assert_eq!(miss.status(), StatusCode::SERVICE_UNAVAILABLE);
    // The miss failed fast (the server's own latency).
    let metrics = metrics_text(&server.admin_url("")).await;
    assert_route_within(&metrics, "/c/{token}", "2.5");
    // Wait until the replay has tried to store the journaled clicks and
    // failed (its own counter), rather than for a while.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = metrics_text(&server.admin_url("")).await;
        let failures = crate::common::metric_value(&text, "linktrack_replay_failures_total");
        if failures.is_some_and(|n| n >= 1.0) {
            break;
        }
        assert!(Instant::now() < deadline, "the replay never tried: {text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let during = events(&db.pool).await.len();
    assert!(
        during <= 1,
        "only the click before the outage can be stored: {during}"
    );

    flaky.come_up();
    let stored = wait_for_events(&db.pool, 4).await;
    assert_eq!(stored.len(), 4, "the journaled clicks land once it is back");
    assert_eq!(click(cold).await.unwrap().status(), StatusCode::FOUND);
    drop(http);
    server.stop().await;
}

#[tokio::test]
async fn a_scanner_walking_every_link_of_a_letter_is_a_burst() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let mut tokens = Vec::new();
    for position in 1..=3 {
        let url = format!("https://example.com/{position}");
        tokens.push(add_link(&db.pool, LinkKind::Click, &url, position).await);
    }
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let http = client();
    for token in &tokens {
        let response = http
            .get(server.url(&format!("/c/{token}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FOUND);
    }
    let stored = wait_for_events(&db.pool, 3).await;
    let verdict = |t: &Token| {
        stored
            .iter()
            .find(|e| e.token == t.to_string())
            .and_then(|e| e.bot_reason.clone())
    };
    assert_eq!(verdict(&tokens[0]), None);
    assert_eq!(verdict(&tokens[1]), None);
    assert_eq!(verdict(&tokens[2]).as_deref(), Some("burst"));
    drop(http);
    server.stop().await;
}

#[test]
fn serve_flags_parse_with_defaults() {
    use clap::Parser;
    use linktrack::cli::args::{Cli, Command};
    let cli = Cli::try_parse_from([
        "linktrack",
        "serve",
        "--journal",
        "/var/lib/lt",
        "--keep-days",
        "30",
    ])
    .unwrap();
    let Command::Serve(args) = cli.command else {
        panic!("not serve");
    };
    assert_eq!(args.journal, PathBuf::from("/var/lib/lt"));
    assert_eq!(args.keep_days, 30);
    assert!(!args.trust_forwarded_for);
    assert!(args.db_timeout_ms > 0);
    assert!(
        args.admin_listen.ip().is_loopback(),
        "metrics and readiness stay off the network by default"
    );
}

#[tokio::test]
async fn a_segment_the_database_rejects_is_set_aside_and_does_not_block_the_rest() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let line = old_format_line;
    // An older segment the database refuses (a readable line whose user
    // agent is longer than the column: strict mode rejects it), then a good
    // one. (A kind the database has no ENUM value for no longer gets that
    // far: the journal record does not read, see the quarantine test.)
    let too_long = line("open", 1).replace(
        "\"user_agent\":null",
        &format!("\"user_agent\":\"{}\"", "a".repeat(600)),
    );
    std::fs::write(dir.path().join("00000000000000000001.jsonl"), too_long).unwrap();
    std::fs::write(
        dir.path().join("00000000000000000002.jsonl"),
        line("open", 2),
    )
    .unwrap();
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let stored = wait_for_events(&db.pool, 1).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0].kind, "open");
    assert!(dir.path().join("00000000000000000001.failed").exists());
    server.stop().await;
}

/// A journal line exactly as the release before versioned records wrote it
/// (the database row's fields, no `v`).
fn old_format_line(kind: &str, id: u8) -> String {
    format!(
        "{{\"event_id\":\"{id:02x}{}\",\"occurred_at\":\"{}\",\"kind\":\"{kind}\",\
         \"token\":\"{}\",\"link_id\":null,\"mailing_id\":null,\"letter_id\":null,\
         \"email\":null,\"position\":null,\"ip\":null,\"user_agent\":null,\
         \"bot\":false,\"bot_reason\":null}}\n",
        "0".repeat(30),
        Utc::now().to_rfc3339(),
        token_on(today())
    )
}

#[tokio::test]
async fn a_segment_journaled_before_versioned_records_replays_after_the_upgrade() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let segment = dir.path().join("00000000000000000001.jsonl");
    let text: String = [("open", 1), ("click", 2), ("image", 3)]
        .iter()
        .map(|(kind, id)| old_format_line(kind, *id))
        .collect();
    std::fs::write(&segment, text).unwrap();
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let stored = wait_for_events(&db.pool, 3).await;
    let mut kinds: Vec<&str> = stored.iter().map(|e| e.kind.as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["click", "image", "open"], "{stored:?}");
    server.stop().await;
    assert!(!segment.exists(), "replayed, then deleted");
    assert!(!segment.with_extension("failed").exists());
}

#[tokio::test]
async fn a_corrupt_middle_line_quarantines_its_segment_and_loses_nothing() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let corrupt = dir.path().join("00000000000000000001.jsonl");
    // A flipped byte in the middle line: it has its newline, so it is not a
    // torn tail, and must not be skipped.
    let middle = old_format_line("click", 2).replacen("\"kind\"", "\"kimd\"", 1);
    let text = format!(
        "{}{middle}{}",
        old_format_line("open", 1),
        old_format_line("open", 3)
    );
    std::fs::write(&corrupt, &text).unwrap();
    // A later segment is not blocked by the quarantined one.
    std::fs::write(
        dir.path().join("00000000000000000002.jsonl"),
        old_format_line("image", 4),
    )
    .unwrap();
    let server = TestServer::start(server_pool(&db).await, dir.path()).await;
    let stored = wait_for_events(&db.pool, 3).await;
    server.stop().await;
    assert_eq!(
        stored.len(),
        3,
        "the readable events of both segments: {stored:?}"
    );
    let failed = corrupt.with_extension("failed");
    assert_eq!(
        std::fs::read_to_string(&failed).unwrap(),
        text,
        "the quarantined segment is kept byte for byte, bad line included"
    );
    assert!(segments(dir.path()).is_empty(), "nothing left to replay");
}

/// Every connection killed right after use (a restart in the middle of a
/// busy second, when no pooled connection has rested long enough to be
/// pinged): the next click's lookup meets a dead connection, and is run
/// again on another (each dead one is closed as it fails) instead of being
/// answered 503.
#[tokio::test]
async fn a_click_right_after_every_connection_died_is_served() {
    let (server, response, _db, _journal) = second_click_after_a_restart(Duration::ZERO).await;
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(header(&response, header::LOCATION), "https://example.com/b");
    let text = crate::common::metrics_text(&server.admin_url("")).await;
    let retries = crate::common::metric_value(&text, "linktrack_link_lookup_retries_total");
    assert!(
        retries.is_some_and(|n| n >= 1.0),
        "the lookup met a dead connection first:\n{text}"
    );
    server.stop().await;
}

/// A pooled connection the database closed while it sat idle (a restart, a
/// `wait_timeout`) is found out by the ping it gets when it is handed out
/// again after a second or more of rest, and replaced: the next click is
/// served, not answered 503. (Busier connections are not pinged: a round
/// trip per statement was 7% of a redirect's CPU.)
#[tokio::test]
async fn a_connection_killed_while_idle_is_replaced_before_the_next_click() {
    let (server, response, _db, _journal) =
        second_click_after_a_restart(Duration::from_millis(1_200)).await;
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(header(&response, header::LOCATION), "https://example.com/b");
    server.stop().await;
}

/// One click served, then every connection to the test's database killed
/// (as a restart of the database would), `rest` waited, and a second link
/// asked for: the server, that response, and what must outlive the server.
async fn second_click_after_a_restart(
    rest: Duration,
) -> (TestServer, reqwest::Response, TestDb, tempfile::TempDir) {
    let db = db().await;
    let first = add_link(&db.pool, LinkKind::Click, "https://example.com/a", 1).await;
    let second = add_link(&db.pool, LinkKind::Click, "https://example.com/b", 2).await;
    let journal = tempfile::tempdir().unwrap();
    let pool = server_pool(&db).await;
    let server = TestServer::start(pool.clone(), journal.path()).await;
    let http = client();
    let response = http
        .get(server.url(&format!("/c/{first}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FOUND);
    wait_for_events(&db.pool, 1).await;
    // Every connection back in the pool (sqlx pings a connection as it goes
    // back): killed before that, a connection is closed by the failing ping
    // and the next lookup would open a new one instead of meeting it dead.
    let deadline = Instant::now() + Duration::from_secs(5);
    while pool.num_idle() < pool.size() as usize && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    kill_connections_to(&db.name).await;
    tokio::time::sleep(rest).await;
    let response = http
        .get(server.url(&format!("/c/{second}")))
        .send()
        .await
        .unwrap();
    (server, response, db, journal)
}

/// Kill every connection to `database`; the killer's own connection names
/// no database.
async fn kill_connections_to(database: &str) {
    use sqlx::Connection;
    let mut admin = sqlx::MySqlConnection::connect(&crate::common::server_url())
        .await
        .unwrap();
    let ids: Vec<i64> =
        sqlx::query_scalar("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ?")
            .bind(database)
            .fetch_all(&mut admin)
            .await
            .unwrap();
    assert!(!ids.is_empty());
    for id in ids {
        sqlx::query(&format!("KILL CONNECTION {id}"))
            .execute(&mut admin)
            .await
            .unwrap();
    }
}
