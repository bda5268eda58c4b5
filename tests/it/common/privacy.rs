//! Looking for an address everywhere linktrack keeps things: every text,
//! JSON and binary column of every table, every Redis key under a prefix,
//! every file of a journal directory. An address is looked for in the forms
//! a copy could take: as written, in its domain's other spelling, with `@`
//! percent-encoded, in hex and in base64 (ASCII case ignored).
//!
//! And what the privacy tests' servers share: settings under which clicks
//! are people's and the privacy view is quick, the letter's "stop tracking
//! me" link, and waiting for servers to take a change in.

use super::build::BASE;
use super::export::humans_only;
use super::quick;
use super::wait::{self, PATIENCE};
use base64::Engine;
use linktrack::privacy::PrivacySettings;
use linktrack::server::image::AddressPolicy;
use linktrack::server::state::ServerSettings;
use linktrack::server::AppSettings;
use linktrack::store::privacy;
use serde_json::Value;
use sqlx::MySqlPool;
use std::path::Path;
use std::time::Duration;

/// The byte strings that would betray `address` (given in one spelling;
/// `other_spelling` is its domain's other form, if it has one).
pub fn needles(address: &str, other_spelling: Option<&str>) -> Vec<Vec<u8>> {
    let mut spellings = vec![address.to_owned()];
    spellings.extend(other_spelling.map(str::to_owned));
    let mut found = Vec::new();
    for spelling in spellings {
        let percent = spelling.replace('@', "%40");
        let encoded: String = spelling
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let hex = hex::encode(spelling.as_bytes());
        let base64 = base64::engine::general_purpose::STANDARD.encode(spelling.as_bytes());
        let base64_url =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(spelling.as_bytes());
        for needle in [spelling.clone(), percent, encoded, hex, base64, base64_url] {
            let needle = needle.into_bytes();
            if !found.contains(&needle) {
                found.push(needle);
            }
        }
    }
    found
}

/// Whether `haystack` holds one of `needles`, ASCII case ignored.
pub fn holds(haystack: &[u8], needles: &[Vec<u8>]) -> bool {
    let haystack = haystack.to_ascii_lowercase();
    needles.iter().any(|needle| {
        let needle = needle.to_ascii_lowercase();
        haystack.windows(needle.len()).any(|w| w == needle)
    })
}

/// Every `table.column` (text, JSON, binary or blob) of the pool's
/// database with a value holding one of `needles`, and how many rows.
pub async fn sweep_database(pool: &MySqlPool, needles: &[Vec<u8>]) -> Vec<(String, usize)> {
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(TABLE_NAME AS CHAR), CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND DATA_TYPE IN ('char', 'varchar', 'tinytext', 'text', \
         'mediumtext', 'longtext', 'json', 'binary', 'varbinary', 'tinyblob', 'blob', \
         'mediumblob', 'longblob', 'enum', 'set') ORDER BY 1, 2",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(
        columns.len() > 30,
        "the sweep reads the schema: {columns:?}"
    );
    let mut hits = Vec::new();
    for (table, column) in columns {
        let values: Vec<Option<Vec<u8>>> =
            sqlx::query_scalar(&format!("SELECT CAST(`{column}` AS BINARY) FROM `{table}`"))
                .fetch_all(pool)
                .await
                .unwrap_or_else(|e| panic!("reading {table}.{column}: {e}"));
        let n = values
            .iter()
            .flatten()
            .filter(|value| holds(value, needles))
            .count();
        if n > 0 {
            hits.push((format!("{table}.{column}"), n));
        }
    }
    hits
}

/// Every Redis key under `prefix` whose name or value holds one of `needles`.
pub async fn sweep_redis(url: &str, prefix: &str, needles: &[Vec<u8>]) -> Vec<String> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut keys: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .unwrap();
        keys.extend(batch);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    let mut hits = Vec::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let values: Vec<Vec<u8>> = match kind.as_str() {
            "string" => vec![redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap()],
            "list" => redis::cmd("LRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "set" => redis::cmd("SMEMBERS")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "zset" => redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "hash" => redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap(),
            other => panic!("a {other} key under the prefix: {key}"),
        };
        if holds(key.as_bytes(), needles) || values.iter().any(|v| holds(v, needles)) {
            hits.push(key);
        }
    }
    hits
}

/// Every file under `dir` (a journal directory) holding one of `needles`.
pub fn sweep_files(dir: &Path, needles: &[Vec<u8>]) -> Vec<String> {
    let mut hits = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return hits;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            hits.extend(sweep_files(&path, needles));
        } else if holds(&std::fs::read(&path).unwrap_or_default(), needles) {
            hits.push(path.display().to_string());
        }
    }
    hits
}

/// The token of the letter's "stop tracking me" link.
pub fn stop_token(letter: &Value) -> String {
    let html = letter["html"].as_str().unwrap();
    let at = html
        .find(&format!("{BASE}/t/"))
        .expect("a stop-tracking link")
        + BASE.len()
        + 3;
    html[at..at + 32].to_owned()
}

/// Server settings for these tests: clicks right after the build are
/// people's, images from a loopback upstream are proxied.
pub fn server_settings() -> ServerSettings {
    let mut settings = humans_only();
    settings.images.policy = AddressPolicy::AllowLoopback;
    settings
}

/// The privacy view refreshed every 100 ms (tests wait for it by its
/// acknowledgement, never by the clock).
fn fast_privacy() -> PrivacySettings {
    PrivacySettings {
        refresh_every: Duration::from_millis(100),
        ..PrivacySettings::default()
    }
}

/// `quick`, with [`server_settings`] and [`fast_privacy`].
pub fn configured(settings: AppSettings) -> AppSettings {
    AppSettings {
        server: server_settings(),
        privacy: fast_privacy(),
        ..quick(settings)
    }
}

/// The one number `sql` selects.
pub async fn count(pool: &MySqlPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// The newest change of the privacy change log.
pub async fn last_change(pool: &MySqlPool) -> u64 {
    privacy::last_change_id(pool, privacy::ChangeLog::Privacy)
        .await
        .unwrap()
}

/// Wait until `servers` live servers (in `privacy_servers`) have each taken
/// in change `id`.
pub async fn acknowledged_by(pool: &MySqlPool, servers: usize, id: u64) {
    let what = format!("{servers} servers acknowledge change {id}");
    wait::eventually(PATIENCE, &what, || async {
        let acks = privacy::live_servers(pool, Duration::from_secs(60))
            .await
            .unwrap();
        if acks.len() >= servers && acks.iter().all(|a| a.applied_id >= id) {
            Ok(())
        } else {
            let applied: Vec<u64> = acks.iter().map(|a| a.applied_id).collect();
            Err(format!("applied by the live servers: {applied:?}"))
        }
    })
    .await;
}
