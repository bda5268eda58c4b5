//! A MariaDB Spider cluster: `links` and `events` sharded over data nodes.
//!
//! `DATABASE_URL` is the head, `LINKTRACK_SHARDS` the data nodes. On the head
//! `links` and `events` are Spider tables with an odd number of partitions
//! ("virtual shards"), each pointing at a data table of its own (`links_00`,
//! `events_00`, …) on one node: several head partitions on the same data
//! table return wrong results. `links` is `PARTITION BY LIST (shard)`, the
//! shard written by linktrack from the token ([`shard_of`]), so linktrack can
//! route a lookup by itself ([`Router`]); heads made before that keep
//! `PARTITION BY KEY (uuid)`. `events` is `PARTITION BY KEY (event_id)`.
//! Every other table (stats, suppressions, sequences, …) is a plain InnoDB
//! table on the head. Each data table is today's single-server table (daily
//! RANGE partitions), made with `CREATE TABLE … LIKE` from the template the
//! ordinary migrations create in each node's database.
//!
//! Ids: linktrack gives every row its id, never the column default (a
//! MariaDB SEQUENCE default crashed the head): links from the head's
//! `sequences` table (`ids`), events from the server's own clock
//! (`event_ids`, no head needed): unique across the data tables, increasing
//! in insertion order, so the rollup's per-day watermark on `events.id`
//! works unchanged.
//!
//! Events are written by the journal replay straight to the data table the
//! head's KEY (`event_id`) partitioning names (`key_partition`,
//! `event_writes`), so events are stored while the head is down. A hit's
//! event id is chosen so that its partition lies on the node of its link
//! (`Router::place_event`), and the replay holds back only a failed
//! node's events (`NodesDown`): the other nodes' are stored meanwhile.
//!
//! The head knows the topology: its partition comments name a Spider server
//! and a data table, and `mysql.servers` holds each server's address. The
//! partition commands read it there ([`placements`]), so the builder, the
//! journal replay and `partitions ensure` need nothing but the head's URL.
//!
//! # Layout
//!
//! * this file: declares the files and re-exports what callers name;
//! * `topology`: which node and data table hold each head partition, and
//!   whether a server is a head;
//! * `node_failure`: a node that failed while the others were done;
//! * `node`: a data node's address (`LINKTRACK_SHARDS` entries);
//! * `migrate`: `migrate --shards`, which creates or checks the cluster;
//! * `ids`: ids (and shards) of the rows written through the head;
//! * `event_ids`: event ids made by each server (time, writer, counter);
//! * `key_partition`: MariaDB's KEY partition of an `event_id`, and an
//!   `event_id` placed on a node;
//! * `event_writes`: the replay's event inserts, straight to the nodes,
//!   each node on its own;
//! * `shard`: the shard function; `routing`: lookups past the head;
//! * `saved_topology`: the last topology read, in a file beside the
//!   journal, for a server started while the head is down;
//! * `status`: `shards status`, each node's reachability, rows and days.

mod event_ids;
mod event_writes;
mod ids;
mod key_partition;
mod migrate;
mod node;
mod routing;
mod saved_topology;
mod shard;
mod status;
mod topology;

pub use super::mysql_errors::SPIDER_REMOTE_ERRORS;
pub use super::node_failure::NodeFailure;
pub use event_ids::{event_clock, EventIdClock, EVENT_WRITERS, WRITERS};
pub use event_writes::EventsWritten;
pub use ids::{head_writes, HeadWrites, IdBlocks, LinkLayout, EVENT_IDS, LINK_IDS};
pub use key_partition::key_partition;
pub use migrate::{migrate, ClusterMigrate, DEFAULT_VIRTUAL_SHARDS};
pub use node::{parse_shards, NodeAddress};
pub use routing::{NodesDown, Router, TopologySource, REFRESH_EVERY};
pub use saved_topology::{SavedTopology, SavedTopologyError, FILE_NAME as TOPOLOGY_FILE};
pub use shard::shard_of;
pub use status::{node_status, Held, NodeStatus};
pub(crate) use topology::{by_node, servers};
pub use topology::{data_table, is_head, placements, server_name, Placement, SHARDED_TABLES};
