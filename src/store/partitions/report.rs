//! [`TableReport`]: what a run did (or, with `dry_run`, would do) to one
//! table, as `partitions ensure` and `rotate` print it, and a run's
//! [`PartitionRun`]: the reports of the nodes that were done and the nodes
//! that failed. Apart from the runs, which return them.

use super::days::{partition_name, TablePlan};
use crate::store::error::StoreError;
use crate::store::node_failure::NodeFailure;
use std::fmt;

/// What a run did on every node it reached, and the nodes it could not:
/// on one server, `failed` is empty.
#[derive(Debug, Clone, Default)]
pub struct PartitionRun {
    pub done: Vec<TableReport>,
    pub failed: Vec<NodeFailure>,
}

impl PartitionRun {
    /// The reports, or the failed nodes as the error when any failed: for
    /// callers that need every node done (the builder, the replay).
    pub fn into_result(self) -> Result<Vec<TableReport>, StoreError> {
        if self.failed.is_empty() {
            Ok(self.done)
        } else {
            Err(StoreError::NodesFailed {
                failed: self.failed,
            })
        }
    }
}

/// What a run did (or, with `dry_run`, would do) to one table.
#[derive(Debug, Clone)]
pub struct TableReport {
    /// The data node (its Spider server name) on a cluster.
    pub node: Option<String>,
    pub plan: TablePlan,
    pub statements: Vec<String>,
    pub applied: bool,
    /// Why the plan's drops were held back (more than `--max-drop`
    /// without `--force`): the days ahead were added all the same.
    pub refused: Option<String>,
}

impl fmt::Display for TableReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = match &self.node {
            Some(node) => format!("{node} {}", self.plan.table),
            None => self.plan.table.clone(),
        };
        if let Some(refusal) = &self.refused {
            write!(f, "{table}: {refusal}")?;
            if self.plan.is_empty() {
                return Ok(());
            }
            writeln!(f)?;
        } else if self.plan.is_empty() {
            return write!(f, "{table}: nothing to do: every day in the window has a partition and none has expired");
        }
        let verb = |done: &str, dry: &str| {
            if self.applied {
                done.to_owned()
            } else {
                dry.to_owned()
            }
        };
        let mut lines = Vec::new();
        for p in &self.plan.drop {
            lines.push(format!(
                "{table}: {} partition {} (days through {}, ~{} rows): older than the retention window",
                verb("dropped", "would drop"),
                p.name,
                p.last_day(),
                p.approx_rows
            ));
        }
        for day in &self.plan.add {
            lines.push(format!(
                "{table}: {} partition {} for {day}: inside the look-ahead window",
                verb("added", "would add"),
                partition_name(*day)
            ));
        }
        if !self.applied {
            for statement in &self.statements {
                lines.push(format!("{table}: dry run, not executed: {statement};"));
            }
        }
        write!(f, "{}", lines.join("\n"))
    }
}
