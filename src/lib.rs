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
//! * [`token`] (`src/token.rs`): the tracking token: new, parse, date.
//! * `timestamp` (`src/timestamp.rs`): an event's UTC time as fixed-width
//!   digits, for the journal line and the replay's insert.
//! * [`kind`]: [`kind::LinkKind`] and [`kind::EventKind`], the one spelling
//!   of every kind (database ENUM, journal, API, Redis counter names).
//! * [`config`]: command line and environment settings (clap stops here).
//! * [`cli`]: runs each subcommand (the binary in `main.rs` only parses).
//! * [`demo`]: `linktrack demo`, the whole loop on the compiled-in fixtures.
//! * [`error_report`]: how the binary prints a fatal error (each cause once).
//! * [`store`]: every SQL statement: pool, migrations, links, events,
//!   suppressions, sequences; partition DDL in `src/store/partitions.rs`;
//!   connection failures said with target and hint in
//!   `src/store/connect_error.rs`;
//!   a MariaDB Spider cluster (`LINKTRACK_SHARDS`: migrate, topology,
//!   per-node partitions) in `src/store/cluster/`; moving a data table
//!   to another node (`shards move|rebalance`) in `src/store/shard_move.rs`;
//!   the rollup's SQL in `src/store/rollup.rs`; stats reads in
//!   `src/store/stats.rs`; segment lookups in `src/store/segments.rs`.
//! * [`letter`]: one letter's HTML: personalise (minijinja), rewrite links
//!   byte-exactly (`src/letter/rewrite.rs`), add the open pixel; a mailing
//!   compiled once into fixed text and slots (`src/letter/plan.rs`).
//! * [`build`]: the batch job: mailing and recipients in, letters out;
//!   `build::compose` composes one letter, `build::reject` names why a
//!   recipient gets none, `src/build/output.rs` writes the letters and the
//!   rejects file, `src/build/progress.rs` draws the progress bar.
//! * [`address`]: address normalisation and validation.
//! * [`server`]: `linktrack serve`: [`server::App`] (`src/server/app.rs`) is
//!   the one wiring (listeners, event pipeline, background workers, ordered
//!   shutdown); connections are served with limits by `src/server/listen.rs`;
//!   the redirect is `click` in `src/server/handlers.rs`, its cache misses
//!   shared by `src/server/lookups.rs`;
//!   `/metrics` and `/readyz` are on the admin listener.
//! * [`events`]: the event journal (`src/events/journal.rs`, its versioned
//!   line in `src/events/record.rs`), its replay into `events`, bot verdicts.
//! * [`rollup`]: the rollup worker loop (`src/rollup.rs`): roll `events`
//!   into the statistics tables, then publish to Redis.
//! * [`live`]: the optional Redis live layer (counters, recent clicks, top
//!   links, per-tag letter sets for segments).
//! * [`server::stats`]: the stats API and the dashboard (axum router).
//! * [`delivery`]: each letter as a complete RFC 5322 message
//!   (`src/delivery/message.rs`), delivered over SMTP (`src/delivery/smtp.rs`)
//!   and recorded per letter so a re-run delivers nothing twice.
//! * [`outbound`]: events out, at least once: the replay enqueues each
//!   event for every matching endpoint in `outbox` (`src/store/outbox.rs`);
//!   a sender per endpoint (`src/outbound/dispatch.rs`, a worker started in
//!   `src/server/app.rs`) delivers signed Standard Webhooks POSTs
//!   (`src/outbound/webhook.rs`, `src/outbound/signature.rs`); the payload
//!   in `src/outbound/payload.rs`, the endpoints and their settings in
//!   `src/outbound/endpoints.rs`; senders run at low priority with a pool
//!   of their own (`Workers::spawn_low_priority` in
//!   `src/server/workers.rs`); `src/outbound/registry.rs` warns when the
//!   servers' endpoints differ; `linktrack webhooks list|test|replay`.

pub mod address;
pub mod bots;
pub mod builder;
pub mod cli;
pub mod delivery;
pub mod demo;
pub mod error_report;
pub mod event;
pub mod events;
pub mod kind;
pub mod letter;
pub mod live;
pub mod outbound;
pub mod payload;
pub mod rollup;
pub mod server;
pub mod settings_file;
pub mod store;
pub(crate) mod timestamp;
pub mod token;
pub mod workers;
