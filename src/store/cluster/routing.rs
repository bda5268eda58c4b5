//! Lookups routed by linktrack: from the token alone to the data node and
//! data table that hold it, past the head.
//!
//! A head in the shard layout ([`LinkLayout::ByShard`]) stores each link in
//! the data table of its virtual shard ([`super::shard_of`]): head partition
//! `sNN` is `VALUES IN (NN)` and names `links_NN` on one node. The router
//! reads that topology from the head once ([`Router::discover`]), keeps a
//! small pool per data node, and sends each token's lookup to its data
//! table there: the statement the head would have sent, without the head.
//! A batch of tokens costs each node it reaches one statement, over the
//! data tables of that node it names (`link_lookups::lookup_many_on_node`).
//! So redirects scale with the data nodes and go on while the head is down.
//!
//! The topology changes when `shards move` or `rebalance` moves a data
//! table. The router reads it again every [`REFRESH_EVERY`] (one small
//! `information_schema` read on the head), and at once when a data table it
//! reads is gone (error 1146: a move renames the old copy `moved_links_NN`),
//! then asks the new place. While the head is down the last topology stays.
//!
//! Each topology read from the head is also saved in a file in the
//! server's journal directory ([`super::saved_topology`]); a server that
//! cannot read the head at start routes by that file, says so (log,
//! [`Router::source`] for `/readyz`), and goes back to the head's topology
//! at the first refresh the head answers.

use super::ids::{link_layout, LinkLayout};
use super::key_partition::place_on;
use super::node::NodeAddress;
use super::saved_topology::{self, SavedTopology};
use super::shard::shard_of;
use super::topology::{is_head, placements, Placement};
use crate::locks::{LockEvenPoisoned, ReadWriteEvenPoisoned};
use crate::store::connect::{connect_lazy, PoolSettings};
use crate::store::error::StoreError;
use crate::store::link_lookups::{self, StoredLink};
use crate::store::mysql_errors::mysql_error_number;
use crate::token::Token;
use chrono::{DateTime, Utc};
use sqlx::MySqlPool;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
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

/// Where each virtual shard's links are, and each head partition's events.
struct Topology {
    /// Per virtual shard: its data node's pool and data table.
    shards: Vec<(MySqlPool, String)>,
    /// Per virtual shard: its data node (an index of `Router::nodes`).
    shard_nodes: Vec<usize>,
    /// Per data node holding links: its virtual shards, in order.
    node_shards: BTreeMap<usize, Vec<u32>>,
    /// Per head partition of `events`, in order: its node's pool and data table.
    events: Vec<(MySqlPool, String)>,
    /// Per head partition of `events`: its data node.
    event_nodes: Vec<usize>,
    /// The head's placements this was made from, to notice a change.
    made_from: Vec<(String, String)>,
}

/// Where the topology in use came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologySource {
    /// Read from the head (at start or at a refresh).
    Head,
    /// Read from the file at start, the head being unreachable; it stays
    /// so until a refresh reads the head.
    Saved {
        file: PathBuf,
        saved_at: DateTime<Utc>,
    },
}

/// Routes link lookups to the data nodes. Cheap to clone.
#[derive(Clone)]
pub struct Router {
    head: MySqlPool,
    topology: Arc<RwLock<Arc<Topology>>>,
    /// The data nodes' pools, by address, kept across topology changes.
    nodes: Arc<std::sync::Mutex<Vec<(NodeAddress, MySqlPool)>>>,
    /// Where the topology is saved for a start without the head.
    file: Option<Arc<Path>>,
    source: Arc<RwLock<TopologySource>>,
    /// The placements and event writer number last written to `file`, to
    /// write it only on a change.
    saved: Arc<std::sync::Mutex<(Vec<Placement>, Option<u64>)>>,
}

impl Router {
    /// A router when `head` is a Spider head in the shard layout; `None`
    /// on one server and on a head partitioned by KEY (`uuid`), whose
    /// lookups go through the head as before. A head that cannot be read
    /// is `None` too, with a warning: lookups then go through the head.
    pub async fn discover(head: &MySqlPool) -> Option<Router> {
        Router::discover_saving(head, None).await
    }

    /// [`Router::discover`], saving each topology read from the head in
    /// `file` (a server's journal directory, [`saved_topology::FILE_NAME`]);
    /// when the head cannot be read, the topology saved there is used.
    pub async fn discover_saving(head: &MySqlPool, file: Option<PathBuf>) -> Option<Router> {
        let file: Option<Arc<Path>> = file.map(Arc::from);
        // Bounded: a server may start while its database is down.
        let started =
            tokio::time::timeout(Duration::from_secs(5), Router::start(head, file.clone())).await;
        let why = match started {
            Ok(Ok(router)) => return router,
            Err(_) => "the head did not answer within 5 s".to_owned(),
            Ok(Err(err)) => format!("reading the cluster's topology from the head failed: {err}"),
        };
        match file {
            Some(file) => Router::from_saved(head, file, &why).await,
            None => {
                tracing::warn!("{why}; link lookups go through the head");
                None
            }
        }
    }

    /// A router on the topology saved in `file`, when there is one for
    /// this head; the head is read again at each refresh.
    async fn from_saved(head: &MySqlPool, file: Arc<Path>, why: &str) -> Option<Router> {
        let head_name = saved_topology::head_of(head);
        let path = file.to_path_buf();
        let loaded =
            tokio::task::spawn_blocking(move || saved_topology::load(&path, &head_name)).await;
        let saved = match loaded {
            Ok(Ok(Some(saved))) => saved,
            Ok(Ok(None)) => {
                tracing::warn!(
                    file = %file.display(),
                    "{why}; no saved topology: link lookups go through the head"
                );
                return None;
            }
            Ok(Err(err)) => {
                tracing::warn!(%err, "{why}; the saved topology cannot be used: link lookups go through the head");
                return None;
            }
            Err(err) => {
                tracing::warn!(%err, "{why}; reading the saved topology failed");
                return None;
            }
        };
        let source = TopologySource::Saved {
            file: file.to_path_buf(),
            saved_at: saved.saved_at,
        };
        let router = Router::new(head, Some(file.clone()), source);
        *router.saved.lock_even_poisoned() = (saved.placements.clone(), saved.writer);
        if let Some(writer) = saved.writer {
            // Event ids without the head: the writer number it gave before.
            super::event_ids::adopt(&saved_topology::head_of(head), writer);
        }
        if let Err(err) = router.install(&saved.placements) {
            tracing::warn!(%err, "{why}; the saved topology cannot be used: link lookups go through the head");
            return None;
        }
        tracing::warn!(
            saved_at = %saved.saved_at,
            file = %file.display(),
            "{why}; link lookups use the cluster topology saved at start-up from the file \
             (read from the head again once it answers)"
        );
        router.spawn_watch();
        Some(router)
    }

    fn new(head: &MySqlPool, file: Option<Arc<Path>>, source: TopologySource) -> Router {
        Router {
            head: head.clone(),
            topology: Arc::new(RwLock::new(Arc::new(Topology {
                shards: Vec::new(),
                shard_nodes: Vec::new(),
                node_shards: BTreeMap::new(),
                events: Vec::new(),
                event_nodes: Vec::new(),
                made_from: Vec::new(),
            }))),
            nodes: Default::default(),
            file,
            source: Arc::new(RwLock::new(source)),
            saved: Default::default(),
        }
    }

    /// Where the topology in use came from.
    pub fn source(&self) -> TopologySource {
        self.source.read_even_poisoned().clone()
    }

    async fn start(
        head: &MySqlPool,
        file: Option<Arc<Path>>,
    ) -> Result<Option<Router>, StoreError> {
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
        let router = Router::new(head, file, TopologySource::Head);
        router.install(&placed)?;
        router.event_writer().await?;
        router.save(&placed).await;
        router.spawn_watch();
        Ok(Some(router))
    }

    fn spawn_watch(&self) {
        let watcher = self.clone();
        tokio::spawn(async move { watcher.watch().await });
    }

    /// Save `placed` in the file, when there is one and they changed. A
    /// failure is logged: routing goes on, only a start without the head
    /// would miss it.
    async fn save(&self, placed: &[Placement]) {
        let Some(file) = self.file.clone() else {
            return;
        };
        let head = saved_topology::head_of(&self.head);
        let writer = super::event_ids::known(&head).map(|clock| clock.writer());
        {
            let last = self.saved.lock_even_poisoned();
            if last.0 == placed && last.1 == writer {
                return;
            }
        }
        let saved = SavedTopology {
            saved_at: Utc::now(),
            placements: placed.to_vec(),
            writer,
        };
        let path = file.clone();
        let written =
            tokio::task::spawn_blocking(move || saved_topology::save(&path, &head, &saved)).await;
        match written {
            Ok(Ok(())) => *self.saved.lock_even_poisoned() = (placed.to_vec(), writer),
            Ok(Err(err)) => tracing::warn!(%err, "saving the cluster's topology failed"),
            Err(err) => tracing::warn!(%err, "saving the cluster's topology failed"),
        }
    }

    /// The links the tokens name, each read on its data node; absent tokens
    /// name none. Tokens of one data node share a statement, over the data
    /// tables they lie in (`link_lookups::lookup_many_on_node`); the nodes'
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
        if let [token] = tokens {
            // One token (a redirect's miss at low load): the point select,
            // on this task, as on one server.
            let shard = shard_of(token.as_bytes(), topology.shards.len() as u32);
            let (pool, table) = shard_table(&topology, Some(shard))?;
            let found = link_lookups::lookup_in(&pool, &table, token).await?;
            return Ok(found.map(|link| (*token, link)).into_iter().collect());
        }
        let mut reads = tokio::task::JoinSet::new();
        for (_, batch) in tokens_by_node(&topology, tokens)? {
            reads.spawn(async move {
                link_lookups::lookup_many_on_node(&batch.pool, &batch.tables).await
            });
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

    /// The links the tokens name, as [`Router::lookup_many`], but each data
    /// node on its own: the tokens of a node that fails (or that `down`
    /// names already) come back in the second set, held, and the node is
    /// added to `down`, so one node's outage holds up no other node's
    /// links. A data table moved is followed as there; any other error of
    /// a node is that node's failure.
    pub async fn lookup_held(
        &self,
        tokens: &[Token],
        down: &mut NodesDown,
    ) -> Result<(HashMap<Token, StoredLink>, HashSet<Token>), StoreError> {
        match self.try_lookup_held(tokens, down).await {
            Err(err) if is_missing_table(&err) => {
                self.refresh().await?;
                self.try_lookup_held(tokens, down).await
            }
            outcome => outcome,
        }
    }

    async fn try_lookup_held(
        &self,
        tokens: &[Token],
        down: &mut NodesDown,
    ) -> Result<(HashMap<Token, StoredLink>, HashSet<Token>), StoreError> {
        let topology = self.current();
        let mut held = HashSet::new();
        let mut reads = tokio::task::JoinSet::new();
        for (node, batch) in tokens_by_node(&topology, tokens)? {
            if down.contains(node) {
                held.extend(batch.tokens());
                continue;
            }
            reads.spawn(async move {
                let read = link_lookups::lookup_many_on_node(&batch.pool, &batch.tables).await;
                (
                    node,
                    read.map_err(|err| (err, batch.tokens().collect::<Vec<_>>())),
                )
            });
        }
        let mut found = HashMap::with_capacity(tokens.len());
        let mut moved = None;
        while let Some(part) = reads.join_next().await {
            let (node, part) = part.map_err(|err| {
                StoreError::Refused(format!("a routed lookup task failed: {err}"))
            })?;
            match part {
                Ok(links) => found.extend(links),
                Err((err, _)) if is_missing_table(&err) => moved = Some(err),
                Err((err, tokens)) => {
                    if down.insert(node) {
                        tracing::warn!(%err, node = %self.node_name(node), "a data node failed: its events wait in the journal");
                    }
                    held.extend(tokens);
                }
            }
        }
        match moved {
            Some(err) => Err(err),
            None => Ok((found, held)),
        }
    }

    /// Change a new event's id, when needed, so that its `events`
    /// partition lies on the data node holding the link of `token` (its
    /// virtual shard's): a hit then needs one node, for the replay's link
    /// read and its event write, and a node's outage holds back the events
    /// of that node's links only. Only random bits below the version-7
    /// counter change (`key_partition::place_on`). Left as it is while
    /// the topology is unknown.
    pub fn place_event(&self, token: &[u8; 16], event_id: &mut [u8; 16]) {
        let topology = self.topology.read_even_poisoned();
        let shards = topology.shard_nodes.len() as u32;
        if let Some(&node) = topology.shard_nodes.get(shard_of(token, shards) as usize) {
            place_on(event_id, &topology.event_nodes, node);
        }
    }

    /// A data node's address for logs (user@host:port/database).
    pub(super) fn node_name(&self, node: usize) -> String {
        let nodes = self.nodes.lock_even_poisoned();
        nodes
            .get(node)
            .map_or_else(|| format!("#{node}"), |(at, _)| at.to_string())
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
        let changed = fingerprint(&placed) != self.current().made_from;
        if changed {
            self.install(&placed)?;
            tracing::info!("the cluster's topology changed; link lookups follow it");
        }
        let was_saved = {
            let mut source = self.source.write_even_poisoned();
            let was_saved = *source != TopologySource::Head;
            *source = TopologySource::Head;
            was_saved
        };
        if was_saved {
            tracing::info!(
                "the head answers again: link lookups use the cluster topology read from it"
            );
        }
        self.save(&placed).await;
        Ok(changed)
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

    /// The event id clock of this server on this head: the writer number
    /// kept in the saved file when there is one (a restart keeps its
    /// number), else one reserved on the head.
    async fn event_writer(&self) -> Result<(), StoreError> {
        let head = saved_topology::head_of(&self.head);
        if super::event_ids::known(&head).is_some() {
            return Ok(());
        }
        if let Some(file) = self.file.clone() {
            let name = head.clone();
            let loaded =
                tokio::task::spawn_blocking(move || saved_topology::load(&file, &name)).await;
            if let Ok(Ok(Some(SavedTopology {
                writer: Some(writer),
                ..
            }))) = loaded
            {
                super::event_ids::adopt(&head, writer);
                return Ok(());
            }
        }
        super::event_ids::event_clock(&self.head).await.map(drop)
    }

    /// The head this router reads its topology from.
    pub(super) fn head(&self) -> &MySqlPool {
        &self.head
    }

    /// Per head partition of `events`, in order: its data node, its pool
    /// and its data table.
    pub(super) fn event_placement(&self) -> EventPlacement {
        let topology = self.current();
        EventPlacement {
            tables: topology
                .events
                .iter()
                .zip(&topology.event_nodes)
                .map(|((pool, table), node)| (*node, pool.clone(), table.clone()))
                .collect(),
        }
    }

    fn install(&self, placed: &[Placement]) -> Result<(), StoreError> {
        let links: Vec<&Placement> = placed.iter().filter(|p| p.table == "links").collect();
        let mut shards = Vec::with_capacity(links.len());
        let mut shard_nodes = Vec::with_capacity(links.len());
        let mut node_shards: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
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
            let (node, pool) = self.node_pool(&p.node)?;
            shards.push((pool, p.data_table.clone()));
            shard_nodes.push(node);
            node_shards.entry(node).or_default().push(n as u32);
        }
        let mut events = Vec::new();
        let mut event_nodes = Vec::new();
        for p in placed.iter().filter(|p| p.table == "events") {
            let (node, pool) = self.node_pool(&p.node)?;
            events.push((pool, p.data_table.clone()));
            event_nodes.push(node);
        }
        let topology = Arc::new(Topology {
            shards,
            shard_nodes,
            node_shards,
            events,
            event_nodes,
            made_from: fingerprint(placed),
        });
        *self.topology.write_even_poisoned() = topology;
        Ok(())
    }

    /// The number (kept across topology changes) and the lookup pool of a
    /// data node, the pool made (connecting lazily) once.
    fn node_pool(&self, node: &NodeAddress) -> Result<(usize, MySqlPool), StoreError> {
        let mut nodes = self.nodes.lock_even_poisoned();
        if let Some((n, (_, pool))) = nodes.iter().enumerate().find(|(_, (at, _))| at == node) {
            return Ok((n, pool.clone()));
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
        Ok((nodes.len() - 1, pool))
    }
}

/// Where events go, as [`Router::event_placement`] gives it.
pub(super) struct EventPlacement {
    /// Per head partition of `events`: its node, the node's pool, the data table.
    pub tables: Vec<(usize, MySqlPool, String)>,
}

/// The data nodes that failed lately, for the journal replay: the events
/// their links or data tables hold wait in the journal, and the replay
/// asks those nodes nothing more until [`NodesDown::forget_older_than`]
/// lets them be tried again (a dead node's connect can take the pool's
/// acquire timeout each time).
#[derive(Debug, Default)]
pub struct NodesDown(std::collections::BTreeMap<usize, std::time::Instant>);

impl NodesDown {
    pub fn contains(&self, node: usize) -> bool {
        self.0.contains_key(&node)
    }

    /// Note `node` as failed now; true when it was not noted before.
    pub fn insert(&mut self, node: usize) -> bool {
        self.0.insert(node, std::time::Instant::now()).is_none()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Try again the nodes noted more than `age` ago.
    pub fn forget_older_than(&mut self, age: Duration) {
        self.0.retain(|_, since| since.elapsed() <= age);
    }
}

/// One data node's part of a batch, as `link_lookups::lookup_many_on_node`
/// reads it.
struct NodeBatch {
    pool: MySqlPool,
    /// Every data table of the node, in order, with the batch's tokens
    /// whose links it holds (often none).
    tables: Vec<(String, Vec<Token>)>,
}

impl NodeBatch {
    fn tokens(&self) -> impl Iterator<Item = Token> + '_ {
        self.tables
            .iter()
            .flat_map(|(_, tokens)| tokens.iter().copied())
    }
}

/// The tokens grouped by the data node that holds their links, and on it
/// by virtual shard (data table); only the nodes holding some of them.
fn tokens_by_node(
    topology: &Topology,
    tokens: &[Token],
) -> Result<BTreeMap<usize, NodeBatch>, StoreError> {
    let count = topology.shards.len() as u32;
    let mut by_shard: HashMap<u32, Vec<Token>> = HashMap::new();
    for token in tokens {
        by_shard
            .entry(shard_of(token.as_bytes(), count))
            .or_default()
            .push(*token);
    }
    let mut by_node = BTreeMap::new();
    for (&node, shards) in &topology.node_shards {
        if !shards.iter().any(|shard| by_shard.contains_key(shard)) {
            continue;
        }
        let mut batch = NodeBatch {
            pool: shard_table(topology, shards.first().copied())?.0,
            tables: Vec::with_capacity(shards.len()),
        };
        for &shard in shards {
            let (_, table) = shard_table(topology, Some(shard))?;
            batch
                .tables
                .push((table, by_shard.remove(&shard).unwrap_or_default()));
        }
        by_node.insert(node, batch);
    }
    if let Some(shard) = by_shard.into_keys().next() {
        // Every shard of `shard_of` has a node in an installed topology.
        return Err(StoreError::Refused(format!(
            "virtual shard {shard} has no data node"
        )));
    }
    Ok(by_node)
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
        .map(|p| (p.data_table.clone(), p.node.to_string()))
        .collect()
}

pub(super) fn is_missing_table(err: &StoreError) -> bool {
    match err {
        StoreError::Sqlx(err) => mysql_error_number(err) == Some(NO_SUCH_TABLE),
        _ => false,
    }
}
