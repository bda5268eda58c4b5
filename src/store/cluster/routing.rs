//! Lookups routed by linktrack: from the token alone to the data node and
//! data table that hold it, past the head.
//!
//! A head in the shard layout ([`LinkLayout::ByShard`]) stores each link in
//! the data table of its virtual shard ([`super::shard_of`]): head partition
//! `sNN` is `VALUES IN (NN)` and names `links_NN` on one node. The router
//! reads that topology from the head once ([`Router::discover`]), keeps a
//! small pool per data node, and sends each token's lookup to its data
//! table there: the statement the head would have sent, without the head.
//! So redirects scale with the data nodes and go on while the head is down.
//!
//! The topology changes when `shards move` or `rebalance` moves a data
//! table. The router reads it again every [`REFRESH_EVERY`] (one small
//! `information_schema` read on the head), and at once when a data table it
//! reads is gone (error 1146: a move renames the old copy `moved_links_NN`),
//! then asks the new place. While the head is down the last topology stays.

use super::ids::{link_layout, LinkLayout};
use super::node::NodeAddress;
use super::shard::shard_of;
use super::topology::{is_head, placements, Placement};
use crate::locks::{LockEvenPoisoned, ReadWriteEvenPoisoned};
use crate::store::connect::{connect_lazy, PoolSettings};
use crate::store::error::StoreError;
use crate::store::links::{self, StoredLink};
use crate::store::mysql_errors::mysql_error_number;
use crate::token::Token;
use sqlx::MySqlPool;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How often the topology is read again from the head.
pub const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// MariaDB's "table doesn't exist".
const NO_SUCH_TABLE: u16 = 1146;

/// How long a lookup waits for a data node's connection.
const NODE_ACQUIRE_TIMEOUT: Duration = Duration::from_millis(500);

/// Connections kept to each data node for lookups.
const NODE_CONNECTIONS: u32 = 8;

/// Where each virtual shard's links are.
struct Topology {
    /// Per virtual shard: its data node's pool and data table.
    shards: Vec<(MySqlPool, String)>,
    /// The head's placements this was made from, to notice a change.
    made_from: Vec<(String, String)>,
}

/// Routes link lookups to the data nodes. Cheap to clone.
#[derive(Clone)]
pub struct Router {
    head: MySqlPool,
    topology: Arc<RwLock<Arc<Topology>>>,
    /// The data nodes' pools, by address, kept across topology changes.
    nodes: Arc<std::sync::Mutex<Vec<(NodeAddress, MySqlPool)>>>,
}

impl Router {
    /// A router when `head` is a Spider head in the shard layout; `None`
    /// on one server and on a head partitioned by KEY (`uuid`), whose
    /// lookups go through the head as before. A head that cannot be read
    /// is `None` too, with a warning: lookups then go through the head.
    pub async fn discover(head: &MySqlPool) -> Option<Router> {
        // Bounded: a server may start while its database is down.
        let started = tokio::time::timeout(Duration::from_secs(5), Router::start(head)).await;
        match started {
            Ok(Ok(router)) => router,
            Err(_) => {
                tracing::warn!(
                    "the head did not answer within 5 s; link lookups go through the head"
                );
                None
            }
            Ok(Err(err)) => {
                tracing::warn!(%err, "reading the cluster's topology failed; link lookups go through the head");
                None
            }
        }
    }

    async fn start(head: &MySqlPool) -> Result<Option<Router>, StoreError> {
        let mut conn = head.acquire().await?;
        if !is_head(&mut conn).await? {
            return Ok(None);
        }
        if link_layout(&mut conn).await? == LinkLayout::ByKey {
            tracing::warn!(
                "the head partitions links BY KEY (uuid): link lookups go through the head \
                 (docs/scaling.md, \"From the KEY layout\")"
            );
            return Ok(None);
        }
        let placed = placements(&mut conn).await?;
        drop(conn);
        let router = Router {
            head: head.clone(),
            topology: Arc::new(RwLock::new(Arc::new(Topology {
                shards: Vec::new(),
                made_from: Vec::new(),
            }))),
            nodes: Default::default(),
        };
        router.install(&placed)?;
        let watcher = router.clone();
        tokio::spawn(async move { watcher.watch().await });
        Ok(Some(router))
    }

    /// The links the tokens name, each read on its data node; absent tokens
    /// name none. Tokens of one data table share a statement; the tables'
    /// statements run at once.
    pub async fn lookup_many(
        &self,
        tokens: &[Token],
    ) -> Result<HashMap<Token, StoredLink>, StoreError> {
        match self.try_lookup(tokens).await {
            Err(err) if is_missing_table(&err) => {
                // A data table moved: read where it went, ask there.
                self.refresh().await?;
                self.try_lookup(tokens).await
            }
            outcome => outcome,
        }
    }

    async fn try_lookup(&self, tokens: &[Token]) -> Result<HashMap<Token, StoredLink>, StoreError> {
        let topology = self.current();
        let count = topology.shards.len() as u32;
        let mut by_shard: HashMap<u32, Vec<Token>> = HashMap::new();
        for token in tokens {
            by_shard
                .entry(shard_of(token.as_bytes(), count))
                .or_default()
                .push(*token);
        }
        if let [token] = tokens {
            // One token (a redirect's miss at low load): the point select,
            // on this task, as on one server.
            let (pool, table) = shard_table(&topology, by_shard.into_keys().next())?;
            let found = links::lookup_in(&pool, &table, token).await?;
            return Ok(found.map(|link| (*token, link)).into_iter().collect());
        }
        let mut reads = tokio::task::JoinSet::new();
        for (shard, tokens) in by_shard {
            let (pool, table) = shard_table(&topology, Some(shard))?;
            reads.spawn(async move { links::lookup_many_in(&pool, &table, &tokens).await });
        }
        let mut found = HashMap::with_capacity(tokens.len());
        while let Some(part) = reads.join_next().await {
            // A task fails only by panicking (a bug): say so, as an error.
            let part = part.map_err(|err| {
                StoreError::Refused(format!("a routed lookup task failed: {err}"))
            })?;
            found.extend(part?);
        }
        Ok(found)
    }

    fn current(&self) -> Arc<Topology> {
        let guard = self.topology.read_even_poisoned();
        Arc::clone(&guard)
    }

    /// Read the topology from the head again; true when it changed.
    pub async fn refresh(&self) -> Result<bool, StoreError> {
        let mut conn = self.head.acquire().await?;
        let placed = placements(&mut conn).await?;
        drop(conn);
        if fingerprint(&placed) == self.current().made_from {
            return Ok(false);
        }
        self.install(&placed)?;
        tracing::info!("the cluster's topology changed; link lookups follow it");
        Ok(true)
    }

    async fn watch(self) {
        let mut every = tokio::time::interval(REFRESH_EVERY);
        every.tick().await;
        loop {
            every.tick().await;
            // The last head's pool handle gone (the server stopped): stop.
            if self.head.is_closed() {
                return;
            }
            if let Err(err) = self.refresh().await {
                tracing::debug!(%err, "the head could not be read; keeping the topology");
            }
        }
    }

    fn install(&self, placed: &[Placement]) -> Result<(), StoreError> {
        let links: Vec<&Placement> = placed.iter().filter(|p| p.table == "links").collect();
        let mut shards = Vec::with_capacity(links.len());
        for (n, p) in links.iter().enumerate() {
            let numbered = p
                .data_table
                .rsplit('_')
                .next()
                .and_then(|s| s.parse::<usize>().ok());
            if numbered != Some(n) {
                return Err(StoreError::Corrupt {
                    table: "links",
                    detail: format!(
                        "head partition {} names data table {}, expected links_{n:02}",
                        p.partition, p.data_table
                    ),
                });
            }
            shards.push((self.node_pool(&p.node)?, p.data_table.clone()));
        }
        let topology = Arc::new(Topology {
            shards,
            made_from: fingerprint(placed),
        });
        *self.topology.write_even_poisoned() = topology;
        Ok(())
    }

    /// The lookup pool of a data node, made (connecting lazily) once.
    fn node_pool(&self, node: &NodeAddress) -> Result<MySqlPool, StoreError> {
        let mut nodes = self.nodes.lock_even_poisoned();
        if let Some((_, pool)) = nodes.iter().find(|(at, _)| at == node) {
            return Ok(pool.clone());
        }
        // A dead node refuses at once, but a pool retries connecting until
        // its acquire timeout: keep that short, so its links answer 503 at
        // once (as through the head) rather than after the request's limit.
        let settings = PoolSettings {
            max_connections: NODE_CONNECTIONS,
            acquire_timeout: NODE_ACQUIRE_TIMEOUT,
        };
        let pool = connect_lazy(&node.url()?, &settings)?;
        nodes.push((node.clone(), pool.clone()));
        Ok(pool)
    }
}

/// The data node's pool and the data table of a virtual shard.
fn shard_table(topology: &Topology, shard: Option<u32>) -> Result<(MySqlPool, String), StoreError> {
    shard
        .and_then(|shard| topology.shards.get(shard as usize))
        .cloned()
        .ok_or_else(|| StoreError::Refused(format!("virtual shard {shard:?} has no data table")))
}

fn fingerprint(placed: &[Placement]) -> Vec<(String, String)> {
    placed
        .iter()
        .filter(|p| p.table == "links")
        .map(|p| (p.data_table.clone(), p.node.to_string()))
        .collect()
}

fn is_missing_table(err: &StoreError) -> bool {
    match err {
        StoreError::Sqlx(err) => mysql_error_number(err) == Some(NO_SUCH_TABLE),
        _ => false,
    }
}
