//! What the Spider cluster tests share: running linktrack on a cluster,
//! reading its nodes' data tables, polling for counts.

use super::cluster::Cluster;

pub fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Run a linktrack command on the cluster and insist it succeeds.
pub fn ok(cluster: &Cluster, args: &[&str]) -> String {
    succeeded(args, cluster.linktrack(args))
}

/// The cluster migrated, today's partitions made on every node, and a pool
/// on its head.
pub async fn migrated_head(cluster: &Cluster) -> sqlx::MySqlPool {
    ok(cluster, &["migrate"]);
    ok(cluster, &["partitions", "ensure"]);
    linktrack::store::connect(
        &cluster.head.url(),
        &linktrack::store::PoolSettings::default(),
    )
    .await
    .unwrap()
}

/// A creative of two links, for the cluster tests' plain mailings.
pub const TWO_LINKS: &str =
    "<p>Hi</p><a href=\"https://example.com/a\">a</a> <a href=\"https://example.com/b\">b</a>";

/// In `dir`, a mailing of `html`, neither personalised nor proxying images,
/// and a recipients file of `recipients` addresses (r0@example.com, …):
/// the paths of both.
pub fn plain_mailing(
    dir: &std::path::Path,
    mailing_id: &str,
    html: &str,
    recipients: usize,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let mailing = dir.join("mailing.json");
    std::fs::write(
        &mailing,
        serde_json::json!({
            "mailing_id": mailing_id, "subject": "s", "from": "f@example.com",
            "html": html, "personalize": false, "proxy_images": false
        })
        .to_string(),
    )
    .unwrap();
    let list = dir.join("recipients.csv");
    let lines: Vec<String> = (0..recipients)
        .map(|n| format!("r{n}@example.com"))
        .collect();
    std::fs::write(&list, format!("email\n{}\n", lines.join("\n"))).unwrap();
    (mailing, list)
}

/// `linktrack build` of `mailing` for `recipients` through the head, with
/// `extra` flags; the letters it wrote, one JSON object each.
pub fn build_through_head(
    cluster: &Cluster,
    dir: &std::path::Path,
    mailing: &std::path::Path,
    recipients: &std::path::Path,
    extra: &[&str],
) -> Vec<serde_json::Value> {
    let out = dir.join("letters.jsonl");
    let mut args = vec![
        "build",
        "--mailing",
        mailing.to_str().unwrap(),
        "--recipients",
        recipients.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--base-url",
        BASE,
        "--no-progress",
    ];
    args.extend(extra);
    ok(cluster, &args);
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The head started again (on its port; `migrate` sets its Spider
/// settings again, as its server config would), then the journal's
/// `clicks` stored: each once, one per letter `0..clicks` (the tests click
/// the first link of each of their first letters).
pub async fn head_returns_and_each_click_lands_once(
    cluster: &mut Cluster,
    head: &sqlx::MySqlPool,
    nodes: &[sqlx::MySqlPool; 2],
    clicks: i64,
) {
    cluster.head.start().await;
    ok(cluster, &["migrate"]);
    until("clicks after the head returned", clicks, || {
        count(head, "SELECT COUNT(*) FROM events WHERE kind = 'click'")
    })
    .await;
    let mut ids = node_events(&nodes[0]).await;
    ids.extend(node_events(&nodes[1]).await);
    assert_eq!(ids.len() as i64, clicks, "each click once");
    assert_eq!(
        ids.iter().collect::<std::collections::HashSet<_>>().len() as i64,
        clicks
    );
    let per_letter: Vec<(u64, i64)> = sqlx::query_as(
        "SELECT l.letter_id, COUNT(*) FROM events e JOIN links l ON l.id = e.link_id \
         GROUP BY l.letter_id ORDER BY l.letter_id",
    )
    .fetch_all(head)
    .await
    .unwrap();
    let letters = u64::try_from(clicks).unwrap();
    assert_eq!(per_letter, (0..letters).map(|n| (n, 1)).collect::<Vec<_>>());
}

/// [`ok`] with another LINKTRACK_SHARDS (a cluster growing node by node).
pub fn ok_with_shards(cluster: &Cluster, shards: &str, args: &[&str]) -> String {
    succeeded(args, cluster.linktrack_with_shards(shards, args))
}

fn succeeded(args: &[&str], out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "linktrack {args:?} failed: {}{}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

/// A pool on the head, its tables partitioned from four days ago through
/// two days ahead (so a rotate has a day to drop), by the library's policy.
pub async fn head_partitioned_from_four_days_ago(cluster: &Cluster) -> sqlx::MySqlPool {
    use linktrack::store::{self, partitions};
    let head = store::connect(&cluster.head.url(), &store::PoolSettings::default())
        .await
        .unwrap();
    let back = partitions::Policy {
        today: super::days_ago(4),
        ahead_days: 6,
        keep_days: None,
    };
    partitions::run(&head, &back, &partitions::RunOptions::default())
        .await
        .unwrap();
    head
}

/// Partition names of a data table on a node.
pub async fn days_of(pool: &sqlx::MySqlPool, table: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT CAST(PARTITION_NAME AS CHAR) FROM information_schema.PARTITIONS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY PARTITION_ORDINAL_POSITION",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The data tables of `kind` on a node.
pub async fn data_tables(pool: &sqlx::MySqlPool, kind: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE CONCAT(?, '\\_%') ORDER BY 1",
    )
    .bind(kind)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// (uuid, id) of every link row stored on a node.
pub async fn link_rows(pool: &sqlx::MySqlPool) -> Vec<(Vec<u8>, u64)> {
    let mut rows = Vec::new();
    for table in data_tables(pool, "links").await {
        let mut part: Vec<(Vec<u8>, u64)> =
            sqlx::query_as(&format!("SELECT uuid, id FROM `{table}`"))
                .fetch_all(pool)
                .await
                .unwrap();
        rows.append(&mut part);
    }
    rows
}

pub async fn com_select(pool: &sqlx::MySqlPool) -> u64 {
    let (_, value): (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Com_select'")
        .fetch_one(pool)
        .await
        .unwrap();
    value.parse().unwrap()
}

pub const BASE: &str = "https://t.example.test";

/// The click tokens of a built letter, in order.
pub fn click_tokens(letter: &serde_json::Value) -> Vec<String> {
    let html = letter["html"].as_str().unwrap();
    let needle = format!("{BASE}/c/");
    html.match_indices(&needle)
        .map(|(at, _)| &html[at + needle.len()..])
        // The honeypot link is served on /c/ too, but it is no link of the
        // creative's.
        .filter(|rest| !rest[32..].starts_with("\" aria-hidden"))
        .map(|rest| rest[..32].to_owned())
        .collect()
}

/// Poll `probe` until it returns `want` (or fail after 30 s, saying what it saw).
pub async fn until<F, Fut>(what: &str, want: i64, probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<i64>>,
{
    super::wait::eventually_eq(super::wait::PATIENCE, what, Some(want), probe).await;
}

pub async fn count(pool: &sqlx::MySqlPool, sql: &str) -> Option<i64> {
    sqlx::query_scalar::<_, Option<i64>>(sql)
        .fetch_one(pool)
        .await
        .ok()
        .flatten()
}

/// Events stored on a node, over its data tables.
pub async fn node_events(pool: &sqlx::MySqlPool) -> Vec<u64> {
    let mut ids = Vec::new();
    for table in data_tables(pool, "events").await {
        let mut part: Vec<u64> = sqlx::query_scalar(&format!("SELECT id FROM `{table}`"))
            .fetch_all(pool)
            .await
            .unwrap();
        ids.append(&mut part);
    }
    ids
}
