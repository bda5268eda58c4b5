//! linktrack: email-newsletter link tracking.
//!
//! A platform that sends tens of millions of letters a day runs linktrack in
//! three places: the batch letter builder (`linktrack build`), the tracking
//! HTTP server (`linktrack serve`) and the daily partition cron
//! (`linktrack partitions rotate`). The contracts users script against
//! (token, URLs, command line, file formats) are in the README.
//!
//! # Storage design
//!
//! Every tracked link is one row in `links`, keyed by an AUTO_INCREMENT id so
//! inserts append to the clustered index, with `UNIQUE (uuid, inserted)` and
//! one RANGE partition per UTC day. The token ([`token::Token`]) carries its
//! creation time in UUIDv7 layout, so a lookup names its day and reads exactly
//! one partition, and expired days are dropped with `DROP PARTITION`.
//!
//! # Layout
//!
//! * [`token`]: the tracking token: new, parse, date.
//! * [`config`]: command line and environment settings.
//! * [`cli`]: runs each subcommand (the binary in `main.rs` only parses).
//! * [`demo`]: `linktrack demo`, the whole loop on the compiled-in fixtures.
//! * [`store`]: every SQL statement: pool, migrations, links, events,
//!   partitions, suppressions, sequences.
//! * [`letter`]: one letter's HTML: personalise (minijinja), rewrite links
//!   byte-exactly, add the open pixel.
//! * [`build`]: the batch job: mailing and recipients in, letters out.
//! * [`address`]: address normalisation and validation.
//! * [`server`]: `linktrack serve`, the tracking HTTP server.
//! * [`events`]: the event journal, its replay into `events`, bot verdicts.
//! * [`store::stats`]: the exactly-once rollup of `events` into small
//!   per-mailing tables, and the reads behind the stats API.
//! * [`live`]: the optional Redis live layer (counters, recent clicks, top
//!   links, per-tag letter sets for segments).
//! * [`server::stats`]: the stats API and the dashboard (axum router).

pub mod address;
pub mod build;
pub mod cli;
pub mod config;
pub mod demo;
pub mod events;
pub mod kind;
pub mod letter;
pub mod live;
pub mod server;
pub mod store;
pub mod token;
