//! linktrack on a real Spider cluster (a head and two data nodes started by
//! `cluster::Cluster`). Each test starts its own cluster (a few seconds of
//! the machine), so there are few of them and each covers a whole story.

use crate::cluster::Cluster;
use crate::common::{click_link, days_ago, today, token_on};
use linktrack::store::{self, links, partitions};
use std::collections::HashSet;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Run a linktrack command on the cluster and insist it succeeds.
fn ok(cluster: &Cluster, args: &[&str]) -> String {
    let out = cluster.linktrack(args);
    assert!(
        out.status.success(),
        "linktrack {args:?} failed: {}{}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

/// Partition names of a data table on a node.
async fn days_of(pool: &sqlx::MySqlPool, table: &str) -> Vec<String> {
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
async fn data_tables(pool: &sqlx::MySqlPool, kind: &str) -> Vec<String> {
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
async fn link_rows(pool: &sqlx::MySqlPool) -> Vec<(Vec<u8>, u64)> {
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

async fn com_select(pool: &sqlx::MySqlPool) -> u64 {
    let (_, value): (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Com_select'")
        .fetch_one(pool)
        .await
        .unwrap();
    value.parse().unwrap()
}

#[tokio::test]
async fn a_cluster_migrates_twice_partitions_every_data_table_and_spreads_links() {
    let mut cluster = Cluster::start().await;

    // An even count is refused before anything is made.
    let even = cluster.linktrack(&["migrate", "--virtual-shards", "4"]);
    assert!(!even.status.success());
    assert!(stderr(&even).contains("odd"), "{}", stderr(&even));

    let first = ok(&cluster, &["migrate"]);
    assert!(first.contains("installed Spider"), "{first}");
    assert!(
        first.contains("set spider_conn_recycle_mode = 1"),
        "{first}"
    );
    let second = ok(&cluster, &["migrate"]);
    assert!(second.contains("Spider is loaded"), "{second}");
    assert!(second.contains("already spread over 15"), "{second}");
    assert!(second.contains("spider_conn_recycle_mode = 1"), "{second}");

    // A head whose tables use a node LINKTRACK_SHARDS leaves out says so;
    // a node that cannot be reached is named.
    let short = cluster.linktrack_with_shards(&cluster.nodes[0].url(), &["migrate"]);
    assert!(!short.status.success());
    let said = stderr(&short);
    assert!(said.contains("LINKTRACK_SHARDS does not name"), "{said}");
    assert!(
        said.contains(&format!("127.0.0.1:{}", cluster.nodes[1].port)),
        "{said}"
    );
    let unreachable = format!(
        "{},mysql://root@127.0.0.1:1/{}",
        cluster.shards(),
        crate::cluster::DATABASE
    );
    let out = cluster.linktrack_with_shards(&unreachable, &["migrate"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("127.0.0.1:1/"), "{}", stderr(&out));

    let nodes = [cluster.node_pool(0).await, cluster.node_pool(1).await];
    let on_nodes = [
        data_tables(&nodes[0], "links").await,
        data_tables(&nodes[1], "links").await,
    ];
    assert_eq!(on_nodes[0].len() + on_nodes[1].len(), 15, "{on_nodes:?}");
    assert!(on_nodes.iter().all(|t| t.len() >= 7), "{on_nodes:?}");

    // Days from four days ago (for rotate below) through +2 with the
    // library's policy, then `ensure` adds +3: every data table of both nodes.
    let head = store::connect(&cluster.head.url(), &store::PoolSettings::default())
        .await
        .unwrap();
    let back = partitions::Policy {
        today: days_ago(4),
        ahead_days: 6,
        keep_days: None,
    };
    partitions::run(&head, &back, &partitions::RunOptions::default())
        .await
        .unwrap();
    ok(&cluster, &["partitions", "ensure", "--ahead-days", "3"]);
    let want: Vec<String> = std::iter::once("p19700101".to_owned())
        .chain((0..=7).map(|n| partitions::partition_name(days_ago(4) + chrono::Days::new(n))))
        .collect();
    for (n, pool) in nodes.iter().enumerate() {
        for kind in ["links", "events"] {
            for table in data_tables(pool, kind).await {
                assert_eq!(days_of(pool, &table).await, want, "node{n} {table}");
            }
        }
    }
    let listed = ok(&cluster, &["partitions", "list"]);
    assert_eq!(listed.lines().count(), 30 * want.len(), "{listed}");
    assert!(listed.contains("\tlinks_14\t") && listed.contains("\tevents_00\t"));

    // Links through the head: spread over both nodes, every token once,
    // ids unique across the data tables.
    // Ids come from linktrack (the head's column has no default: an insert
    // without one is refused) and increase batch after batch.
    let rows: Vec<_> = (0..3000u32)
        .map(|n| click_link(token_on(today()), n))
        .collect();
    for batch in rows.chunks(1000) {
        links::insert(&head, batch).await.unwrap();
    }
    let no_id = sqlx::query(
        "INSERT INTO links (uuid, inserted, kind, mailing_id, letter_id, email, position, url) \
         VALUES (X'00000000000000000000000000000001', CURRENT_DATE, 'click', 'm', 1, 'e', 1, 'u')",
    )
    .execute(&head)
    .await;
    assert!(no_id.is_err(), "an insert without an id is refused");
    let stored = [link_rows(&nodes[0]).await, link_rows(&nodes[1]).await];
    let id_of: std::collections::HashMap<&[u8], u64> = stored
        .iter()
        .flatten()
        .map(|(uuid, id)| (uuid.as_slice(), *id))
        .collect();
    let ids_of = |batch: &[links::NewLink]| -> Vec<u64> {
        batch
            .iter()
            .map(|r| id_of[&r.token.as_bytes()[..]])
            .collect()
    };
    for pair in rows.chunks(1000).collect::<Vec<_>>().windows(2) {
        let (earlier, later) = (ids_of(pair[0]), ids_of(pair[1]));
        assert!(
            earlier.iter().max() < later.iter().min(),
            "a later batch's ids are all higher"
        );
    }
    let share = stored[0].len() as f64 / 3000.0;
    assert!(
        (0.425..=0.575).contains(&share),
        "node0 holds {share:.3} of the rows"
    );
    let all: Vec<_> = stored.iter().flatten().collect();
    assert_eq!(all.len(), 3000);
    assert_eq!(
        all.iter().map(|(u, _)| u).collect::<HashSet<_>>().len(),
        3000
    );
    assert_eq!(
        all.iter().map(|(_, id)| id).collect::<HashSet<_>>().len(),
        3000
    );

    // The head is in the shard layout: each row sits in the data table of
    // its token's virtual shard, so linktrack can route a lookup by itself.
    for (n, pool) in nodes.iter().enumerate() {
        for table in data_tables(pool, "links").await {
            let shard: u32 = table["links_".len()..].parse().unwrap();
            let uuids: Vec<Vec<u8>> = sqlx::query_scalar(&format!("SELECT uuid FROM `{table}`"))
                .fetch_all(pool)
                .await
                .unwrap();
            for uuid in uuids {
                let bytes: [u8; 16] = uuid.try_into().unwrap();
                assert_eq!(
                    store::cluster::shard_of(&bytes, 15),
                    shard,
                    "node{n} {table}"
                );
            }
        }
    }
    // One routed lookup reaches exactly one data node, the head none.
    let router = store::cluster::Router::discover(&head)
        .await
        .expect("a head in the shard layout routes");
    for row in rows.iter().take(5) {
        let before = [com_select(&nodes[0]).await, com_select(&nodes[1]).await];
        let head_before = com_select(&head).await;
        let found = router.lookup_many(&[row.token]).await.unwrap();
        let found = &found[&row.token];
        assert_eq!(
            com_select(&head).await,
            head_before,
            "the head reads nothing"
        );
        assert_eq!(found.url, row.url);
        let after = [com_select(&nodes[0]).await, com_select(&nodes[1]).await];
        // Each probe's own SHOW STATUS is not a SELECT; the lookup is.
        let reached: Vec<u64> = (0..2).map(|n| after[n] - before[n]).collect();
        assert_eq!(reached.iter().sum::<u64>(), 1, "{reached:?}");
    }

    // rotate: days older than --keep-days go from every data table.
    links::insert(&head, &[click_link(token_on(days_ago(4)), 9)])
        .await
        .unwrap();
    ok(
        &cluster,
        &[
            "partitions",
            "rotate",
            "--keep-days",
            "2",
            "--ahead-days",
            "3",
        ],
    );
    let old = partitions::partition_name(days_ago(4));
    let kept = partitions::partition_name(days_ago(2));
    for pool in &nodes {
        for table in data_tables(pool, "links").await {
            let days = days_of(pool, &table).await;
            assert!(!days.contains(&old), "{table}: {days:?}");
            assert!(days.contains(&kept), "{table}: {days:?}");
        }
    }
    assert_eq!(
        link_rows(&nodes[0]).await.len() + link_rows(&nodes[1]).await.len(),
        3000
    );

    // A node down: the other node's tables are done, the command fails
    // naming the dead one.
    cluster.nodes[1].kill();
    let out = cluster.linktrack(&["partitions", "ensure", "--ahead-days", "4"]);
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(
        said.contains(&format!("127.0.0.1:{}", cluster.nodes[1].port)),
        "{said}"
    );
    assert!(stdout(&out).contains("added partition"), "{}", stdout(&out));
    let ahead = partitions::partition_name(today() + chrono::Days::new(4));
    for table in data_tables(&nodes[0], "events").await {
        assert!(days_of(&nodes[0], &table).await.contains(&ahead), "{table}");
    }
}

const BASE: &str = "https://t.example.test";

/// The click tokens of a built letter, in order.
fn click_tokens(letter: &serde_json::Value) -> Vec<String> {
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
async fn until<F, Fut>(what: &str, want: i64, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<i64>>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut seen = None;
    while std::time::Instant::now() < deadline {
        seen = probe().await;
        if seen == Some(want) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("{what}: wanted {want}, last saw {seen:?}");
}

async fn count(pool: &sqlx::MySqlPool, sql: &str) -> Option<i64> {
    sqlx::query_scalar::<_, Option<i64>>(sql)
        .fetch_one(pool)
        .await
        .ok()
        .flatten()
}

/// Events stored on a node, over its data tables.
async fn node_events(pool: &sqlx::MySqlPool) -> Vec<u64> {
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

#[tokio::test]
async fn a_cluster_builds_serves_counts_and_outlives_a_dead_node() {
    let mut cluster = Cluster::start().await;
    ok(&cluster, &["migrate"]);

    // Build 300 letters of two links each through the head (the builder
    // makes today's partitions on every node itself).
    let dir = tempfile::tempdir().unwrap();
    let mailing = dir.path().join("mailing.json");
    std::fs::write(
        &mailing,
        serde_json::json!({
            "mailing_id": "spider", "subject": "s", "from": "f@example.com",
            "html": "<p>Hi</p><a href=\"https://example.com/a\">a</a> <a href=\"https://example.com/b\">b</a>",
            "personalize": false, "proxy_images": false
        })
        .to_string(),
    )
    .unwrap();
    let recipients = dir.path().join("recipients.csv");
    let lines: Vec<String> = (0..300).map(|n| format!("r{n}@example.com")).collect();
    std::fs::write(&recipients, format!("email\n{}\n", lines.join("\n"))).unwrap();
    let out = dir.path().join("letters.jsonl");
    ok(
        &cluster,
        &[
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
            "--batch-size",
            "100",
        ],
    );
    let letters: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(letters.len(), 300);

    // 300 letters x (2 clicks, honeypot, pixel, unsubscribe): on both nodes,
    // each token once.
    let nodes = [cluster.node_pool(0).await, cluster.node_pool(1).await];
    let stored = [link_rows(&nodes[0]).await, link_rows(&nodes[1]).await];
    let total = stored[0].len() + stored[1].len();
    assert_eq!(total, 1500);
    let share = stored[0].len() as f64 / total as f64;
    assert!((0.425..=0.575).contains(&share), "node0 holds {share:.3}");
    let node_of: std::collections::HashMap<String, usize> = stored
        .iter()
        .enumerate()
        .flat_map(|(n, rows)| rows.iter().map(move |(uuid, _)| (hex::encode(uuid), n)))
        .collect();
    assert_eq!(node_of.len(), 1500, "no token twice");

    let head = store::connect(&cluster.head.url(), &store::PoolSettings::default())
        .await
        .unwrap();
    let app =
        crate::common::RunningApp::start(head.clone(), |settings| linktrack::server::AppSettings {
            rollup_every: Some(std::time::Duration::from_millis(200)),
            ..settings
        })
        .await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let click = |token: &str| http.get(format!("{}/c/{token}", app.base)).send();

    // Every click of the first 100 letters redirects; the rollup counts them.
    for letter in &letters[..100] {
        let token = &click_tokens(letter)[0];
        let answer = click(token).await.unwrap();
        assert_eq!(answer.status(), 302);
        assert_eq!(answer.headers()["location"], "https://example.com/a");
    }
    until("events through the head", 100, || {
        count(&head, "SELECT COUNT(*) FROM events WHERE kind = 'click'")
    })
    .await;
    until("clicks rolled up", 100, || {
        count(
            &head,
            "SELECT CAST(SUM(total) AS SIGNED) FROM stats_totals \
             WHERE mailing_id = 'spider' AND kind = 'click'",
        )
    })
    .await;
    let before_outage = node_events(&nodes[0]).await.len();

    // node1 dies: node0's links still redirect, node1's answer 503 at once
    // (the node refuses the connection; no waiting for a timeout), and
    // opens of node1's letters are journaled all the same.
    cluster.nodes[1].kill();
    let (mut live, mut dead) = (0, 0);
    for letter in &letters[100..] {
        let token = &click_tokens(letter)[1];
        let before = crate::common::metrics_text(&app.admin).await;
        let answer = click(token).await.unwrap();
        if node_of[token] == 0 {
            assert_eq!(answer.status(), 302, "node0's link {token}");
            live += 1;
        } else {
            assert_eq!(answer.status(), 503, "node1's link {token}");
            // This click's own latency, from the server's histogram: it
            // fell in the 1 s bucket (a dead node is given up on quickly).
            let after = crate::common::metrics_text(&app.admin).await;
            let added = |le: &str| {
                crate::common::route_latency_bucket(&after, "/c/{token}", le)
                    - crate::common::route_latency_bucket(&before, "/c/{token}", le)
            };
            assert_eq!((added("+Inf"), added("1")), (1, 1), "a dead node's 503");
            dead += 1;
            let pixel = letter["html"].as_str().unwrap();
            let at = pixel.find(&format!("{BASE}/o/")).unwrap() + BASE.len() + 3;
            let open = http
                .get(format!("{}/o/{}", app.base, &pixel[at..at + 36]))
                .send()
                .await
                .unwrap();
            assert_eq!(open.status(), 200);
        }
    }
    assert!(live > 50 && dead > 50, "{live} live, {dead} dead");
    // The writer's batches touch node1's events tables: they fail whole and
    // stay in the journal, leaving nothing on node0.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(node_events(&nodes[0]).await.len(), before_outage);

    // node1 is back: the journal lands, every event once, ids unique.
    cluster.nodes[1].start().await;
    let want = 100 + live + dead;
    until("events after the node returned", want, || {
        count(&head, "SELECT COUNT(*) FROM events")
    })
    .await;
    let mut ids = node_events(&nodes[0]).await;
    ids.extend(node_events(&cluster.node_pool(1).await).await);
    assert_eq!(ids.len() as i64, want);
    assert_eq!(ids.iter().collect::<HashSet<_>>().len() as i64, want);
    until("clicks rolled up after the outage", 100 + live, || {
        count(
            &head,
            "SELECT CAST(SUM(total) AS SIGNED) FROM stats_totals \
             WHERE mailing_id = 'spider' AND kind = 'click'",
        )
    })
    .await;
    // erase through the head: the address is blanked on whichever node holds it.
    let erased = ok(&cluster, &["erase", "--email", "r7@example.com"]);
    assert!(erased.contains("links: 5 rows anonymised"), "{erased}");
    let mut left = 0;
    for pool in [&nodes[0], &cluster.node_pool(1).await] {
        for table in data_tables(pool, "links").await {
            left += count(
                pool,
                &format!("SELECT COUNT(*) FROM `{table}` WHERE email = 'r7@example.com'"),
            )
            .await
            .unwrap();
        }
    }
    assert_eq!(left, 0);
    let token = letters[100..]
        .iter()
        .map(|l| click_tokens(l)[1].clone())
        .find(|t| node_of[t] == 1)
        .unwrap();
    assert_eq!(click(&token).await.unwrap().status(), 302);
    app.stop().await;
}

/// Every link row on a node, in its data tables (`links_NN`; the old copies
/// a move keeps are named `moved_links_NN` and are not counted).
async fn tokens_on(pool: &sqlx::MySqlPool) -> Vec<Vec<u8>> {
    link_rows(pool)
        .await
        .into_iter()
        .map(|(uuid, _)| uuid)
        .collect()
}

// Multi-threaded: the writer task inserts while the test waits on the
// `linktrack shards rebalance` process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_grows_by_a_node_and_moves_tables_while_links_are_written() {
    let cluster = Cluster::with_nodes(3).await;
    let two = cluster.shards_of(2);
    let run = |shards: &str, args: &[&str]| {
        let out = cluster.linktrack_with_shards(shards, args);
        assert!(
            out.status.success(),
            "linktrack {args:?} failed: {}{}",
            stdout(&out),
            stderr(&out)
        );
        stdout(&out)
    };
    run(&two, &["migrate"]);
    let head = store::connect(&cluster.head.url(), &store::PoolSettings::default())
        .await
        .unwrap();
    // Days from four days ago through +2, so rotate has a day to drop.
    let back = partitions::Policy {
        today: days_ago(4),
        ahead_days: 6,
        keep_days: None,
    };
    partitions::run(&head, &back, &partitions::RunOptions::default())
        .await
        .unwrap();
    let mut written: Vec<_> = (0..3000u32)
        .map(|n| click_link(token_on(today()), n))
        .collect();
    links::insert(&head, &written).await.unwrap();
    let old: Vec<_> = (0..60u32)
        .map(|n| click_link(token_on(days_ago(4)), 5000 + n))
        .collect();
    links::insert(&head, &old).await.unwrap();

    // Refusals name what is wrong and change nothing.
    let third = cluster.nodes[2].url();
    let unknown = cluster.linktrack_with_shards(
        &two,
        &["shards", "move", "links_99", "--to", "lt_linktrack_0"],
    );
    assert!(
        stderr(&unknown).contains("links_99"),
        "{}",
        stderr(&unknown)
    );
    let unmigrated =
        cluster.linktrack_with_shards(&two, &["shards", "move", "links_00", "--to", &third]);
    assert!(!unmigrated.status.success());
    assert!(
        stderr(&unmigrated).contains("run `linktrack migrate` first"),
        "{}",
        stderr(&unmigrated)
    );

    // The third node joins: migrate makes its server and database, then
    // rebalance moves tables to it while a writer keeps inserting links.
    let three = cluster.shards();
    run(&three, &["migrate"]);
    let planned = run(&three, &["shards", "rebalance", "--dry-run"]);
    assert_eq!(planned.lines().count(), 10, "{planned}");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (head, stop) = (head.clone(), stop.clone());
        tokio::spawn(async move {
            let mut rows = Vec::new();
            let mut n = 10_000u32;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let batch: Vec<_> = (n..n + 20)
                    .map(|n| click_link(token_on(today()), n))
                    .collect();
                links::insert(&head, &batch).await.unwrap();
                rows.extend(batch);
                n += 20;
            }
            rows
        })
    };
    until("the writer's first batch", 1, || {
        count(
            &head,
            "SELECT COUNT(*) > 0 FROM links WHERE letter_id = 10000",
        )
    })
    .await;
    let moved = run(&three, &["shards", "rebalance"]);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    written.extend(writer.await.unwrap());
    assert_eq!(
        moved.matches("rows copied and checked").count(),
        10,
        "{moved}"
    );
    assert!(written.len() > 3040, "the writer wrote during the moves");
    assert!(run(&three, &["shards", "rebalance"]).contains("nothing to move"));
    assert!(run(&three, &["migrate"]).contains("already spread over 15"));

    // Five data tables of each kind per node; every token once, on the node
    // the head sends its lookup to, and found there through the head.
    let nodes = [
        cluster.node_pool(0).await,
        cluster.node_pool(1).await,
        cluster.node_pool(2).await,
    ];
    for pool in &nodes {
        assert_eq!(data_tables(pool, "links").await.len(), 5);
        assert_eq!(data_tables(pool, "events").await.len(), 5);
    }
    let stored: Vec<Vec<Vec<u8>>> = [
        tokens_on(&nodes[0]).await,
        tokens_on(&nodes[1]).await,
        tokens_on(&nodes[2]).await,
    ]
    .into();
    let all: Vec<&Vec<u8>> = stored.iter().flatten().collect();
    let want = written.len() + old.len();
    assert_eq!(all.len(), want, "no row lost or doubled");
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), want);
    for (n, rows) in stored.iter().enumerate() {
        let share = rows.len() as f64 / want as f64;
        assert!((0.2..=0.47).contains(&share), "node{n} holds {share:.3}");
    }
    let tokens: Vec<_> = written.iter().chain(&old).map(|r| r.token).collect();
    let found = links::lookup_many(&head, &tokens).await.unwrap();
    assert_eq!(found.len(), want);
    for row in written.iter().chain(&old) {
        assert_eq!(found[&row.token].url, row.url);
    }

    // partitions ensure and rotate reach the moved tables on the new node.
    run(
        &three,
        &[
            "partitions",
            "rotate",
            "--keep-days",
            "2",
            "--ahead-days",
            "4",
        ],
    );
    let dropped = partitions::partition_name(days_ago(4));
    let ahead = partitions::partition_name(today() + chrono::Days::new(4));
    for kind in ["links", "events"] {
        for table in data_tables(&nodes[2], kind).await {
            let days = days_of(&nodes[2], &table).await;
            assert!(
                days.contains(&ahead) && !days.contains(&dropped),
                "{table}: {days:?}"
            );
        }
    }
    let left: usize = [
        tokens_on(&nodes[0]).await.len(),
        tokens_on(&nodes[1]).await.len(),
        tokens_on(&nodes[2]).await.len(),
    ]
    .iter()
    .sum();
    assert_eq!(
        left,
        written.len(),
        "the old day's rows went from every node"
    );

    // The old copies are kept, renamed, on the nodes the tables left.
    let kept: i64 = count(
        &nodes[0],
        "SELECT COUNT(*) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'moved\\_%'",
    )
    .await
    .unwrap()
        + count(
            &nodes[1],
            "SELECT COUNT(*) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'moved\\_%'",
        )
        .await
        .unwrap();
    assert_eq!(kept, 10);
}

/// A mailing of two links and `recipients` addresses, built with one batch
/// per `batch` recipients: the arguments of `linktrack build`.
fn small_mailing(
    dir: &std::path::Path,
    mailing_id: &str,
    recipients: usize,
    batch: usize,
) -> Vec<String> {
    let mailing = dir.join("mailing.json");
    std::fs::write(
        &mailing,
        serde_json::json!({
            "mailing_id": mailing_id, "subject": "s", "from": "f@example.com",
            "html": "<p>Hi</p><a href=\"https://example.com/a\">a</a> <a href=\"https://example.com/b\">b</a>",
            "personalize": false, "proxy_images": false
        })
        .to_string(),
    )
    .unwrap();
    let list = dir.join("recipients.csv");
    let lines: Vec<String> = (0..recipients)
        .map(|n| format!("r{n}@example.com"))
        .collect();
    std::fs::write(&list, format!("email\n{}\n", lines.join("\n"))).unwrap();
    let path = |p: std::path::PathBuf| p.to_str().unwrap().to_owned();
    [
        "build".to_owned(),
        "--mailing".into(),
        path(mailing),
        "--recipients".into(),
        path(list),
        "--out".into(),
        path(dir.join("letters.jsonl")),
        "--base-url".into(),
        BASE.into(),
        "--no-progress".into(),
        "--batch-size".into(),
        batch.to_string(),
    ]
    .into()
}

/// Spider commits a transaction on each node in turn, without XA: a node
/// that dies between the inserts and the commit loses its part while the
/// head and the other node keep theirs, and the builder sees the commit
/// fail. Made to happen for real: the builder's batch is held after its
/// inserts (its letters count waits on a row lock the test holds on the
/// head), node1 is killed, the lock released. The re-run must complete
/// every letter: its links exactly once, no row of a letter that was never
/// written out, the mailing's letters count exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_batch_committed_on_one_node_only_is_completed_by_the_rerun() {
    let mut cluster = Cluster::start().await;
    ok(&cluster, &["migrate"]);
    let dir = tempfile::tempdir().unwrap();
    let args = small_mailing(dir.path(), "partial", 200, 200);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let head = store::connect(&cluster.head.url(), &store::PoolSettings::default())
        .await
        .unwrap();
    sqlx::query("INSERT INTO stats_letters (mailing_id, letters) VALUES ('partial', 0)")
        .execute(&head)
        .await
        .unwrap();
    let mut holder = head.begin().await.unwrap();
    sqlx::query("SELECT letters FROM stats_letters WHERE mailing_id = 'partial' FOR UPDATE")
        .fetch_one(&mut *holder)
        .await
        .unwrap();
    let mut first = cluster.command(&cluster.shards(), &args);
    let first = tokio::task::spawn_blocking(move || first.output().unwrap());
    until("the builder's batch waiting on the held row", 1, || {
        count(
            &head,
            "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'",
        )
    })
    .await;
    cluster.nodes[1].kill();
    holder.rollback().await.unwrap();
    let first = first.await.unwrap();
    assert!(!first.status.success(), "the commit on node1 failed");
    cluster.nodes[1].start().await;
    let kept = count(
        &head,
        "SELECT COUNT(*) FROM links WHERE mailing_id = 'partial'",
    )
    .await
    .unwrap();
    assert!(
        kept > 0 && kept < 1000,
        "the batch committed on node0 only: {kept} of 1000 rows kept; {}",
        stderr(&first)
    );

    ok(&cluster, &args);
    let letters: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("letters.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(letters.len(), 200);
    let rows: Vec<(u64, String, u32, Vec<u8>)> = sqlx::query_as(
        "SELECT letter_id, CAST(kind AS CHAR), position, uuid FROM links WHERE mailing_id = 'partial'",
    )
    .fetch_all(&head)
    .await
    .unwrap();
    assert_eq!(
        rows.len(),
        1000,
        "five rows per letter, none of a letter never written out"
    );
    assert_eq!(
        rows.iter().map(|r| &r.3).collect::<HashSet<_>>().len(),
        1000
    );
    let mut per_letter: std::collections::HashMap<u64, Vec<(String, u32)>> = Default::default();
    for (letter, kind, position, _) in &rows {
        per_letter
            .entry(*letter)
            .or_default()
            .push((kind.clone(), *position));
    }
    for letter in &letters {
        let mut links = per_letter[&letter["letter_id"].as_u64().unwrap()].clone();
        links.sort();
        let want = [
            ("click", 1),
            ("click", 2),
            ("honeypot", 0),
            ("pixel", 0),
            ("unsubscribe", 0),
        ];
        assert_eq!(
            links,
            want.map(|(k, p)| (k.to_owned(), p)),
            "{}",
            letter["email"]
        );
        for (n, token) in click_tokens(letter).iter().enumerate() {
            let token: linktrack::token::Token = token.parse().unwrap();
            let found = links::lookup(&head, &token).await.unwrap().unwrap();
            assert_eq!(
                found.url,
                ["https://example.com/a", "https://example.com/b"][n]
            );
        }
    }
    let built = count(
        &head,
        "SELECT CAST(letters AS SIGNED) FROM stats_letters WHERE mailing_id = 'partial'",
    )
    .await;
    assert_eq!(built, Some(200), "letters built");
}

/// Redirects are routed by linktrack straight to the data nodes, so the
/// head is no part of a click: its general log shows no link lookup during
/// a click load (the clicks' events do reach it), and with the head killed, every link on a live
/// node still redirects (links never looked up before, so each is a routed
/// lookup, not the cache) and its click waits in the journal; when the head
/// returns, the journal lands, each click exactly once.
#[tokio::test]
async fn a_cluster_answers_clicks_while_the_head_is_down_and_lands_them_later() {
    let mut cluster = Cluster::start().await;
    ok(&cluster, &["migrate"]);
    ok(&cluster, &["partitions", "ensure"]);
    let head = store::connect(&cluster.head.url(), &store::PoolSettings::default())
        .await
        .unwrap();
    // Sealed as the builder seals them: the server checks a token's kind.
    let seal = crate::common::seal_of(&head).await;
    let noon = today().and_hms_opt(12, 0, 0).unwrap().and_utc();
    let rows: Vec<_> = (0..40u32)
        .map(|n| {
            let token = crate::common::sealed_token(&seal, noon, links::LinkKind::Click);
            click_link(token, n)
        })
        .collect();
    links::insert(&head, &rows).await.unwrap();
    let nodes = [cluster.node_pool(0).await, cluster.node_pool(1).await];
    let on_node0: HashSet<Vec<u8>> = link_rows(&nodes[0])
        .await
        .into_iter()
        .map(|(uuid, _)| uuid)
        .collect();

    // The head's general log, in a table, from before the server starts:
    // everything the server sends the head during a click load is in it.
    for set in [
        "SET GLOBAL log_output = 'TABLE'",
        "TRUNCATE TABLE mysql.general_log",
        "SET GLOBAL general_log = ON",
    ] {
        sqlx::query(set).execute(&head).await.unwrap();
    }
    let app = crate::common::RunningApp::start(head.clone(), |settings| settings).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let click = |row: &links::NewLink| http.get(format!("{}/c/{}", app.base, row.token)).send();
    // A click load: five clicks at once, each token's first, so each is a
    // cache miss and a lookup somewhere.
    let mut load = tokio::task::JoinSet::new();
    for row in &rows[..5] {
        load.spawn(click(row));
    }
    while let Some(answer) = load.join_next().await {
        assert_eq!(answer.unwrap().unwrap().status(), 302);
    }
    until("clicks before the outage", 5, || {
        count(&head, "SELECT COUNT(*) FROM events WHERE kind = 'click'")
    })
    .await;
    assert!(
        head_link_lookups(&head).await.is_empty(),
        "the head's general log saw a link lookup"
    );
    // The log would have shown one: a lookup through the head is there.
    links::lookup(&head, &rows[0].token).await.unwrap().unwrap();
    assert!(!head_link_lookups(&head).await.is_empty());
    sqlx::query("SET GLOBAL general_log = OFF")
        .execute(&head)
        .await
        .unwrap();

    cluster.head.kill();
    let mut per_node = [0, 0];
    for row in &rows[5..] {
        let answer = click(row).await.unwrap();
        assert_eq!(answer.status(), 302, "{} with the head down", row.token);
        assert_eq!(answer.headers()["location"], row.url.as_str());
        per_node[usize::from(!on_node0.contains(&row.token.as_bytes()[..]))] += 1;
    }
    assert!(
        per_node.iter().all(|&n| n > 5),
        "links of both nodes clicked: {per_node:?}"
    );
    // Nothing reaches the nodes' events tables without the head: the
    // clicks wait in the journal.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let stored = node_events(&nodes[0]).await.len() + node_events(&nodes[1]).await.len();
    assert_eq!(stored, 5, "no event written while the head is down");

    // The head returns (on the same port). Spider's settings are reset by a
    // restart: `migrate` sets them again, as the head's server config would.
    cluster.head.start().await;
    ok(&cluster, &["migrate"]);
    until("clicks after the head returned", 40, || {
        count(&head, "SELECT COUNT(*) FROM events WHERE kind = 'click'")
    })
    .await;
    let mut ids = node_events(&nodes[0]).await;
    ids.extend(node_events(&nodes[1]).await);
    assert_eq!(ids.len(), 40, "each click once");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 40);
    let per_link: Vec<(u64, i64)> = sqlx::query_as(
        "SELECT l.letter_id, COUNT(*) FROM events e JOIN links l ON l.id = e.link_id \
         GROUP BY l.letter_id ORDER BY l.letter_id",
    )
    .fetch_all(&head)
    .await
    .unwrap();
    assert_eq!(per_link, (0..40).map(|n| (n, 1)).collect::<Vec<_>>());
    app.stop().await;
}

/// The link lookups (by token) in the head's general log: statements on
/// `links` naming `uuid`. The router's topology reads and the event
/// writer's inserts are other statements.
async fn head_link_lookups(head: &sqlx::MySqlPool) -> Vec<String> {
    let logged: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(argument AS CHAR) FROM mysql.general_log \
         WHERE command_type IN ('Query', 'Execute', 'Prepare')",
    )
    .fetch_all(head)
    .await
    .unwrap();
    assert!(
        logged.iter().any(|s| s.contains("INSERT INTO events")),
        "the general log holds the clicks' events: {logged:?}"
    );
    logged
        .into_iter()
        .filter(|s| s.contains("FROM links ") && s.contains("uuid") && !s.contains("general_log"))
        .collect()
}
