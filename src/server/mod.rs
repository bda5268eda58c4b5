//! `linktrack serve`: the tracking HTTP server. How to run and watch it:
//! `docs/serve.md`.
//!
//! Its files are listed in the crate docs' Layout (`src/lib.rs`).

pub mod api;
pub mod app;
pub(crate) mod error;
pub mod geoip;
pub mod guesses;
pub(crate) mod handlers;
pub mod health_gauges;
pub(crate) mod hits;
pub mod hook_settings;
pub mod hooks;
pub(crate) mod hosts;
pub mod image;
pub mod link_rules;
pub mod listen;
pub(crate) mod lookups;
pub(crate) mod metrics;
pub mod offline_targets;
pub(crate) mod pages;
pub(crate) mod request;
mod router;
mod serve_error;
mod shutdown;
pub mod state;
pub mod stats;
pub(crate) mod well_known;

pub use app::{App, AppSettings, TlsSettings, FOLLOW_EVERY};
pub use router::serve_demo_images;
pub use serve_error::ServeError;
pub use shutdown::shutdown_signal;
