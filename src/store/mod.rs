//! MySQL / MariaDB: the pool, migrations, and every SQL statement the service
//! runs. Nothing outside this module writes SQL.
//!
//! This file only declares the files and re-exports what callers name as
//! `store::X`: the error (`error.rs`), connecting (`connect.rs`), the
//! migrations (`migrations.rs`), row formats (`row_format.rs`).

mod address_key;
pub mod address_list;
pub mod api_keys;
pub(crate) mod big_tables;
pub mod bot_reason;
pub mod bounces;
pub mod breakdowns;
mod change_log;
pub mod cluster;
mod connect;
pub(crate) mod connect_error;
pub mod dashboard_sessions;
pub mod deliveries;
pub mod engagement;
pub mod erase;
mod error;
mod error_kind;
pub mod event_feed;
mod event_sql;
pub mod events;
mod in_list;
mod link_lookups;
pub mod link_rules;
pub mod link_templates;
pub mod links;
pub mod maintenance;
mod migrations;
mod mysql_errors;
mod node_address;
mod node_failure;
pub mod outbox;
pub mod partitions;
pub mod privacy;
pub mod provider_tokens;
pub mod recent_hits;
pub mod repoint;
pub mod rolled_batch;
pub mod rollup;
pub mod row_format;
pub mod seal_keys;
pub mod segments;
pub mod sequences;
pub mod shard_move;
pub mod stats;
pub mod suppressions;
mod tally;
pub mod tls_certificates;
pub mod tracking_domains;
pub mod tracking_optouts;
pub mod verdicts;

pub use connect::{connect, connect_lazy, mysql_url, ping, side_pool, PoolSettings};
pub use error::StoreError;
pub use migrations::{applied_migrations, migrate, MIGRATOR};
pub use mysql_errors::RETRYABLE_MYSQL_ERRORS;
pub use node_address::NodeAddressError;
pub use row_format::{set_row_format, RowFormat, RowFormatOptions, DEFAULT_ROW_FORMAT};
