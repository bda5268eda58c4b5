//! Benchmark of a Spider cluster: link inserts and token lookups through the
//! head, against the same work directly on one data node (a plain
//! single-server database there), in the same run, with several client
//! connections.
//!
//! ```sh
//! scripts/spider-cluster start /tmp/ltc        # a head and two data nodes, prints the URLs
//! cargo run --release --example bench_cluster -- \
//!     --head mysql://root@127.0.0.1:23300 \
//!     --nodes mysql://root@127.0.0.1:23301,mysql://root@127.0.0.1:23302
//! scripts/spider-cluster stop /tmp/ltc
//! ```
//!
//! Figures: rows/s of 1,000-row inserts and lookups/s of the redirect's
//! point select (`links::lookup`), each through the head and directly on
//! node 1; the ratio is head / direct. Lookups are measured a third way,
//! routed by linktrack (`cluster::Router`, what `serve` does on a head in
//! the shard layout: each token's statement sent straight to its data table
//! on its node), with the ratio routed / direct. Rounds alternate head,
//! direct and routed so a burst of load elsewhere hits all alike; each
//! figure is the median.
//! With `--batch N` every lookup statement carries N tokens, as `serve`'s
//! batched cache misses under load: `links::lookup_many` on one server,
//! and routed one statement per data node the batch reaches.
//! Fresh `lt_bench_cluster_*` databases are made and dropped.
//!
//! When the servers run on this machine (their pid files readable), the CPU
//! each `mariadbd` spent in each phase is read from `/proc` and printed per
//! row built and per lookup: the data nodes' together and each node's,
//! beside node 1's own per row and per lookup in the direct rounds, with
//! the share of the routed lookups each node served; beside them one server
//! (node 1, direct) at the routed per-node concurrency, the same held to a
//! node's routed rate (like with like: a server's cost per statement grows
//! at a low rate on shared cores), and the idle nodes' CPU per second
//! while node 1 alone works. On one machine CPU per
//! operation is the honest figure (the servers share its cores); run it on
//! 1, 2 and 3 nodes (`scripts/spider-cluster start DIR PORT NODES`) to see
//! whether a node adds capacity: the nodes' CPU per operation should stay
//! near one server's (docs/scaling.md, "Does a node add capacity?").
#![allow(clippy::unwrap_used)] // tests and benchmarks: a failure should stop them loudly

#[path = "support/process_cpu.rs"]
mod process_cpu;
use process_cpu::{mariadbd_stat, ProcessCpu};

use clap::Parser;
use linktrack::store::links::{self, LinkKind, NewLink};
use linktrack::store::{self, cluster, partitions, PoolSettings};
use linktrack::token::Token;
use rand::RngExt;
use sqlx::MySqlPool;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    /// The Spider head's server, without a database.
    #[arg(long)]
    head: String,
    /// The data nodes' servers, comma-separated, without a database.
    #[arg(long)]
    nodes: String,
    /// Client connections (and concurrent tasks).
    #[arg(long, default_value_t = 8)]
    connections: u32,
    /// Rows each insert round stores.
    #[arg(long, default_value_t = 100_000)]
    rows: u32,
    /// Lookups each lookup round makes.
    #[arg(long, default_value_t = 20_000)]
    lookups: u32,
    /// Rounds (each: head and direct, inserts then lookups).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Tokens per lookup statement: 1 is a redirect's cache miss at low
    /// load (the point select); more is `serve`'s batched misses under load
    /// (`links::lookup_many` on one server; routed, one statement per data
    /// node the batch reaches).
    #[arg(long, default_value_t = 1)]
    batch: u32,
    /// Virtual shards of the cluster database.
    #[arg(long, default_value_t = cluster::DEFAULT_VIRTUAL_SHARDS)]
    virtual_shards: u32,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let suffix = format!("{:08x}", rand::rng().random::<u32>());
    let name = format!("lt_bench_cluster_{suffix}");
    let nodes: Vec<String> = args.nodes.split(',').map(|n| n.trim().to_owned()).collect();
    anyhow::ensure!(!nodes.is_empty(), "--nodes names no server");
    let head_url = format!("{}/{name}", args.head);
    let plan = cluster::ClusterMigrate {
        nodes: nodes
            .iter()
            .map(|n| cluster::NodeAddress::parse(&format!("{n}/{name}")))
            .collect::<Result<_, _>>()
            .map_err(anyhow::Error::msg)?,
        virtual_shards: args.virtual_shards,
        row_format: store::RowFormatOptions {
            format: store::DEFAULT_ROW_FORMAT,
            level: None,
            rebuild: false,
        },
    };
    cluster::migrate(&head_url, &plan).await?;
    let direct_name = format!("{name}_direct");
    let direct_url = format!("{}/{direct_name}", nodes[0]);
    store::migrate(&direct_url).await?;
    let settings = PoolSettings {
        max_connections: args.connections,
        acquire_timeout: Duration::from_secs(30),
    };
    let head = store::connect(&head_url, &settings).await?;
    let direct = store::connect(&direct_url, &settings).await?;
    let router = cluster::Router::discover(&head)
        .await
        .ok_or_else(|| anyhow::anyhow!("the head is not in the shard layout: nothing to route"))?;
    for pool in [&head, &direct] {
        partitions::ensure_ahead(pool, 1).await?;
    }
    let cpu = Cpu::find(&head, &nodes).await;
    // Which node holds each virtual shard's links (index into `nodes`).
    let node_of_shard: Vec<usize> = {
        let mut conn = head.acquire().await?;
        let placed = cluster::placements(&mut conn).await?;
        placed
            .iter()
            .filter(|p| p.table == "links")
            .map(|p| {
                nodes
                    .iter()
                    .position(|n| n.ends_with(&format!(":{}", p.node.port)))
                    .unwrap_or(0)
            })
            .collect()
    };
    println!(
        "# bench_cluster: {} nodes, {} virtual shards, {} connections, {} rows and {} lookups per round",
        nodes.len(),
        args.virtual_shards,
        args.connections,
        args.rows,
        args.lookups
    );

    let (mut head_inserts, mut direct_inserts) = (Vec::new(), Vec::new());
    let (mut head_lookups, mut direct_lookups) = (Vec::new(), Vec::new());
    let mut routed_lookups = Vec::new();
    let (mut head_tokens, mut direct_tokens) = (Vec::new(), Vec::new());
    // CPU seconds per operation: (head, each node) per phase, per round.
    let (mut built_cpu, mut direct_built_cpu) = (Vec::new(), Vec::new());
    let (mut routed_cpu, mut direct_lookup_cpu) = (Vec::new(), Vec::new());
    // One server at the concurrency each node sees when routed (the
    // connections over the nodes, rounded up), and the seconds of the
    // direct phases (the other nodes idle through them).
    let per_node = args.connections.div_ceil(nodes.len() as u32);
    let (mut narrow_lookup_cpu, mut narrow_lookups) = (Vec::new(), Vec::new());
    // And one server at the per-node concurrency held to each node's
    // routed rate (the routed rate over the nodes), to compare at the rate
    // a node sees.
    let mut paced_lookup_cpu = Vec::new();
    let mut idle_cpu = Vec::new();
    let mut served = vec![0u64; nodes.len()];
    for round in 1..=args.rounds {
        let before = cpu.read();
        let (rate, mut tokens) = inserts(&head, &args).await?;
        built_cpu.push(cpu.per_op(&before, tokens.len()));
        head_inserts.push(rate);
        head_tokens.append(&mut tokens);
        let before = cpu.read();
        let (rate, mut tokens) = inserts(&direct, &args).await?;
        direct_built_cpu.push(cpu.per_op(&before, tokens.len()));
        direct_inserts.push(rate);
        direct_tokens.append(&mut tokens);
        let all = args.connections;
        head_lookups.push(
            lookups(&Via::Pool(head.clone()), &head_tokens, &args, all)
                .await?
                .0,
        );
        let before = cpu.read();
        let started = Instant::now();
        let (rate, _) = lookups(&Via::Pool(direct.clone()), &direct_tokens, &args, all).await?;
        let seconds = started.elapsed().as_secs_f64();
        direct_lookup_cpu.push(cpu.per_op(&before, lookup_count(&args, all)));
        // The other nodes did nothing in this phase: their CPU is what an
        // idle node spends (background threads), per second.
        idle_cpu.push(cpu.per_second(&before, seconds));
        direct_lookups.push(rate);
        let before = cpu.read();
        let (rate, _) =
            lookups(&Via::Pool(direct.clone()), &direct_tokens, &args, per_node).await?;
        narrow_lookup_cpu.push(cpu.per_op(&before, lookup_count(&args, per_node)));
        narrow_lookups.push(rate);
        let before = cpu.read();
        let (rate, shards) =
            lookups(&Via::Router(router.clone()), &head_tokens, &args, all).await?;
        routed_cpu.push(cpu.per_op(&before, lookup_count(&args, all)));
        let pace = rate / nodes.len() as f64;
        let before = cpu.read();
        lookups_paced(
            &Via::Pool(direct.clone()),
            &direct_tokens,
            &args,
            per_node,
            Some(pace),
        )
        .await?;
        paced_lookup_cpu.push(cpu.per_op(&before, lookup_count(&args, per_node)));
        routed_lookups.push(rate);
        for (shard, n) in shards.iter().enumerate() {
            served[node_of_shard.get(shard).copied().unwrap_or(0)] += n;
        }
        eprintln!(
            "round {round}: inserts head {:.0} direct {:.0} rows/s; \
             lookups head {:.0} direct {:.0} (at {per_node} connections {:.0}) routed {:.0} /s",
            head_inserts[round - 1],
            direct_inserts[round - 1],
            head_lookups[round - 1],
            direct_lookups[round - 1],
            narrow_lookups[round - 1],
            routed_lookups[round - 1]
        );
    }
    let (hi, di) = (median(&mut head_inserts), median(&mut direct_inserts));
    let (hl, dl) = (median(&mut head_lookups), median(&mut direct_lookups));
    let rl = median(&mut routed_lookups);
    let nl = median(&mut narrow_lookups);
    println!("| what | through the head | directly on node 1 | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| inserts, 1,000-row statements | {hi:.0} rows/s | {di:.0} rows/s | **{:.2}** |",
        hi / di
    );
    println!(
        "| lookups by token (uuid, inserted) | {hl:.0} /s | {dl:.0} /s | **{:.2}** |",
        hl / dl
    );
    println!(
        "| lookups routed by linktrack (routed / direct) | {rl:.0} /s | {dl:.0} /s | **{:.2}** |",
        rl / dl
    );
    println!(
        "| lookups directly on node 1 at {per_node} connections (the routed per-node concurrency) | {nl:.0} /s | {dl:.0} /s | **{:.2}** |",
        nl / dl
    );

    if cpu.complete() {
        print_cpu(
            &nodes,
            [
                &built_cpu,
                &direct_built_cpu,
                &routed_cpu,
                &direct_lookup_cpu,
                &narrow_lookup_cpu,
                &idle_cpu,
                &paced_lookup_cpu,
            ],
            &served,
            (per_node, rl),
        );
    } else {
        println!("(CPU not measured: a server's pid file is not readable on this machine)");
    }

    head.close().await;
    direct.close().await;
    drop_databases(&args, &nodes, &name).await;
    Ok(())
}

fn link(n: u32, token: Token) -> NewLink {
    NewLink {
        token,
        kind: LinkKind::Click,
        mailing_id: "bench".into(),
        letter_id: u64::from(n),
        email: format!("r{n}@example.com"),
        position: n % 20,
        url: format!("https://example.com/article/{n}?utm_source=newsletter"),
        meta: None,
    }
}

/// `args.rows` rows in 1,000-row inserts from `args.connections` tasks.
async fn inserts(pool: &MySqlPool, args: &Args) -> anyhow::Result<(f64, Vec<Token>)> {
    let per_task = args.rows / args.connections.max(1);
    let started = Instant::now();
    let tasks: Vec<_> = (0..args.connections)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut tokens = Vec::with_capacity(per_task as usize);
                let mut done = 0;
                while done < per_task {
                    let batch: Vec<NewLink> = (done..(done + 1_000).min(per_task))
                        .map(|n| link(n, Token::new()))
                        .collect();
                    links::insert(&pool, &batch).await?;
                    tokens.extend(batch.iter().map(|l| l.token));
                    done += batch.len() as u32;
                }
                Ok::<_, anyhow::Error>(tokens)
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    Ok((all.len() as f64 / started.elapsed().as_secs_f64(), all))
}

/// Where a lookup round reads: one pool (the head, or node 1 directly), or
/// the data nodes a router names.
#[derive(Clone)]
enum Via {
    Pool(MySqlPool),
    Router(cluster::Router),
}

impl Via {
    /// How many of `tokens` (one statement's, distinct) name a link.
    async fn found(&self, tokens: &[Token]) -> anyhow::Result<usize> {
        Ok(match (self, tokens) {
            (Via::Pool(pool), [token]) => usize::from(links::lookup(pool, token).await?.is_some()),
            (Via::Pool(pool), _) => links::lookup_many(pool, tokens).await?.len(),
            (Via::Router(router), _) => router.lookup_many(tokens).await?.len(),
        })
    }
}

/// `args.lookups` lookups of random stored tokens from `args.connections`
/// tasks, `args.batch` tokens a statement (1: a redirect's cache miss at
/// low load): the rate in tokens, and how many tokens of each virtual
/// shard were looked up.
async fn lookups(
    via: &Via,
    tokens: &[Token],
    args: &Args,
    connections: u32,
) -> anyhow::Result<(f64, Vec<u64>)> {
    lookups_paced(via, tokens, args, connections, None).await
}

/// [`lookups`], at most `pace` lookups a second in all when given.
async fn lookups_paced(
    via: &Via,
    tokens: &[Token],
    args: &Args,
    connections: u32,
    pace: Option<f64>,
) -> anyhow::Result<(f64, Vec<u64>)> {
    let batch = args.batch.max(1);
    let every =
        pace.map(|pace| Duration::from_secs_f64(f64::from(connections * batch) / pace.max(1.0)));
    let tokens = Arc::new(tokens.to_vec());
    let per_task = args.lookups / connections.max(1) / batch;
    let shards = args.virtual_shards;
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (via, tokens) = (via.clone(), Arc::clone(&tokens));
            tokio::spawn(async move {
                let mut per_shard = vec![0u64; shards as usize];
                let mut ticks = every.map(|every| {
                    let mut ticks = tokio::time::interval(every);
                    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    ticks
                });
                for _ in 0..per_task {
                    if let Some(ticks) = ticks.as_mut() {
                        ticks.tick().await;
                    }
                    let mut asked = std::collections::HashSet::new();
                    while asked.len() < (batch as usize).min(tokens.len()) {
                        asked.insert(tokens[rand::rng().random_range(0..tokens.len())]);
                    }
                    let asked: Vec<Token> = asked.into_iter().collect();
                    let found = via.found(&asked).await?;
                    anyhow::ensure!(
                        found == asked.len(),
                        "{} tokens not found",
                        asked.len() - found
                    );
                    for token in &asked {
                        per_shard[cluster::shard_of(token.as_bytes(), shards) as usize] += 1;
                    }
                }
                Ok::<_, anyhow::Error>(per_shard)
            })
        })
        .collect();
    let mut per_shard = vec![0u64; shards as usize];
    for task in tasks {
        for (total, n) in per_shard.iter_mut().zip(task.await??) {
            *total += n;
        }
    }
    let looked_up: u64 = per_shard.iter().sum();
    let rate = looked_up as f64 / started.elapsed().as_secs_f64();
    Ok((rate, per_shard))
}

/// Tokens a lookup round at `connections` looks up.
fn lookup_count(args: &Args, connections: u32) -> usize {
    let batch = args.batch.max(1);
    (args.lookups / connections.max(1) / batch * batch * connections) as usize
}

/// The `/proc/{pid}/stat` of the head's and each node's `mariadbd`.
struct Cpu {
    head: Option<std::path::PathBuf>,
    nodes: Vec<Option<std::path::PathBuf>>,
}

impl Cpu {
    async fn find(head: &MySqlPool, nodes: &[String]) -> Cpu {
        let mut found = Vec::new();
        for node in nodes {
            found.push(match MySqlPool::connect(node).await {
                Ok(pool) => mariadbd_stat(&pool).await,
                Err(_) => None,
            });
        }
        Cpu {
            head: mariadbd_stat(head).await,
            nodes: found,
        }
    }

    fn complete(&self) -> bool {
        self.head.is_some() && self.nodes.iter().all(Option::is_some)
    }

    /// CPU seconds so far: the head's, then each node's.
    fn read(&self) -> Vec<f64> {
        std::iter::once(&self.head)
            .chain(&self.nodes)
            .map(|stat| {
                stat.as_deref()
                    .and_then(|stat| ProcessCpu::read(stat).ok())
                    .map_or(0.0, |cpu| cpu.own)
            })
            .collect()
    }

    /// CPU seconds per second of `seconds` since `before`: the head's, then
    /// each node's.
    fn per_second(&self, before: &[f64], seconds: f64) -> Vec<f64> {
        self.read()
            .iter()
            .zip(before)
            .map(|(now, then)| (now - then) / seconds.max(1e-9))
            .collect()
    }

    /// CPU seconds per operation since `before`: the head's, then each node's.
    fn per_op(&self, before: &[f64], ops: usize) -> Vec<f64> {
        self.read()
            .iter()
            .zip(before)
            .map(|(now, then)| (now - then) / ops.max(1) as f64)
            .collect()
    }
}

/// Median over rounds of each server's CPU per operation.
fn medians(rounds: &[Vec<f64>]) -> Vec<f64> {
    let servers = rounds.first().map_or(0, Vec::len);
    (0..servers)
        .map(|n| median(&mut rounds.iter().map(|r| r[n]).collect::<Vec<_>>()))
        .collect()
}

/// The CPU table: µs of each server per row built and per lookup, the
/// nodes' sum against node 1's alone in the direct rounds.
fn print_cpu(
    nodes: &[String],
    phases: [&Vec<Vec<f64>>; 7],
    served: &[u64],
    (per_node, routed_rate): (u32, f64),
) {
    let [built, direct_built, routed, direct_lookup, narrow_lookup, idle, paced] =
        phases.map(|rounds| medians(rounds));
    let micros = |v: f64| v * 1e6;
    let nodes_sum = |v: &[f64]| v.iter().skip(1).sum::<f64>();
    let total: u64 = served.iter().sum();
    println!();
    println!("| CPU (µs, median of rounds) | head | data nodes together | each node | one server (node 1, direct) | nodes / one server |");
    println!("|---|---|---|---|---|---|");
    let each = |v: &[f64]| {
        v.iter()
            .skip(1)
            .map(|x| format!("{:.1}", micros(*x)))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    println!(
        "| per row built through the head | {:.1} | {:.1} | {} | {:.1} | **{:.2}** |",
        micros(built[0]),
        micros(nodes_sum(&built)),
        each(&built),
        micros(direct_built[1]),
        nodes_sum(&built) / direct_built[1]
    );
    println!(
        "| per routed lookup | {:.1} | {:.1} | {} | {:.1} | **{:.2}** |",
        micros(routed[0]),
        micros(nodes_sum(&routed)),
        each(&routed),
        micros(direct_lookup[1]),
        nodes_sum(&routed) / direct_lookup[1]
    );
    println!(
        "| per lookup, one server at {per_node} connections | | | | {:.1} | **{:.2}** |",
        micros(narrow_lookup[1]),
        nodes_sum(&routed) / narrow_lookup[1]
    );
    println!(
        "| per lookup, one server at {per_node} connections held to a node's routed rate ({:.0} /s) | | | | {:.1} | **{:.2}** |",
        routed_rate / (nodes.len() as f64),
        micros(paced[1]),
        nodes_sum(&routed) / paced[1]
    );
    // What idle nodes spend (nodes 2.., idle through the direct phase),
    // and what that is per routed lookup at the routed rate, for each node.
    let idle_nodes: Vec<f64> = idle.iter().skip(2).copied().collect();
    if !idle_nodes.is_empty() {
        let mean = idle_nodes.iter().sum::<f64>() / idle_nodes.len() as f64;
        println!(
            "| an idle node's background (nodes 2.. during the direct lookups) | {:.1} ms/s | | {} ms/s | {:.1} µs per routed lookup per node | |",
            idle[0] * 1e3,
            idle_nodes
                .iter()
                .map(|x| format!("{:.1}", x * 1e3))
                .collect::<Vec<_>>()
                .join(" / "),
            micros(mean / routed_rate.max(1e-9))
        );
    }
    // Each node's CPU per lookup it served itself.
    let total_served: u64 = served.iter().sum();
    let own: Vec<String> = routed
        .iter()
        .skip(1)
        .zip(served)
        .map(|(cpu, n)| {
            let share = *n as f64 / total_served.max(1) as f64;
            format!("{:.1}", micros(cpu / share.max(1e-9)))
        })
        .collect();
    println!(
        "| per lookup a node served itself | | | {} | {:.1} / {:.1} (8 / {per_node} connections) | |",
        own.join(" / "),
        micros(direct_lookup[1]),
        micros(narrow_lookup[1])
    );
    let shares: Vec<String> = served
        .iter()
        .zip(nodes)
        .map(|(n, node)| format!("{node}: {:.1} %", 100.0 * *n as f64 / total.max(1) as f64))
        .collect();
    println!();
    println!("routed lookups served: {}", shares.join(", "));
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn drop_databases(args: &Args, nodes: &[String], name: &str) {
    let direct = format!("{name}_direct");
    let mut drops = vec![(args.head.clone(), name.to_owned())];
    drops.extend(nodes.iter().map(|n| (n.clone(), name.to_owned())));
    drops.push((nodes[0].clone(), direct));
    for (server, database) in drops {
        if let Ok(pool) = MySqlPool::connect(&server).await {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS `{database}`"))
                .execute(&pool)
                .await;
        }
    }
    if let Ok(pool) = MySqlPool::connect(&args.head).await {
        for n in 0..nodes.len() {
            let server = cluster::server_name(name, n);
            let _ = sqlx::query(&format!("DROP SERVER IF EXISTS `{server}`"))
                .execute(&pool)
                .await;
        }
    }
}
