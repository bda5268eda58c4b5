//! Moving a data table of a Spider cluster to another node (`linktrack
//! shards move`, `linktrack shards rebalance`): how a cluster grows.
//!
//! One move, of `links_07` from node A to node B:
//!
//! 1. B gets an empty `links_07` made from A's `SHOW CREATE TABLE` (the same
//!    columns, row format and day partitions), and the head a spare Spider
//!    table `links_moving`: the head's `links` with that one partition's
//!    comment naming B.
//! 2. **Writes pause**: `FLUSH TABLES links WITH READ LOCK` on the head. It
//!    blocks every write to the head's `links` (all its data tables, not
//!    only the moving one) at the head's metadata lock; lookups and
//!    redirects go on. Writers wait, they do not fail: the builder's batch
//!    continues when the pause ends. An `events_NN` table is also locked
//!    on A (`LOCK TABLES … WRITE`) from here to step 5: the journal replay
//!    writes events straight to the nodes, past the head's pause; its
//!    insert waits there, finds the table renamed (1146) and writes where
//!    the head's new topology says.
//! 3. The rows are copied from A to B in primary-key order, then checked:
//!    row count and `CHECKSUM TABLE` must be equal on both.
//! 4. A second head connection queues `RENAME TABLE links TO links_retired,
//!    links_moving TO links`; once it waits on the lock, the pause ends. A
//!    queued exclusive lock is granted before the writers that waited
//!    behind the pause, so no write reaches A's copy after it was copied
//!    (checked: A's row count is compared again afterwards).
//! 5. The retired Spider table is dropped (a Spider table holds no rows;
//!    dropping it drops nothing on the nodes) and A's copy is renamed to
//!    `moved_links_07`: kept, outside the cluster, until the operator drops
//!    it (`ALTER TABLE … RENAME` for a locked `events_NN`, then unlocked).
//!    Nothing is ever dropped on a data node.
//!
//! A failure before step 4 leaves the head reading A, as before; B's
//! partial copy is named in the error (drop it, run again).
//!
//! # Layout
//!
//! * `one_move`: one move, step by step, and what it did;
//! * `prepare`: step 1, the new node's empty table and the head's spare
//!   Spider table;
//! * `copy`: step 3, the rows copied and checked;
//! * `swap`: steps 2, 4 and 5, the pause, the rename queued behind it, and
//!   the old copy retired;
//! * `tables`: what a move asks a server about one table;
//! * `rebalance`: the plan of moves that evens out the nodes.

mod copy;
mod one_move;
mod prepare;
mod rebalance;
mod swap;
mod tables;

pub use one_move::{move_table, resolve_node, MoveOutcome, Moved};
pub use rebalance::rebalance_plan;
