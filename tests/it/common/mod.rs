//! Shared test support: every test gets its own freshly migrated database on
//! the real MariaDB/MySQL server, so tests run in parallel without sharing
//! state, and the database is dropped when the test ends.

use chrono::{Days, NaiveDate, Utc};
use linktrack::store::links::{LinkKind, NewLink};
use linktrack::store::{self, partitions};
use linktrack::token::Token;
use rand::RngExt;
use sqlx::MySqlPool;

pub mod amqp;
pub mod build;
mod child;
pub mod cluster;
pub mod dovecot;
pub mod export;
pub mod image_upstream;
pub mod mmdb;
pub mod postfix;
pub mod privacy;
mod server;
pub mod slow_login;
pub mod smtp_sink;
pub mod spider;
pub mod stats;
pub mod stats_api;
pub mod test_ca;
pub mod wait;
pub mod webhooks;
pub use child::*;
pub use server::*;

/// The server the tests use; override with `LINKTRACK_TEST_MYSQL` (no database part).
pub fn server_url() -> String {
    std::env::var("LINKTRACK_TEST_MYSQL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".to_owned())
}

pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: MySqlPool,
}

impl TestDb {
    /// A new, migrated database with no daily partitions yet.
    pub async fn new() -> TestDb {
        let name = format!("lt_test_{:016x}", rand::rng().random::<u64>());
        let url = format!("{}/{name}", server_url());
        let pool = match test_shards() {
            Some(nodes) => migrate_cluster(&url, &name, &nodes).await,
            None => store::migrate(&url).await.unwrap_or_else(|e| {
                panic!("migrating {url}: {e} (is MariaDB running on 127.0.0.1:3306?)")
            }),
        };
        TestDb { name, url, pool }
    }

    /// A new database with partitions from `first` through today + 1.
    pub async fn with_days_since(first: NaiveDate) -> TestDb {
        let db = TestDb::new().await;
        let ahead = (today() - first).num_days() as u32 + 1;
        let policy = partitions::Policy {
            today: first,
            ahead_days: ahead,
            keep_days: None,
        };
        partitions::run(&db.pool, &policy, &partitions::RunOptions::default())
            .await
            .expect("creating test partitions");
        db
    }
}

/// Data node servers (no database part, comma-separated) from
/// `LINKTRACK_TEST_SHARDS`: when set, every test database is a Spider head
/// on `LINKTRACK_TEST_MYSQL` over databases of the same name on these
/// nodes, so the whole suite runs against a cluster (docs/scaling.md "Testing on a
/// cluster"). Unset: a single server.
fn test_shards() -> Option<Vec<String>> {
    std::env::var("LINKTRACK_TEST_SHARDS")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.split(',').map(|n| n.trim().to_owned()).collect())
}

/// Virtual shards of a test head: few (odd), to keep partition DDL short.
const TEST_VIRTUAL_SHARDS: u32 = 3;

async fn migrate_cluster(url: &str, name: &str, nodes: &[String]) -> MySqlPool {
    let plan = store::cluster::ClusterMigrate {
        nodes: nodes
            .iter()
            .map(|n| store::cluster::NodeAddress::parse(&format!("{n}/{name}")).unwrap())
            .collect(),
        virtual_shards: TEST_VIRTUAL_SHARDS,
        row_format: store::RowFormatOptions {
            format: store::DEFAULT_ROW_FORMAT,
            level: None,
            rebuild: false,
        },
    };
    store::cluster::migrate(url, &plan)
        .await
        .unwrap_or_else(|e| panic!("migrating the cluster head {url}: {e}"));
    store::connect(url, &store::PoolSettings::default())
        .await
        .unwrap()
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let mut servers = vec![server_url()];
        let nodes = test_shards().unwrap_or_default();
        let spider_servers: Vec<String> = (0..nodes.len())
            .map(|n| store::cluster::server_name(&self.name, n))
            .collect();
        servers.extend(nodes);
        let name = self.name.clone();
        run_detached(async move {
            if let Ok(pool) = sqlx::MySqlPool::connect(&server_url()).await {
                for server in spider_servers {
                    let _ = sqlx::query(&format!("DROP SERVER IF EXISTS `{server}`"))
                        .execute(&pool)
                        .await;
                }
            }
            for server in servers {
                if let Ok(pool) = sqlx::MySqlPool::connect(&server).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS `{name}`"))
                        .execute(&pool)
                        .await;
                }
            }
        });
    }
}

/// Run `work` to completion on a thread with its own runtime. For `Drop`
/// impls: they run outside any async context we could await in, and the
/// test's runtime may already be shutting down.
pub fn run_detached(work: impl std::future::Future<Output = ()> + Send + 'static) {
    let _ = std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(work);
    })
    .join();
}

pub fn today() -> NaiveDate {
    Utc::now().date_naive()
}

pub fn days_ago(n: u64) -> NaiveDate {
    today().checked_sub_days(Days::new(n)).unwrap()
}

/// A token made at noon UTC on `day`.
pub fn token_on(day: NaiveDate) -> Token {
    Token::at(day.and_hms_opt(12, 0, 0).unwrap().and_utc())
}

/// The token seal of the test's database, as a server without
/// `LINKTRACK_SECRET` reads it (docs/token.md).
pub async fn seal_of(pool: &sqlx::MySqlPool) -> linktrack::token::TokenSeal {
    linktrack::store::link_templates::load_seal(pool, None)
        .await
        .expect("token_format has its row")
}

/// A token of `kind` made at `at` and sealed as the builder seals it, but
/// with no link template (template 0): what a test row needs to be served.
/// Its nonce is all random (as an image token's), so the many tokens a test
/// makes in one millisecond differ.
pub fn sealed_token(
    seal: &linktrack::token::TokenSeal,
    at: chrono::DateTime<Utc>,
    kind: LinkKind,
) -> Token {
    let plain = linktrack::token::Plaintext::issue(kind.into(), 0, 0);
    seal.seal(at, plain)
}

/// Click link `n` of letter `n`: a row with nothing special about it.
pub fn click_link(token: Token, n: u32) -> NewLink {
    NewLink {
        token,
        kind: LinkKind::Click,
        mailing_id: "test".into(),
        letter_id: u64::from(n),
        email: format!("r{n}@example.com"),
        position: n,
        url: format!("https://example.com/{n}"),
        meta: None,
    }
}

/// The `linktrack` binary under test: cargo's, or `LINKTRACK_TEST_BIN`
/// where several checkouts share one target directory and another's build
/// may replace cargo's copy between the build and the run.
pub fn linktrack_binary() -> std::path::PathBuf {
    std::env::var_os("LINKTRACK_TEST_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_linktrack").into())
}

/// Run the `linktrack` binary on the test's database and wait for it.
pub fn linktrack(db: &TestDb, args: &[&str]) -> std::process::Output {
    std::process::Command::new(linktrack_binary())
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("running linktrack")
}

/// A MySQL user of its own for the server under test, whose statements
/// MariaDB counts itself (`userstat`, `information_schema.USER_STATISTICS`):
/// statement counts measured by the database, not by the code under test.
pub struct CountedUser {
    pub user: String,
    /// The test database's URL, as this user.
    pub url: String,
    admin: MySqlPool,
}

/// Statements one user ran, by MariaDB's classes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Statements {
    pub selects: i64,
    pub updates: i64,
    pub others: i64,
}

impl Statements {
    pub fn total(&self) -> i64 {
        self.selects + self.updates + self.others
    }

    /// What ran between `earlier` and `self`.
    pub fn since(&self, earlier: Statements) -> Statements {
        Statements {
            selects: self.selects - earlier.selects,
            updates: self.updates - earlier.updates,
            others: self.others - earlier.others,
        }
    }
}

impl CountedUser {
    pub async fn new(db: &TestDb) -> CountedUser {
        let admin = MySqlPool::connect(&server_url()).await.unwrap();
        sqlx::query("SET GLOBAL userstat = 1")
            .execute(&admin)
            .await
            .expect("MariaDB's userstat (the statement counts these tests assert)");
        let user = format!("lt_u_{:012x}", rand::rng().random::<u64>() >> 16);
        sqlx::query(&format!("CREATE USER '{user}'@'%'"))
            .execute(&admin)
            .await
            .unwrap();
        sqlx::query(&format!("GRANT ALL ON `{}`.* TO '{user}'@'%'", db.name))
            .execute(&admin)
            .await
            .unwrap();
        let rest = server_url()
            .strip_prefix("mysql://")
            .and_then(|r| r.split_once('@').map(|(_, host)| host.to_owned()))
            .unwrap_or_else(|| "127.0.0.1:3306".to_owned());
        let url = format!("mysql://{user}@{rest}/{}", db.name);
        CountedUser { user, url, admin }
    }

    /// The user's statements once the server has settled: the count has not
    /// moved for 200 ms (a server's start-up statements, run by tasks it
    /// spawns, must not be counted as the requests' that follow).
    pub async fn settled_statements(&self) -> Statements {
        const STILL: std::time::Duration = std::time::Duration::from_millis(200);
        let changed = std::cell::Cell::new((self.statements().await, std::time::Instant::now()));
        wait::eventually(wait::PATIENCE, "the statement count settles", || async {
            let now = self.statements().await;
            let (last, since) = changed.get();
            if now != last {
                changed.set((now, std::time::Instant::now()));
                Err(format!("moved to {now:?}"))
            } else if since.elapsed() >= STILL {
                Ok(now)
            } else {
                Err(format!("{now:?}, still for {:?}", since.elapsed()))
            }
        })
        .await
    }

    /// The user's statements so far.
    pub async fn statements(&self) -> Statements {
        let row: Option<(i64, i64, i64)> = sqlx::query_as(
            "SELECT SELECT_COMMANDS, UPDATE_COMMANDS, OTHER_COMMANDS \
             FROM information_schema.USER_STATISTICS WHERE USER = ?",
        )
        .bind(&self.user)
        .fetch_optional(&self.admin)
        .await
        .unwrap();
        let (selects, updates, others) = row.unwrap_or_default();
        Statements {
            selects,
            updates,
            others,
        }
    }
}

impl Drop for CountedUser {
    fn drop(&mut self) {
        let user = self.user.clone();
        run_detached(async move {
            if let Ok(admin) = MySqlPool::connect(&server_url()).await {
                let _ = sqlx::query(&format!("DROP USER IF EXISTS '{user}'@'%'"))
                    .execute(&admin)
                    .await;
            }
        });
    }
}

/// The Prometheus text of an admin listener's `/metrics` (`admin`: its
/// base URL, `http://host:port`).
pub async fn metrics_text(admin: &str) -> String {
    let response = reqwest::get(format!("{admin}/metrics")).await.unwrap();
    response.text().await.unwrap()
}

/// How many requests of `route` (axum's matched path, `/c/{token}`) the
/// server's latency histogram counts at or under `le` seconds (`"+Inf"`:
/// all of them), in a `/metrics` text.
pub fn route_latency_bucket(metrics: &str, route: &str, le: &str) -> u64 {
    metrics
        .lines()
        .filter(|line| line.starts_with("linktrack_http_request_duration_seconds_bucket"))
        .filter(|line| line.contains(&format!("route=\"{route}\"")))
        .find(|line| line.contains(&format!("le=\"{le}\"")))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// Every request of `route` the server answered so far took at most `le`
/// seconds by its own histogram (a bound on correctness, such as "fails
/// without waiting for the database", read from the server rather than
/// from a client's clock), and there was at least one.
pub fn assert_route_within(metrics: &str, route: &str, le: &str) {
    let all = route_latency_bucket(metrics, route, "+Inf");
    assert!(all > 0, "no {route} request was counted: {metrics}");
    assert_eq!(
        route_latency_bucket(metrics, route, le),
        all,
        "a {route} request took over {le} s (the server's own histogram)"
    );
}

/// The value of the unlabelled metric `name` in a `/metrics` text.
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// The server's count of failed journal replays (`0` before the first).
pub async fn replay_failures(admin: &str) -> f64 {
    let text = metrics_text(admin).await;
    metric_value(&text, "linktrack_replay_failures_total").unwrap_or(0.0)
}

/// Wait until the server's replay has failed more often than `since` (its
/// own counter): it tried to store the journal and could not, so whatever
/// is not stored by now was held back, not late.
pub async fn wait_for_replay_failure(admin: &str, since: f64) {
    wait::eventually(wait::PATIENCE, "the replay tries (and fails)", || async {
        if replay_failures(admin).await > since {
            Ok(())
        } else {
            Err(metrics_text(admin).await)
        }
    })
    .await;
}

/// Wait until exactly `n` other sessions on `db`'s database match
/// `condition` (SQL over `information_schema.PROCESSLIST`): the runs a lock
/// held by a third connection keeps waiting. Times out with every
/// session's state and statement.
pub async fn wait_for_sessions(db: &TestDb, condition: &str, n: i64) {
    let count = format!(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE DB = ? AND ID <> CONNECTION_ID() AND ({condition})"
    );
    let what = format!("{n} sessions match {condition}");
    wait::eventually(wait::PATIENCE, &what, || async {
        let matching: i64 = sqlx::query_scalar(&count)
            .bind(&db.name)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        if matching == n {
            return Ok(());
        }
        let sessions: Vec<(Option<String>, Option<String>)> =
            sqlx::query_as("SELECT STATE, INFO FROM information_schema.PROCESSLIST WHERE DB = ?")
                .bind(&db.name)
                .fetch_all(&db.pool)
                .await
                .unwrap();
        Err(format!("{matching} sessions match: {sessions:?}"))
    })
    .await;
}

/// `id` as the store's functions take a mailing's id.
pub fn mailing_id(id: &str) -> linktrack::mailing_id::MailingId {
    linktrack::mailing_id::MailingId::parse(id).expect("a valid mailing id")
}
