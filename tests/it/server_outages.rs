//! The server through database outages: a closed pool, a stalled lock, a
//! relay cut like a network outage, and connections killed as a database
//! restart kills them.

use crate::common::wait::{eventually, PATIENCE};
use crate::common::{
    add_link, client, db, events, header, metric_value, metrics_text, quick, quick_with,
    server_pool, test_settings, wait_for_events, TestDb, TestServer,
};
use linktrack::server::state::ServerSettings;
use linktrack::store::links::LinkKind;
use linktrack::store::{self, PoolSettings};
use linktrack::token::Token;
use reqwest::{header, StatusCode};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::AbortHandle;

#[tokio::test]
async fn while_the_database_is_down_hot_links_redirect_and_events_wait() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let hot = add_link(&db.pool, LinkKind::Click, "https://example.com/hot", 1).await;
    let cold = add_link(&db.pool, LinkKind::Click, "https://example.com/cold", 2).await;
    let unsubscribe = add_link(&db.pool, LinkKind::Unsubscribe, "", 0).await;
    let pool = server_pool(&db).await;
    let server = TestServer::start_in(pool.clone(), dir.path(), quick).await;
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
    // A miss is answered 503, to be tried again later (how fast: the
    // closed pool of `bench_outages --outages closed`).
    let response = get(format!("/c/{cold}")).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(header(&response, header::RETRY_AFTER)
        .parse::<u64>()
        .is_ok());
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
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
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
async fn a_stalled_database_answers_503_instead_of_hanging() {
    use sqlx::Connection;
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let token = add_link(&db.pool, LinkKind::Click, "https://example.com/", 1).await;
    let settings = ServerSettings {
        db_timeout: Duration::from_millis(500),
        ..test_settings()
    };
    let server =
        TestServer::start_in(server_pool(&db).await, dir.path(), quick_with(settings)).await;
    // Another session's write lock makes every read of `links` wait.
    let mut locker = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
    sqlx::query("LOCK TABLES links WRITE")
        .execute(&mut locker)
        .await
        .unwrap();
    // Answered while the lock is still held: the server gave up at its
    // timeout, not at the lock's end, which only comes when this test
    // unlocks below (a server waiting for it would leave the client
    // without an answer until the client's own 10 s are up). How soon
    // after the timeout: `bench_outages --outages locked`.
    let response = client()
        .get(server.url(&format!("/c/{token}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
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
pub(crate) struct FlakyDatabase {
    addr: std::net::SocketAddr,
    up: Arc<std::sync::atomic::AtomicBool>,
    connections: Arc<std::sync::Mutex<Vec<AbortHandle>>>,
}

impl FlakyDatabase {
    pub(crate) async fn start() -> FlakyDatabase {
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

    pub(crate) fn url(&self, db: &TestDb) -> String {
        format!("mysql://root@{}/{}", self.addr, db.name)
    }

    pub(crate) fn go_down(&self) {
        self.up.store(false, Ordering::SeqCst);
        for relay in self.connections.lock().unwrap().drain(..) {
            relay.abort();
        }
    }

    pub(crate) fn come_up(&self) {
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
    let server = TestServer::start_in(pool, dir.path(), quick_with(settings)).await;
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
    // The miss is answered 503 while the database is away (how fast: the
    // refused connections of `bench_outages --outages refused`).
    let miss = click(cold).await.unwrap();
    assert_eq!(miss.status(), StatusCode::SERVICE_UNAVAILABLE);
    // Wait until the replay has tried to store the journaled clicks and
    // failed (its own counter), rather than for a while.
    eventually(PATIENCE, "the replay tried and failed", || async {
        let text = metrics_text(&server.admin_url("")).await;
        match metric_value(&text, "linktrack_replay_failures_total") {
            Some(failures) if failures >= 1.0 => Ok(()),
            _ => Err(text),
        }
    })
    .await;
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
    // Served by the replacement, not by the error-and-retry path the test
    // above goes through: the lookup never met the dead connection (the
    // retry counter the test above sees move did not move here; it is
    // absent until its first increment).
    let text = metrics_text(&server.admin_url("")).await;
    let retries = metric_value(&text, "linktrack_link_lookup_retries_total");
    assert!(
        retries.unwrap_or(0.0) == 0.0,
        "the lookup met the dead connection and was retried:\n{text}"
    );
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
    let server = TestServer::start_in(pool.clone(), journal.path(), quick).await;
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
    eventually(PATIENCE, "every connection back in the pool", || async {
        let (idle, size) = (pool.num_idle(), pool.size() as usize);
        if idle >= size {
            Ok(())
        } else {
            Err(format!("{idle} of {size} idle"))
        }
    })
    .await;
    kill_connections_to(&db.name).await;
    // The rest is the condition under test (a connection idle for a second
    // or more is pinged before use), not a wait for something to happen.
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
