//! Daily RANGE partitions of `links` and `events`: list, plan, ensure, rotate.
//!
//! A partition named `pYYYYMMDD` holds the rows of that UTC day. Planning is
//! pure (see [`plan`]) so it is tested without a database; applying a plan
//! runs one `ALTER TABLE` per table and kind of change, under a `GET_LOCK`
//! so only one runner alters the tables at a time.
//!
//! # Layout
//!
//! * `days`: naming and planning the days, and the DDL text of a plan;
//! * `one_server`: reading and applying the plans on one server;
//! * `every_node`: the same on every data node of a Spider cluster;
//! * `report`: what a run did to each table;
//! * `commands`: list, ensure and rotate, on one server or every node.

mod commands;
mod days;
mod every_node;
mod one_server;
pub(crate) mod report;

pub use commands::{ensure_ahead, list, refusals, run, run_each_node};
pub use days::{
    partition_name, plan, Partition, Policy, TablePlan, DEFAULT_AHEAD_DAYS, DEFAULT_KEEP_DAYS,
    PARTITIONED_TABLES,
};
pub use every_node::{list_all, DataTableDays};
pub use one_server::RunOptions;
pub use report::{PartitionRun, TableReport};
