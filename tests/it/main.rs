//! Integration tests against a real MariaDB/MySQL server. One binary (this
//! file and its modules) keeps link time down; each test uses its own
//! database, so they run in parallel.
#![allow(clippy::unwrap_used)] // tests and benchmarks: a failure should stop them loudly

mod acme;
mod admin_listener;
mod amqp;
mod bad_input;
mod bounces;
mod build;
mod common;
mod credentials;
mod dashboard_limits;
mod dashboard_sessions;
mod db_down;
mod delivery;
mod demo;
mod deploy;
mod domains;
mod expired_links;
mod export;
mod filters;
mod first_hour;
mod first_run;
mod guessing;
mod held_events;
mod hot_path;
mod image_proxy;
mod journal_full;
mod links;
mod mailing_ids;
mod messages;
mod partitions;
mod platform_exports;
mod privacy;
mod row_format;
mod seal_keys;
mod server_crash;
mod server_journal;
mod server_outages;
mod server_routes;
mod server_shutdown;
mod slow_clients;
mod smtp_sessions;
mod spider_grow;
mod spider_migrate;
mod spider_serve;
mod stats;
mod stats_http;
mod stats_live;
mod suppressions;
mod token_kinds;
mod tracking_modes;
mod verdicts;
mod webhooks;
mod wiring;
