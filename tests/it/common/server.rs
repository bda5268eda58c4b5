//! The one in-process server harness: the real `App` (the wiring `serve`
//! uses) on a listener bound to 127.0.0.1:0 by the test and handed over,
//! run on a task, stopped gracefully; and the helpers the server tests
//! share (a client, the server's pool, links, stored events).

use super::wait::{self, eventually, PATIENCE};
use super::{days_ago, seal_of, sealed_token, TestDb};
use chrono::Utc;
use linktrack::journal::segments::JournalSettings;
use linktrack::server::state::ServerSettings;
use linktrack::server::{App, AppSettings, ServeError};
use linktrack::store::links::{self, LinkKind, NewLink};
use linktrack::store::{self, PoolSettings};
use linktrack::token::Token;
use reqwest::{header, Client};
use sqlx::MySqlPool;
use std::path::Path;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The user agent of [`client`]: a browser, so its clicks are human.
pub const BROWSER: &str =
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_0) AppleWebKit/605.1.15 Version/17.0 Safari/605.1.15";

/// A server running on a task, stopped gracefully by [`TestServer::stop`].
pub struct TestServer {
    /// The public listener, `http://host:port`.
    pub base: String,
    /// The admin listener (`/readyz`, `/metrics`), `http://host:port`.
    pub admin: String,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<Result<(), ServeError>>,
    /// The journal directory, when the harness made it.
    _journal: Option<tempfile::TempDir>,
}

impl TestServer {
    /// Run the app on `pool` with a journal of its own; `configure`
    /// adjusts `AppSettings::new`'s defaults.
    pub async fn start(
        pool: MySqlPool,
        configure: impl FnOnce(AppSettings) -> AppSettings,
    ) -> TestServer {
        let journal = tempfile::tempdir().expect("a journal directory");
        let mut server = TestServer::start_in(pool, journal.path(), configure).await;
        server._journal = Some(journal);
        server
    }

    /// Run the app on `pool` with its journal in `journal` (a directory the
    /// test keeps, to look into or to hand to the next server).
    pub async fn start_in(
        pool: MySqlPool,
        journal: &Path,
        configure: impl FnOnce(AppSettings) -> AppSettings,
    ) -> TestServer {
        TestServer::running(build_app(pool, journal, configure).await)
    }

    /// A running app with the stats API and dashboard on.
    pub async fn with_stats(
        pool: MySqlPool,
        api_token: Option<&str>,
        secret: Option<&str>,
        live: Option<linktrack::live::Live>,
    ) -> TestServer {
        TestServer::start(pool, |settings| AppSettings {
            api_token: api_token.map(str::to_owned),
            secret: secret.map(str::to_owned),
            live,
            ..settings
        })
        .await
    }

    /// Run an app the test built itself (on a listener it bound).
    pub fn running(app: App) -> TestServer {
        let base = format!("http://{}", app.local_addr().unwrap());
        let admin = format!("http://{}", app.admin_addr().expect("an admin listener"));
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(app.run(async move {
            let _ = stop.await;
        }));
        TestServer {
            base,
            admin,
            shutdown,
            task,
            _journal: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("{}{path}", self.admin)
    }

    /// Graceful stop: in-flight requests finish, the journal is flushed;
    /// panics if the app did not run cleanly, or has not stopped by
    /// [`PATIENCE`] (a ceiling on a stop that hangs, not a measurement: the
    /// flush deadline is 2 s in [`test_settings`]).
    pub async fn stop(self) {
        let _ = self.shutdown.send(());
        tokio::time::timeout(wait::scaled(PATIENCE), self.task)
            .await
            .expect("the server stops")
            .expect("server task")
            .expect("server ran cleanly");
    }
}

/// The app built on `pool` with its journal in `journal`, on a listener
/// bound to 127.0.0.1:0 here and handed over (not run yet).
pub async fn build_app(
    pool: MySqlPool,
    journal: &Path,
    configure: impl FnOnce(AppSettings) -> AppSettings,
) -> App {
    let settings = configure(AppSettings::new(pool, JournalSettings::new(journal)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    App::build(settings, listener).await.expect("server starts")
}

/// The server tests' settings: a journal sealed after 50 ms and retried
/// every 100 ms, and [`test_settings`].
pub fn quick(settings: AppSettings) -> AppSettings {
    quick_with(test_settings())(settings)
}

/// [`quick`] with these server settings.
pub fn quick_with(server: ServerSettings) -> impl FnOnce(AppSettings) -> AppSettings {
    move |settings| AppSettings {
        server,
        journal: JournalSettings {
            seal_after: Duration::from_millis(50),
            retry_after: Duration::from_millis(100),
            ..settings.journal
        },
        ..settings
    }
}

/// Server settings with a short shutdown flush deadline (2 s).
pub fn test_settings() -> ServerSettings {
    ServerSettings {
        flush_deadline: Duration::from_secs(2),
        ..ServerSettings::default()
    }
}

/// The harness's one HTTP client, for the tracking routes and the stats API
/// alike: it does not follow redirects, has a browser's user agent (its
/// clicks are human) and gives up on an answer after 10 s.
pub fn client() -> Client {
    client_sending(Some(BROWSER))
}

/// [`client`] without a `User-Agent` header: requests the bot verdicts
/// judge as agentless.
pub fn client_without_user_agent() -> Client {
    client_sending(None)
}

fn client_sending(user_agent: Option<&str>) -> Client {
    let builder = Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10));
    match user_agent {
        Some(agent) => builder.user_agent(agent),
        None => builder,
    }
    .build()
    .unwrap()
}

/// A pool of the server's own, so a test can close it without closing the test's.
pub async fn server_pool(db: &TestDb) -> MySqlPool {
    let settings = PoolSettings {
        max_connections: 4,
        acquire_timeout: Duration::from_millis(1500),
    };
    store::connect(&db.url, &settings).await.unwrap()
}

/// A pool that was closed: any database read fails at once.
pub async fn closed_pool(db: &TestDb) -> MySqlPool {
    let pool = server_pool(db).await;
    pool.close().await;
    pool
}

/// A `kind` token built an hour ago: old enough that a click is not "too
/// fast", sealed as the builder seals it (the routes check its kind).
pub async fn settled_token(pool: &MySqlPool, kind: LinkKind) -> Token {
    let seal = seal_of(pool).await;
    sealed_token(&seal, Utc::now() - chrono::Duration::hours(1), kind)
}

/// A link row of letter 7 (to ` Ann@Example.com`) with a settled token.
pub async fn add_link(pool: &MySqlPool, kind: LinkKind, url: &str, position: u32) -> Token {
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
pub async fn expired_token(pool: &MySqlPool, kind: LinkKind, days: u64) -> Token {
    let noon = days_ago(days).and_hms_opt(12, 0, 0).unwrap().and_utc();
    sealed_token(&seal_of(pool).await, noon, kind)
}

/// A database with partitions for yesterday through tomorrow (a token from
/// an hour ago may be dated yesterday just after midnight).
pub async fn db() -> TestDb {
    TestDb::with_days_since(days_ago(1)).await
}

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct StoredEvent {
    pub kind: String,
    pub token: String,
    pub link_id: Option<u64>,
    pub bot: bool,
    pub bot_reason: Option<String>,
    pub ip: Option<String>,
    pub user_agent: Option<String>,
}

/// Every stored event, in the order they happened.
pub async fn events(pool: &MySqlPool) -> Vec<StoredEvent> {
    sqlx::query_as(
        "SELECT CAST(kind AS CHAR) AS kind, LOWER(HEX(uuid)) AS token, link_id, bot, NULLIF(bot_reason, '') AS bot_reason, \
         ip, user_agent FROM events ORDER BY occurred_at, id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Every stored event once at least `n` are stored (waited for with
/// [`eventually`], up to [`PATIENCE`]); the caller checks what they are.
pub async fn wait_for_events(pool: &MySqlPool, n: usize) -> Vec<StoredEvent> {
    eventually(PATIENCE, &format!("{n} events stored"), || async {
        let found = events(pool).await;
        if found.len() >= n {
            Ok(found)
        } else {
            Err(found)
        }
    })
    .await
}

/// A response header as text ("" when absent or not text).
pub fn header(response: &reqwest::Response, name: header::HeaderName) -> &str {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}
