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
    let rows: Vec<_> = (0..3000u32)
        .map(|n| click_link(token_on(today()), n))
        .collect();
    links::insert(&head, &rows).await.unwrap();
    let stored = [link_rows(&nodes[0]).await, link_rows(&nodes[1]).await];
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

    // One lookup reaches exactly one data node.
    for row in rows.iter().take(5) {
        let before = [com_select(&nodes[0]).await, com_select(&nodes[1]).await];
        let found = links::lookup(&head, &row.token).await.unwrap().unwrap();
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
