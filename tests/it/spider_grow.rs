//! Changing a real Spider cluster under load: a node added and tables
//! moved while links are written, and a build batch that committed on one
//! node only.

use crate::common::cluster::Cluster;
use crate::common::spider::{
    click_tokens, count, data_tables, days_of, head_partitioned_from_four_days_ago, link_rows, ok,
    ok_with_shards, plain_mailing, stderr, until, BASE, TWO_LINKS,
};
use crate::common::{click_link, days_ago, today, token_on};
use linktrack::store::{self, links, partitions};
use std::collections::HashSet;

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
    let run = |shards: &str, args: &[&str]| ok_with_shards(&cluster, shards, args);
    run(&two, &["migrate"]);
    // Days from four days ago through +2, so rotate has a day to drop.
    let head = head_partitioned_from_four_days_ago(&cluster).await;
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
    // And an event writer as the journal replay writes: straight to the
    // data nodes, routed, past the head's pause.
    let router = linktrack::store::cluster::Router::discover(&head)
        .await
        .expect("a router on the shard layout");
    let events_writer = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let batch: Vec<_> = (0..20).map(|_| an_event()).collect();
                router.insert_events(&batch).await.unwrap();
                ids.extend(batch.iter().map(|e| e.event_id.to_vec()));
                // Paced writes beside the move (load, not a wait for a result).
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            ids
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
    let events = events_writer.await.unwrap();
    assert!(
        events.len() > 100,
        "the event writer wrote during the moves"
    );
    assert_eq!(
        count(&head, "SELECT COUNT(*) FROM events").await,
        Some(events.len() as i64),
        "no event lost or doubled through the moves"
    );
    let mut found = 0;
    for event_id in &events {
        found += count_bound(
            &head,
            "SELECT COUNT(*) FROM events WHERE event_id = ?",
            event_id,
        )
        .await;
    }
    assert_eq!(
        found,
        events.len() as i64,
        "each event where the head looks"
    );
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
    let (mailing, list) = plain_mailing(dir, mailing_id, TWO_LINKS, recipients);
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

/// A click event of now with a fresh event id, as the journal holds one.
fn an_event() -> linktrack::event::EventRow {
    linktrack::event::EventRow {
        event_id: *uuid::Uuid::now_v7().as_bytes(),
        occurred_at: chrono::Utc::now(),
        kind: linktrack::kind::EventKind::Click,
        token: *token_on(today()).as_bytes(),
        link_id: Some(1),
        mailing_id: Some("grow".into()),
        letter_id: Some(1),
        email: None,
        position: Some(1),
        ip: None,
        user_agent: None,
        country: None,
        bot: false,
        bot_reason: None,
    }
}

async fn count_bound(pool: &sqlx::MySqlPool, sql: &str, value: &[u8]) -> i64 {
    sqlx::query_scalar(sql)
        .bind(value)
        .fetch_one(pool)
        .await
        .unwrap()
}
