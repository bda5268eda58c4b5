//! Serving from a real Spider cluster: building, clicking, counting, and
//! riding out a dead data node or a dead head (the journal keeps the
//! events until the cluster is whole again).

use crate::common::cluster::Cluster;
use crate::common::spider::{
    build_through_head, click_tokens, count, data_tables, head_returns_and_each_click_lands_once,
    link_rows, migrated_head, node_events, ok, plain_mailing, until, BASE, TWO_LINKS,
};
use crate::common::wait::{eventually, eventually_eq, PATIENCE};
use crate::common::{click_link, today};
use linktrack::store::{self, links};
use std::collections::HashSet;

// Two threads: the server under test keeps running (and confirms the
// erasure) while the test waits for a command it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_builds_serves_counts_and_outlives_a_dead_node() {
    let mut cluster = Cluster::start().await;
    ok(&cluster, &["migrate"]);

    // Build 300 letters of two links each through the head (the builder
    // makes today's partitions on every node itself).
    let dir = tempfile::tempdir().unwrap();
    let (mailing, recipients) = plain_mailing(dir.path(), "spider", TWO_LINKS, 300);
    let letters = build_through_head(
        &cluster,
        dir.path(),
        &mailing,
        &recipients,
        &["--batch-size", "100"],
    );
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
        crate::common::TestServer::start(head.clone(), |settings| linktrack::server::AppSettings {
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

    // node1 dies: node0's links still redirect, and so do node1's: their
    // rows cannot be read, but the server holds the sealed templates of
    // live mailings and answers from the one the token names, at once (the
    // node refuses the connection; no waiting for a timeout). Those clicks
    // and the opens of node1's letters are journaled all the same.
    let failures = crate::common::replay_failures(&app.admin).await;
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
            assert_eq!(answer.status(), 302, "node1's link {token}");
            // This click's own latency, from the server's histogram: it
            // fell in the 1 s bucket (a dead node is given up on quickly).
            let after = crate::common::metrics_text(&app.admin).await;
            let added = |le: &str| {
                crate::common::route_latency_bucket(&after, "/c/{token}", le)
                    - crate::common::route_latency_bucket(&before, "/c/{token}", le)
            };
            assert_eq!((added("+Inf"), added("1")), (1, 1), "a dead node's click");
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
    // The replay's batches touch node1's events tables: those inserts
    // fail (node0's tables take their rows), and the segment stays in the
    // journal, tried whole again until node1 is back: checked once the
    // replay has tried and failed (its own counter).
    crate::common::wait_for_replay_failure(&app.admin, failures).await;
    assert!(node_events(&nodes[0]).await.len() >= before_outage);

    // node1 is back: the journal lands, every event once, ids unique.
    cluster.nodes[1].start().await;
    // Each of node1's letters gave a click and an open while it was down.
    let want = 100 + live + 2 * dead;
    until("events after the node returned", want, || {
        count(&head, "SELECT COUNT(*) FROM events")
    })
    .await;
    let mut ids = node_events(&nodes[0]).await;
    ids.extend(node_events(&cluster.node_pool(1).await).await);
    assert_eq!(ids.len() as i64, want);
    assert_eq!(ids.iter().collect::<HashSet<_>>().len() as i64, want);
    until(
        "clicks rolled up after the outage",
        100 + live + dead,
        || {
            count(
                &head,
                "SELECT CAST(SUM(total) AS SIGNED) FROM stats_totals \
             WHERE mailing_id = 'spider' AND kind = 'click'",
            )
        },
    )
    .await;
    // erase through the head: the address is blanked on whichever node
    // holds it, the running server confirms it first, the suppression is
    // kept as a keyed hash on the head.
    ok(&cluster, &["suppressions", "add", "r7@example.com"]);
    let erased = ok(&cluster, &["erase", "--email", "r7@example.com"]);
    assert!(erased.contains("links: 5 rows anonymised"), "{erased}");
    assert!(erased.contains("erase: servers: 1 confirmed"), "{erased}");
    assert!(
        erased.contains("erase: events: 1 row anonymised"),
        "{erased}"
    );
    assert!(
        erased.contains("erase: suppressions: entry kept as a keyed hash"),
        "{erased}"
    );
    // r7's click after the erase is stored, nobody's.
    let r7 = click_tokens(&letters[7])[1].clone();
    assert_eq!(click(&r7).await.unwrap().status(), 302);
    let r7_letter = letters[7]["letter_id"].as_u64().unwrap();
    let r7_events = format!(
        "SELECT COUNT(*) FROM events WHERE letter_id = {r7_letter} AND email IS NULL AND ip IS NULL"
    );
    until("r7's click after the erase", 2, || count(&head, &r7_events)).await;
    let needles = crate::common::privacy::needles("r7@example.com", None);
    for (name, pool) in [
        ("head", &head),
        ("node0", &nodes[0]),
        ("node1", &cluster.node_pool(1).await),
    ] {
        let hits = crate::common::privacy::sweep_database(pool, &needles).await;
        assert!(hits.is_empty(), "{name}: {hits:?}");
    }
    let kept = crate::common::privacy::sweep_database(
        &nodes[0],
        &crate::common::privacy::needles("r8@example.com", None),
    )
    .await;
    let kept_too = crate::common::privacy::sweep_database(
        &cluster.node_pool(1).await,
        &crate::common::privacy::needles("r8@example.com", None),
    )
    .await;
    assert!(
        !kept.is_empty() || !kept_too.is_empty(),
        "the sweep sees r8"
    );
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

/// Redirects are routed by linktrack straight to the data nodes, so the
/// head is no part of a click: its general log shows no link lookup and
/// no event insert during a click load, and with the head killed, every link on a live
/// node still redirects (links never looked up before, so each is a routed
/// lookup, not the cache) and its click is stored on the nodes all the
/// same (the replay writes events past the head); when the head returns,
/// it reads each click exactly once.
#[tokio::test]
async fn a_cluster_answers_clicks_while_the_head_is_down_and_lands_them_later() {
    let mut cluster = Cluster::start().await;
    let head = migrated_head(&cluster).await;
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
    let app = crate::common::TestServer::start(head.clone(), |settings| settings).await;
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

    let failures = replay_errors(&app.admin).await;
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
    // The replay writes events straight to the nodes: the clicks are
    // stored while the head is down, not only once it returns.
    until("clicks on the nodes, the head down", 40, || async {
        Some((node_events(&nodes[0]).await.len() + node_events(&nodes[1]).await.len()) as i64)
    })
    .await;
    // A pass may have failed meanwhile by holding a data node's events (a
    // node slow to hand out a connection on a loaded machine counts as
    // down for a while; its events land later, and all 40 are in): that
    // is a node's failure, not the head's. None failed with an error.
    assert_eq!(
        replay_errors(&app.admin).await,
        failures,
        "the replay needed no head"
    );

    // The head returns: it reads each click once.
    head_returns_and_each_click_lands_once(&mut cluster, &head, &nodes, 40).await;
    app.stop().await;
}

/// The server's replay passes that failed with an error
/// (`linktrack_replay_errors_total`): the database a pass needs besides
/// the data nodes failed, not a node whose events the pass held.
async fn replay_errors(admin: &str) -> f64 {
    let text = crate::common::metrics_text(admin).await;
    crate::common::metric_value(&text, "linktrack_replay_errors_total").unwrap_or(0.0)
}

/// The link lookups (by token) in the head's general log: statements on
/// `links` naming `uuid`. The router's topology reads are other
/// statements; the clicks' events are written on the nodes, never here.
async fn head_link_lookups(head: &sqlx::MySqlPool) -> Vec<String> {
    let logged: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(argument AS CHAR) FROM mysql.general_log \
         WHERE command_type IN ('Query', 'Execute', 'Prepare')",
    )
    .fetch_all(head)
    .await
    .unwrap();
    assert!(
        logged
            .iter()
            .any(|s| s.contains("FROM information_schema.PARTITIONS")),
        "the general log holds the router's topology reads: {logged:?}"
    );
    assert!(
        !logged.iter().any(|s| s.contains("INSERT INTO events")),
        "the clicks' events were written through the head: {logged:?}"
    );
    logged
        .into_iter()
        .filter(|s| s.contains("FROM links ") && s.contains("uuid") && !s.contains("general_log"))
        .collect()
}

/// A data node killed under a load of 1,000 clicks (one per letter, eight
/// at a time, node1 killed after the first 300): every click is answered
/// 302 to its target, node0's links from their rows, node1's from the
/// mailing's sealed template (its target needs no row); the replay fails
/// on node1 and keeps the journal (a batch naming node1's links cannot
/// read them); once node1 is back, every click is stored exactly once (counted per
/// letter through the head).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_node_killed_under_1000_clicks_loses_and_doubles_none() {
    let mut cluster = Cluster::start().await;
    ok(&cluster, &["migrate"]);
    let dir = tempfile::tempdir().unwrap();
    let (mailing, recipients) = plain_mailing(
        dir.path(),
        "outage",
        "<p>Hi</p><a href=\"https://example.com/a\">a</a>",
        1000,
    );
    let letters = build_through_head(&cluster, dir.path(), &mailing, &recipients, &[]);
    assert_eq!(letters.len(), 1000);
    let nodes = [cluster.node_pool(0).await, cluster.node_pool(1).await];
    let on_node1: HashSet<String> = link_rows(&nodes[1])
        .await
        .into_iter()
        .map(|(uuid, _)| hex::encode(uuid))
        .collect();
    let tokens: Vec<String> = letters.iter().map(|l| click_tokens(l)[0].clone()).collect();

    let head = store::connect(&cluster.head.url(), &store::PoolSettings::default())
        .await
        .unwrap();
    let app = crate::common::TestServer::start(head.clone(), |settings| settings).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let failures = crate::common::replay_failures(&app.admin).await;
    let (mut live, mut dead) = (0, 0);
    for (batch, chunk) in tokens.chunks(8).enumerate() {
        if batch * 8 == 304 {
            cluster.nodes[1].kill();
        }
        let killed = batch * 8 >= 304;
        let mut load = tokio::task::JoinSet::new();
        for token in chunk {
            let answer = http.get(format!("{}/c/{token}", app.base)).send();
            load.spawn(async move { answer.await.map(|a| (a.status(), a.headers().clone())) });
        }
        let mut answers = Vec::new();
        while let Some(answer) = load.join_next().await {
            answers.push(answer.unwrap().unwrap());
        }
        for ((status, headers), token) in answers.iter().zip(chunk) {
            assert_eq!(status.as_u16(), 302, "click {token}");
            assert_eq!(headers["location"], "https://example.com/a");
        }
        if killed {
            for token in chunk {
                if on_node1.contains(token) {
                    dead += 1;
                } else {
                    live += 1;
                }
            }
        }
    }
    assert!(dead > 200 && live > 200, "{live} live, {dead} dead");
    // node1's events tables refuse: the replay has failed, and the journal
    // keeps what it could not store; node0's links' clicks are stored
    // meanwhile, each on node0 (its link's node).
    crate::common::wait_for_replay_failure(&app.admin, failures).await;
    let mut on_node0: Vec<String> = tokens
        .iter()
        .filter(|t| !on_node1.contains(*t))
        .cloned()
        .collect();
    on_node0.sort();
    eventually_eq(
        PATIENCE,
        "node0's clicks all stored while node1 is down",
        on_node0.clone(),
        || clicked_on(&nodes[0]),
    )
    .await;
    let during = node_events(&nodes[0]).await.len();

    // node1 returns: every click is stored once.
    cluster.nodes[1].start().await;
    until("clicks after node1 returned", 1000, || {
        count(&head, "SELECT COUNT(*) FROM events WHERE kind = 'click'")
    })
    .await;
    let mut ids = node_events(&nodes[0]).await;
    ids.extend(node_events(&cluster.node_pool(1).await).await);
    eprintln!(
        "node1 killed under 1,000 clicks: {live} clicks on node0's links and {dead} on node1's \
         while it was down, all 302; {during} events on node0 during the outage; {} stored \
         after, {} distinct",
        ids.len(),
        ids.iter().collect::<HashSet<_>>().len()
    );
    assert_eq!(ids.len(), 1000, "each click stored once");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 1000);
    let per_letter: Vec<(u64, i64)> = sqlx::query_as(
        "SELECT letter_id, COUNT(*) FROM events WHERE kind = 'click' \
         GROUP BY letter_id HAVING COUNT(*) <> 1",
    )
    .fetch_all(&head)
    .await
    .unwrap();
    assert_eq!(per_letter, [], "letters clicked other than once");
    assert_eq!(
        count(
            &head,
            "SELECT COUNT(DISTINCT letter_id) FROM events WHERE kind = 'click'"
        )
        .await,
        Some(1000)
    );
    app.stop().await;
}

/// The click events stored on a node (the tokens clicked, hex), over its
/// `events` data tables.
async fn clicked_on(pool: &sqlx::MySqlPool) -> Vec<String> {
    let mut tokens = Vec::new();
    for table in data_tables(pool, "events").await {
        let part: Vec<Vec<u8>> =
            sqlx::query_scalar(&format!("SELECT uuid FROM `{table}` WHERE kind = 'click'"))
                .fetch_all(pool)
                .await
                .unwrap();
        tokens.extend(part.into_iter().map(hex::encode));
    }
    tokens.sort();
    tokens
}

/// One data node of three down: the clicks on the other two nodes' links
/// are stored while it is down (the replay holds only the dead node's
/// events, and each event is stored on its link's node), the dead node's
/// wait in the journal, and once it is back every click is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_nodes_events_are_stored_while_a_data_node_is_down() {
    let mut cluster = Cluster::with_nodes(3).await;
    ok(&cluster, &["migrate"]);
    let dir = tempfile::tempdir().unwrap();
    let (mailing, recipients) = plain_mailing(
        dir.path(),
        "nodes",
        "<p>Hi</p><a href=\"https://example.com/a\">a</a>",
        300,
    );
    let letters = build_through_head(&cluster, dir.path(), &mailing, &recipients, &[]);
    let tokens: Vec<String> = letters.iter().map(|l| click_tokens(l)[0].clone()).collect();
    let mut nodes = Vec::new();
    let mut links_on = Vec::new();
    for n in 0..3 {
        let pool = cluster.node_pool(n).await;
        let here: HashSet<String> = link_rows(&pool)
            .await
            .into_iter()
            .map(|(uuid, _)| hex::encode(uuid))
            .collect();
        links_on.push(here);
        nodes.push(pool);
    }
    let clicked_links_on = |n: usize| -> Vec<String> {
        let mut on: Vec<String> = tokens
            .iter()
            .filter(|t| links_on[n].contains(*t))
            .cloned()
            .collect();
        on.sort();
        on
    };
    for n in 0..3 {
        assert!(clicked_links_on(n).len() > 50, "node{n} holds few links");
    }

    let head = store::connect(&cluster.head.url(), &store::PoolSettings::default())
        .await
        .unwrap();
    let app = crate::common::TestServer::start(head.clone(), |settings| settings).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    cluster.nodes[1].kill();
    for chunk in tokens.chunks(8) {
        let mut load = tokio::task::JoinSet::new();
        for token in chunk {
            let answer = http.get(format!("{}/c/{token}", app.base)).send();
            load.spawn(async move { answer.await.map(|a| a.status().as_u16()) });
        }
        while let Some(status) = load.join_next().await {
            assert_eq!(status.unwrap().unwrap(), 302);
        }
    }
    // While node1 is down: nodes 0 and 2 get their links' clicks, each
    // event on its link's node, within the replay's delay; node1's wait
    // in the journal.
    for n in [0, 2] {
        let want = clicked_links_on(n);
        let what = format!("node{n}: the clicks on its links stored while node1 is down");
        eventually_eq(PATIENCE, &what, want, || clicked_on(&nodes[n])).await;
    }
    let held = clicked_links_on(1).len() as f64;
    eventually(PATIENCE, "the events held for node1 counted", || async {
        let text = crate::common::metrics_text(&app.admin).await;
        match crate::common::metric_value(&text, "linktrack_replay_held_events") {
            Some(waiting) if (waiting - held).abs() < 0.5 => Ok(()),
            waiting => Err(format!("{waiting:?}, wanted {held}")),
        }
    })
    .await;

    // node1 returns: its links' clicks land on it, every click once.
    cluster.nodes[1].start().await;
    until("clicks after node1 returned", 300, || {
        count(&head, "SELECT COUNT(*) FROM events WHERE kind = 'click'")
    })
    .await;
    nodes[1] = cluster.node_pool(1).await;
    let mut all = Vec::new();
    for (n, pool) in nodes.iter().enumerate() {
        let stored = clicked_on(pool).await;
        assert_eq!(stored, clicked_links_on(n), "node{n}'s clicks, each once");
        all.extend(stored);
        let ids = node_events(pool).await;
        assert_eq!(
            ids.len(),
            ids.iter().collect::<HashSet<_>>().len(),
            "node{n}: an event id twice"
        );
    }
    all.sort();
    let mut clicked = tokens.clone();
    clicked.sort();
    assert_eq!(all, clicked, "each click stored once, on its link's node");
    assert_eq!(
        count(
            &head,
            "SELECT COUNT(DISTINCT letter_id) FROM events WHERE kind = 'click'"
        )
        .await,
        Some(300)
    );
    app.stop().await;
}
