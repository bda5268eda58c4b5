//! Integration tests against a real MariaDB/MySQL server. One binary (this
//! file and its modules) keeps link time down; each test uses its own
//! database, so they run in parallel.
#![allow(clippy::unwrap_used)] // tests and benchmarks: a failure should stop them loudly

mod amqp;
mod build;
mod cluster;
mod common;
mod delivery;
mod demo;
mod first_hour;
mod hot_path;
mod image_proxy;
mod links;
mod messages;
mod partitions;
mod row_format;
mod server;
mod server_crash;
mod slow_clients;
mod spider;
mod stats;
mod stats_http;
mod stats_live;
mod suppressions;
mod token_kinds;
mod webhooks;
mod wiring;
