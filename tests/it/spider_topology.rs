//! A cluster's topology outside the head: a server started while the head
//! is down routes by the topology it saved beside its journal, and
//! `shards status` says what each data node holds and whether it answers.

use crate::common::cluster::Cluster;
use crate::common::spider::{
    count, data_tables, head_returns_and_each_click_lands_once, link_rows, migrated_head,
    node_events, ok, stderr, stdout, until,
};
use crate::common::wait::{eventually, PATIENCE};
use crate::common::{click_link, seal_of, sealed_token, today, Serving};
use linktrack::store::{self, links};
use std::collections::HashSet;
use std::path::Path;

/// `linktrack serve` on the cluster, journaling in `journal`, logging at info.
fn serve(cluster: &Cluster, journal: &Path) -> std::process::Command {
    let mut command = cluster.command(
        &cluster.shards(),
        &[
            "serve",
            "--rollup-every",
            "0",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--journal",
        ],
    );
    command.arg(journal).env("RUST_LOG", "error,linktrack=info");
    command
}

async fn readyz(server: &Serving) -> (u16, serde_json::Value) {
    let admin = server.admin.expect("an admin listener");
    let answer = reqwest::get(format!("http://{admin}/readyz"))
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (
        status,
        serde_json::from_str(&answer.text().await.unwrap()).unwrap(),
    )
}

/// 100 click links, sealed as the builder seals them, inserted through the head.
async fn hundred_links(head: &sqlx::MySqlPool) -> Vec<links::NewLink> {
    let seal = seal_of(head).await;
    let noon = today().and_hms_opt(12, 0, 0).unwrap().and_utc();
    let rows: Vec<_> = (0..100u32)
        .map(|n| click_link(sealed_token(&seal, noon, links::LinkKind::Click), n))
        .collect();
    links::insert(head, &rows).await.unwrap();
    rows
}

/// A server that read the head once keeps its topology in a file beside
/// its journal; killed head, a new server started on that journal answers
/// every click from the data nodes, says so in its log and `/readyz`, and
/// its journal lands once the head returns, each click once; it then routes
/// by the head's topology again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_while_the_head_is_down_routes_by_its_saved_topology() {
    let mut cluster = Cluster::start().await;
    let head = migrated_head(&cluster).await;
    let rows = hundred_links(&head).await;
    let nodes = [cluster.node_pool(0).await, cluster.node_pool(1).await];
    let on_node0: HashSet<Vec<u8>> = link_rows(&nodes[0])
        .await
        .into_iter()
        .map(|(uuid, _)| uuid)
        .collect();

    // A first server, the head up: it saves the topology at start.
    let journal = tempfile::tempdir().unwrap();
    let saved = journal.path().join(store::cluster::TOPOLOGY_FILE);
    let mut first = Serving::spawn(serve(&cluster, journal.path())).await;
    let (status, ready) = readyz(&first).await;
    assert_eq!(
        (status, ready["topology"].as_str()),
        (200, Some("head")),
        "{ready}"
    );
    first.terminate().await;
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    let placements = file["placements"].as_array().unwrap();
    assert_eq!(
        placements.len(),
        30,
        "15 links and 15 events partitions: {file}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&saved).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the file holds the nodes' credentials");

    // The head dies; a server starts on the same journal directory.
    cluster.head.kill();
    let mut second = Serving::spawn(serve(&cluster, journal.path())).await;
    assert!(
        second
            .log()
            .contains("link lookups use the cluster topology saved at start-up from the file"),
        "{}",
        second.log()
    );
    let (status, ready) = readyz(&second).await;
    assert_eq!(status, 503, "the head is down: {ready}");
    assert_eq!(ready["topology"], "saved", "{ready}");
    let detail = ready["detail"].as_str().unwrap();
    assert!(
        detail.contains("database unavailable") && detail.contains(store::cluster::TOPOLOGY_FILE),
        "{detail}"
    );

    let http = crate::common::client();
    let mut per_node = [0, 0];
    for row in &rows {
        let answer = http
            .get(format!("{}/c/{}", second.base(), row.token))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 302, "{} with the head down", row.token);
        assert_eq!(answer.headers()["location"], row.url.as_str());
        per_node[usize::from(!on_node0.contains(&row.token.as_bytes()[..]))] += 1;
    }
    assert!(
        per_node.iter().all(|&n| n > 20),
        "both nodes' links: {per_node:?}"
    );
    assert_eq!(
        node_events(&nodes[0]).await.len() + node_events(&nodes[1]).await.len(),
        0,
        "nothing is stored while the head is down"
    );

    // The head returns (its Spider settings set again by migrate, as its
    // server config would): the journal lands, each click once, and the
    // server reads the head's topology again.
    head_returns_and_each_click_lands_once(&mut cluster, &head, &nodes, 100).await;
    eventually(
        PATIENCE,
        "the second server on the head's topology",
        || async {
            let (status, ready) = readyz(&second).await;
            if status == 200 && ready["topology"] == "head" {
                Ok(())
            } else {
                Err(format!("{status} {ready}"))
            }
        },
    )
    .await;
    assert!(
        second.log().contains("the head answers again"),
        "{}",
        second.log()
    );
    second.terminate().await;
}

/// `shards status`: a line per node with its address, its data tables and
/// the rows (counted) and days they hold, the replay's lag there; a dead
/// node is named unreachable, the others still reported, exit 1.
#[tokio::test]
async fn shards_status_reports_each_node_and_names_a_dead_one() {
    let mut cluster = Cluster::start().await;
    let head = migrated_head(&cluster).await;
    let rows = hundred_links(&head).await;
    // Ten clicks through a server, so some nodes have events.
    let journal = tempfile::tempdir().unwrap();
    let mut server = Serving::spawn(serve(&cluster, journal.path())).await;
    let http = crate::common::client();
    for row in &rows[..10] {
        let answer = http
            .get(format!("{}/c/{}", server.base(), row.token))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 302);
    }
    until("clicks stored", 10, || {
        count(&head, "SELECT COUNT(*) FROM events")
    })
    .await;
    server.terminate().await;
    let nodes = [cluster.node_pool(0).await, cluster.node_pool(1).await];
    let links_on = [
        link_rows(&nodes[0]).await.len(),
        link_rows(&nodes[1]).await.len(),
    ];
    let events_on = [
        node_events(&nodes[0]).await.len(),
        node_events(&nodes[1]).await.len(),
    ];

    let out = ok(&cluster, &["shards", "status", "--exact"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let day = today().to_string();
    for (n, line) in lines.iter().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields[0], format!("lt_linktrack_{n}"), "{line}");
        assert_eq!(
            fields[1],
            format!("root@127.0.0.1:{}/linktrack", cluster.nodes[n].port)
        );
        assert_eq!(fields[2], "reachable", "{line}");
        assert!(fields[3].ends_with("data tables"), "{line}");
        assert_eq!(fields[4], format!("links {} rows", links_on[n]), "{line}");
        let events = match events_on[n] {
            1 => "events 1 row".to_owned(),
            e => format!("events {e} rows"),
        };
        assert_eq!(fields[5], events, "{line}");
        // "N days FIRST..LAST", today among them.
        let range = fields[6].rsplit(' ').next().unwrap();
        let (first, last) = range.split_once("..").unwrap_or_else(|| panic!("{line}"));
        assert!(
            first <= day.as_str() && day.as_str() <= last,
            "today held: {line}"
        );
        if events_on[n] > 0 {
            // The clicks happened seconds ago: the lag is small.
            let lag: u64 = fields[7]
                .strip_prefix("replay lag ")
                .and_then(|rest| rest.split(' ').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("{line}"));
            assert!(lag < 120, "{line}");
        } else {
            assert_eq!(fields[7], "replay lag: no event stored", "{line}");
        }
    }
    assert_eq!(links_on.iter().sum::<usize>(), 100);

    // node1 dies: its line says so, node0's is still printed, exit 1.
    cluster.nodes[1].kill();
    let out = cluster.linktrack(&["shards", "status"]);
    assert!(!out.status.success());
    let (text, err) = (stdout(&out), stderr(&out));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}{err}");
    assert!(lines[0].contains("\treachable\t"), "{text}");
    assert!(
        lines[0].contains("links ~"),
        "estimates without --exact: {text}"
    );
    assert!(lines[1].contains("\tunreachable: "), "{text}");
    assert!(
        err.contains("1 of 2 data nodes could not be read: lt_linktrack_1"),
        "{err}"
    );
}

/// The general log of `pool`'s server as a table, emptied, switched on.
async fn general_log_on(pool: &sqlx::MySqlPool) {
    for set in [
        "SET GLOBAL log_output = 'TABLE'",
        "TRUNCATE TABLE mysql.general_log",
        "SET GLOBAL general_log = ON",
    ] {
        sqlx::query(set).execute(pool).await.unwrap();
    }
}

/// Statements in `pool`'s general log containing every one of `needles`.
async fn logged(pool: &sqlx::MySqlPool, needles: &[&str]) -> usize {
    // Bytes: an executed statement's bound binary values are not UTF-8.
    let statements: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT argument FROM mysql.general_log WHERE command_type IN ('Query', 'Execute')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    statements
        .iter()
        .map(|s| String::from_utf8_lossy(s))
        .filter(|s| !s.contains("general_log") && needles.iter().all(|n| s.contains(n)))
        .count()
}

/// The event ids stored on a node, over its data tables.
async fn node_event_ids(pool: &sqlx::MySqlPool) -> Vec<Vec<u8>> {
    let mut ids = Vec::new();
    for table in data_tables(pool, "events").await {
        let mut part: Vec<Vec<u8>> = sqlx::query_scalar(&format!("SELECT event_id FROM `{table}`"))
            .fetch_all(pool)
            .await
            .unwrap();
        ids.append(&mut part);
    }
    ids
}

/// 1,000 clicks replayed: each click's link is read by its request (the
/// replay takes that row, with its reader, in memory) and each event
/// written, on the data nodes: the head's general log shows no link read
/// and no event write, the nodes' show both. The head finds each event where its KEY
/// (`event_id`) partitioning looks for it. Then the head is killed: 100
/// more clicks are stored on the nodes while it is down (the replay needs
/// no head); when it returns, the stats it rolls count every click once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_links_of_1000_clicks_are_read_and_their_events_written_on_the_nodes_not_the_head() {
    let mut cluster = Cluster::start().await;
    let head = migrated_head(&cluster).await;
    let mut rows = Vec::new();
    for _ in 0..10 {
        rows.extend(hundred_links(&head).await);
    }
    let nodes = [cluster.node_pool(0).await, cluster.node_pool(1).await];
    general_log_on(&head).await;
    for node in &nodes {
        general_log_on(node).await;
    }
    let journal = tempfile::tempdir().unwrap();
    let mut server = Serving::spawn(serve(&cluster, journal.path())).await;
    let http = crate::common::client();
    for row in &rows {
        let answer = http
            .get(format!("{}/c/{}", server.base(), row.token))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 302);
    }
    until("1,000 clicks stored", 1000, || {
        count(&head, "SELECT COUNT(*) FROM events WHERE kind = 'click'")
    })
    .await;
    for pool in [&head, &nodes[0], &nodes[1]] {
        sqlx::query("SET GLOBAL general_log = OFF")
            .execute(pool)
            .await
            .unwrap();
    }
    // Link reads name `uuid`; the head's own would be `FROM links `.
    let head_reads = logged(&head, &["FROM links ", "uuid"]).await;
    let head_writes = logged(&head, &["INSERT INTO events"]).await;
    let on_nodes = logged(&nodes[0], &["FROM `links_", "uuid"]).await
        + logged(&nodes[1], &["FROM `links_", "uuid"]).await;
    let node_writes = logged(&nodes[0], &["INSERT INTO `events_"]).await
        + logged(&nodes[1], &["INSERT INTO `events_"]).await;
    eprintln!(
        "head: {head_reads} link reads, {head_writes} event inserts; \
         nodes: {on_nodes} link reads, {node_writes} event inserts"
    );
    assert_eq!(head_reads, 0, "link reads on the head");
    assert_eq!(head_writes, 0, "event inserts on the head");
    // Each click's lookup (one after another: a statement each) on the
    // nodes; the replay takes the rows the lookups read (handed over in
    // memory) and reads none of them again.
    assert!(
        (1000..1100).contains(&on_nodes),
        "{on_nodes} link reads on the nodes"
    );
    assert!(node_writes > 0, "{node_writes} event inserts on the nodes");
    let mut ids = node_events(&nodes[0]).await;
    ids.extend(node_events(&nodes[1]).await);
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        1000,
        "each click once"
    );
    // Every event sits in the data table the head's partitioning names: a
    // lookup by `event_id` (pruned to one partition) finds each.
    let mut event_ids = node_event_ids(&nodes[0]).await;
    event_ids.extend(node_event_ids(&nodes[1]).await);
    let mut found = 0;
    for event_id in &event_ids {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE event_id = ?")
            .bind(event_id)
            .fetch_one(&head)
            .await
            .unwrap();
        found += n;
    }
    assert_eq!(found, 1000, "events found through the head by event_id");

    // The head dies: 100 more clicks are answered and stored on the nodes
    // while it is down, within the replay's usual delay.
    cluster.head.kill();
    for row in &rows[..100] {
        let answer = http
            .get(format!("{}/c/{}", server.base(), row.token))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 302, "{} with the head down", row.token);
    }
    until("1,100 events on the nodes, the head down", 1100, || async {
        Some((node_events(&nodes[0]).await.len() + node_events(&nodes[1]).await.len()) as i64)
    })
    .await;
    server.terminate().await;

    // The head returns: it reads them all, once, and its rollup counts them.
    cluster.head.start().await;
    ok(&cluster, &["migrate"]);
    // Polled: the head's first reads through Spider after its restart can
    // fail while it reconnects to the nodes (`count` gives None then).
    until("the head counting 1,100 clicks", 1100, || {
        count(&head, "SELECT COUNT(*) FROM events WHERE kind = 'click'")
    })
    .await;
    assert_eq!(
        count(&head, "SELECT COUNT(DISTINCT event_id) FROM events").await,
        Some(1100)
    );
    ok(&cluster, &["stats", "rollup", "--verdict-settle-secs", "0"]);
    assert_eq!(
        count(
            &head,
            "SELECT CAST(SUM(total) AS SIGNED) FROM stats_totals WHERE kind = 'click'"
        )
        .await,
        Some(1100),
        "the rollup through the head counts every click once"
    );
}
