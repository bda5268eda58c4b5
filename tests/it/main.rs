//! Integration tests against a real MariaDB/MySQL server. One binary (this
//! file and its modules) keeps link time down; each test uses its own
//! database, so they run in parallel.

mod build;
mod common;
mod links;
mod partitions;
mod stats;
mod stats_http;
mod stats_live;
