//! [`NodeFailure`]: a data node that failed while the others were done,
//! as `partitions` on a cluster reports it. Apart from the cluster's code
//! because [`StoreError`](crate::store::StoreError) carries it.

use super::node_address::NodeAddress;
use std::fmt;

/// A node that failed while the others were done.
#[derive(Debug, Clone)]
pub struct NodeFailure {
    pub server: String,
    pub node: NodeAddress,
    pub error: String,
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "data node {} ({}): {}",
            self.server, self.node, self.error
        )
    }
}
