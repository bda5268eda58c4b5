//! linktrack: email-newsletter link tracking.
//!
//! A platform that sends tens of millions of letters a day runs linktrack in
//! three places: the batch letter builder (`linktrack build`), the tracking
//! HTTP server (`linktrack serve`) and the daily partition cron
//! (`linktrack partitions rotate`). The contracts users script against
//! (token, URLs, command line, file formats) are in docs/ (the README
//! points to each).
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
//! The one description of where things are (the README links here). The
//! modules are listed from the ground up, in layers: **a module uses only
//! the modules listed before it** (its own files aside). A test
//! (`layers::lower_modules_never_import_higher_ones`) reads this list and
//! every `crate::` path of `src/` and fails on an import that points up, so
//! the list cannot drift from the code.
//!
//! Foundations (plain values and plumbing, no SQL, no HTTP):
//! 1. [`kind`]: [`kind::LinkKind`] and [`kind::EventKind`], the one spelling
//!    of every kind (database ENUM, journal, API, Redis counter names).
//! 2. `locks`: a `Mutex` or `RwLock` taken whatever a panicking holder
//!    left behind (each guards data one statement updates).
//! 3. `timestamp`: an event's UTC time as fixed-width digits, for the
//!    journal line and the replay's insert.
//! 4. [`error_report`]: how the binary prints a fatal error (each cause once),
//!    and any error's chain said the same way for logs and records.
//! 5. [`settings_file`]: reading a TOML settings file (pools, endpoints).
//! 6. [`workers`]: background workers and their stop signal, joined in order
//!    at shutdown; the low-priority runtime of the senders and the replay.
//! 7. [`address`]: address normalisation and validation ([`address::Email`]).
//! 8. [`mailing_id`]: [`mailing_id::MailingId`], a mailing's id checked once
//!    where it comes in (file, flag, URL) and carried as its own type.
//! 9. [`destinations`]: which addresses a request made on someone's
//!    behalf may reach (public ones and the networks the operator
//!    names), for the image proxy and events out (SSRF).
//! 10. [`letter`]: one letter's HTML (`letter/mod.rs`): personalise (minijinja,
//!     `letter/personalize.rs`), rewrite links byte-exactly (`letter/rewrite.rs`,
//!     one test per rule of its contract in `rewrite/tests.rs`,
//!     start tags in `start_tag.rs`, character references in `charref.rs`),
//!     a mailing compiled once into fixed text and slots (`letter/plan.rs`),
//!     what a spam filter sees: links that show their own address
//!     (`address_text.rs`), short letters with an image (`short_letter.rs`);
//!     a plain text part's copies of the tracked links (`text_links.rs`);
//!     UTM tags merged into a click's target at the redirect (`utm.rs`);
//!     a personalised link's fields carried into a repointed target
//!     (`link_template.rs`).
//! 11. [`event`]: [`event::EventRow`], one event (click, open, image load,
//!     unsubscribe) as recorded, journaled, stored and sent.
//! 12. [`token`]: the tracking token (`token/mod.rs`, its tests in
//!     `token/tests.rs`), one file per stage: new, parse, date
//!     and the retention check (`token/uuid_v7.rs`), what it seals
//!     (`plaintext.rs`), the seal and its key's fingerprint (`seal.rs`) over
//!     its permutation (`feistel.rs`), the seal key ring (`ring.rs`) and
//!     its policy: what a build, a server or a rotation may open with, and
//!     why not (`ring_policy.rs`, `key_refusal.rs`), the
//!     VERP bounce address (`bounce_address.rs`), the Spider shard
//!     (`virtual_shard.rs`).
//! 13. [`bots`]: human or bot: the first verdict from the request
//!     (`bots/mod.rs`), scanner networks (`networks.rs`, `networks.toml`),
//!     what a user agent says of the reader's mail client and device
//!     (`clients.rs`), the
//!     rule that settles a verdict with the whole letter in view
//!     (`letter_judgement.rs`).
//! 14. [`payload`]: the JSON body every endpoint receives for one event (and
//!     batches of them): a contract, like the token.
//! 15. [`retry`]: one way to retry (attempts, backoff with jitter,
//!     deadline, which errors retry), used by SMTP delivery, events out,
//!     the journal's replay and drain, and the link lookups.
//!
//! Storage:
//! 16. [`store`]: every SQL statement, a file per table or question
//!     (`store/mod.rs` only declares and re-exports):
//!     - plumbing: the error (`error.rs`), its kind for logs (`deadlock`,
//!       `connection_lost`, ... in `error_kind.rs`), the MySQL error
//!       numbers it reads (`mysql_errors.rs`), connection failures said
//!       with target and hint (`connect_error.rs`), the pool
//!       (`connect.rs`), migrations (`migrations.rs`), `IN` lists
//!       (`in_list.rs`), the two big tables and whether this server is a
//!       Spider head for them (`big_tables.rs`), their row formats
//!       (`row_format.rs`), named sequences handed out in blocks
//!       (`sequences.rs`), when maintenance last succeeded
//!       (`maintenance.rs`);
//!     - links and what a click reads: the `links` table (`links.rs`,
//!       its reads below the cluster's routing in `link_lookups.rs`),
//!       token version 2's link templates and seal (`link_templates.rs`),
//!       the seal keys seen, read and recorded as the ring's policy
//!       decides (`seal_keys.rs`), link names, UTM tags and repoints
//!       (`link_rules.rs`) and repointing a sent link (`repoint.rs`);
//!     - hits: the `events` table and the unsubscribe's suppression
//!       (`events.rs`, an insert's statement text in `event_sql.rs`), a verdict's reason as stored (`bot_reason.rs`), the outbox (`outbox.rs`), the events and bounce
//!       decisions after a point, for the API's live stream
//!       (`event_feed.rs`), provider webhook tokens bound to their first
//!       event (`provider_tokens.rs`);
//!     - the rollup: its SQL (`rollup.rs`, `rolled_batch.rs`), verdicts
//!       settled (`verdicts.rs`) by the recent hits they are judged with
//!       (`recent_hits.rs`), a batch read, counted and written in
//!       `store/tally/` (`batch.rs`, `count.rs`, `write.rs`);
//!     - stats reads in `store/stats/`, one file per question: the plain
//!       counts every read fills (`counts.rs`), a mailing's summary
//!       (`summary.rs`), its links (`per_link.rs`), late events
//!       (`late.rs`), time series (`series.rs`), letters (`letters.rs`),
//!       the mailings known (`mailings.rs`); breakdowns by client, device
//!       and country (`breakdowns.rs`); the recipients export's reads
//!       (`engagement.rs`); segments (`segments.rs`);
//!     - people: the address lists (`address_list.rs`): the suppression
//!       list (`suppressions.rs`) and the tracking opt-outs
//!       (`tracking_optouts.rs`); the address key (`address_key.rs`), the
//!       change logs of opt-outs, erasures and suppressions
//!       (`change_log.rs`) beside `privacy.rs`; erasure (`erase.rs`);
//!     - sending and mail back: deliveries per letter (`deliveries.rs`),
//!       bounces and complaints (`bounces.rs`);
//!     - operators: tracking domains per sender (`tracking_domains.rs`) and
//!       their certificates and ACME account (`tls_certificates.rs`),
//!       dashboard sessions (`dashboard_sessions.rs`), API keys
//!       (`api_keys.rs`, their keyed hashes and scopes as stored);
//!     - daily partitions in `store/partitions/`: the days planned
//!       (`days.rs`), the DDL on one server (`one_server.rs`) or on every
//!       Spider node (`every_node.rs`), the commands (`commands.rs`) and
//!       their report (`report.rs`);
//!     - a Spider cluster in `store/cluster/`: its topology
//!       (`topology.rs`), kept in a file for a start without the head
//!       (`saved_topology.rs`), reaching a node (`node.rs`), the shard
//!       function (`shard.rs`), routing
//!       lookups past the head (`routing.rs`), ids and shards of written
//!       rows (`ids.rs`), event ids made by each server (`event_ids.rs`),
//!       MariaDB's KEY partition of an event (`key_partition.rs`), the
//!       replay's event inserts straight to the nodes (`event_writes.rs`),
//!       `migrate --shards` (`migrate.rs`), `shards status`
//!       (`status.rs`); beside the folder, as plain data the store's
//!       error carries: a node's address (`node_address.rs`) and its
//!       failure (`node_failure.rs`);
//!     - moving a data table to another node in `store/shard_move/`: one
//!       move step by step (`one_move.rs`): prepare (`prepare.rs`), copy
//!       (`copy.rs`), swap (`swap.rs`), what a move asks about a table
//!       (`tables.rs`); the rebalance plan (`rebalance.rs`).
//!
//! Services (each runs beside a job, on the store):
//! 17. [`live`]: the optional Redis live layer (counters, recent clicks, top
//!     links, per-tag letter sets for segments).
//! 18. [`privacy`]: what every server holds in memory (`privacy/mod.rs`) about people's
//!     choices: the opt-out list and the erasures as fingerprints, kept
//!     current from the change log, checked on every hit and by the
//!     journal replay; and `erase` across servers, tables and Redis
//!     (`privacy/erase.rs`); how often the view is refreshed and how long
//!     a server counts as alive (`settings.rs`).
//! 19. [`domains`]: a tracking domain's DNS checked (its CNAME or
//!     addresses point at this service), with the system's resolver or a
//!     given name server.
//! 20. [`acme`]: automatic TLS for the tracking domains: certificates
//!     ordered from an ACME directory (HTTP-01, `acme/order.rs`), renewed
//!     before they end (`certificate.rs`), served by SNI from the table
//!     the certificate worker keeps (`acme/mod.rs`); where and how often
//!     they are ordered (`settings.rs`).
//! 21. [`delivery`]: sending mechanics (`delivery/mod.rs`): each letter as a
//!     complete RFC 5322 message (`delivery/message.rs`), its MIME parts'
//!     bodies encoded from the mailing's plan (`body.rs`, checked against
//!     lettre's in `body_tests.rs`); SMTP sessions with pipelining and
//!     retries (`smtp/`): one session (`smtp/connection.rs`), its replies
//!     (`reply.rs`), where an SMTP URL points (`target.rs`), the dot
//!     transparency of `DATA` (`transparency.rs`); the pools file
//!     (`pools.rs`), the per-letter ledger (`ledger.rs`) and the delivery
//!     log file (`log_file.rs`), the run's delivered, retried and refused
//!     counts (`counters.rs`).
//! 22. [`bounces`]: mail that comes back (`bounces/mod.rs`): where
//!     `bounces ingest` reads messages (`sources.rs`); a message read
//!     whatever its form (`read.rs`): bounces, complaints and
//!     auto-replies (`bounces/parse.rs`, text bounces in `text.rs`,
//!     the bare address both read in `bare_address.rs`) into a report
//!     (`report.rs`), said without acting on it (`reading.rs`), the
//!     failure's reason in the reference parsers' words (`reasons.rs`),
//!     classified (`classify.rs`, docs/bounces.md's table),
//!     matched to their letter through the VERP token or `deliveries` and
//!     acted on (`ingest.rs`, soft bounces counted by `soft_policy.rs`,
//!     decisions sent on through `events_out.rs`); providers' events (SES,
//!     Mailgun) read into the same report (`providers.rs`); the bounce
//!     mailbox read over IMAP or POP3 (`bounces/mailbox/`: its address
//!     (`address.rs`), the connection both share (`connect.rs`), the IMAP
//!     (`imap.rs`) and POP3 (`pop3.rs`) sessions, one pass over a mailbox
//!     (`pass.rs`), its errors (`mailbox/error.rs`)); vendors'
//!     own phrase tables, known by their headers (`vendors.rs`).
//! 23. [`journal`]: the event journal (`journal/mod.rs`): its segment files
//!     (`journal/segments.rs`), its versioned line (`line.rs`), the fallback
//!     queue when it cannot write (`fallback.rs`) and its drain
//!     (`drain.rs`), the replay into the `events` table (`replay.rs`), which
//!     hands each batch to the [`journal::OutboxSink`] it is given
//!     (`outbox_sink.rs`) and takes the link rows the server's lookups
//!     read from memory instead of reading them again (`readers.rs`).
//! 24. [`outbound`]: events out, at least once (`outbound/mod.rs`): the outbox sink (queues each
//!     event for every matching endpoint), a sender per endpoint
//!     (`outbound/dispatch.rs`) of signed Standard Webhooks POSTs
//!     (`webhook.rs`, `signature.rs`) or AMQP messages (`amqp.rs`), the
//!     endpoints (`endpoints.rs`) made from the command line's settings
//!     (`settings.rs`), the configured set every part is handed
//!     (`configured.rs`) with its retry policy (`retry_policy.rs`) and the
//!     hold of events until their verdicts settle (`hold.rs`), the registry
//!     that warns when servers' endpoints differ (`registry.rs`).
//! 25. [`rollup_worker`]: the rollup worker loop: roll `events` into the statistics
//!     tables, then publish to Redis.
//! 26. [`api_keys`]: API keys (`api_keys/mod.rs`) and their scopes ([`api_keys::Scope`], one
//!     spelling each, `scope.rs`), a key's text and keyed hash
//!     (`secret.rs`), making one (`manage.rs`), and the one check of a
//!     presented key or `LINKTRACK_API_TOKEN` with its short cache
//!     ([`api_keys::KeyVerifier`], `verifier.rs`) the API and the relay call.
//!
//! Jobs (what the commands run):
//! 27. [`builder`]: `linktrack build`, the batch job, a file per stage a
//!     letter passes through (`builder/mod.rs` only wires them): the
//!     options (`options.rs`), the summary (`summary.rs`) and the error
//!     (`error.rs`); the mailing read and made ready (`mailing.rs`,
//!     `mailing_setup.rs`); the recipients read (`recipients.rs` opens the
//!     file, `recipient_lines.rs` reads its JSON or CSV lines with
//!     `csv_records.rs`, `recipient_fields.rs` checks each; which column is
//!     which field in `columns.rs`); the job screening each batch and giving
//!     letter ids (`job.rs`); the batch composed on every core
//!     (`compose_batch.rs`), one letter composed (`compose.rs`, the
//!     planned path checked against the old one in
//!     `compose_plan_tests.rs`) from the
//!     mailing prepared once (`mailing_context.rs`), with its tokens
//!     (`letter_tokens.rs`), tracked URLs (`tracked_urls.rs`), parts before
//!     `</body>` (`letter_shape.rs`) and tracking mode (`track_mode.rs`);
//!     the HTML parts of a letter composed elsewhere tracked by the same
//!     rules (`tracked_parts.rs`), whole letters so tracked with their
//!     mailing and rows (`tracked_letters.rs`, for the relay and `POST
//!     /api/letters`);
//!     why a recipient gets none (`reject.rs`); the rows inserted, one
//!     transaction per batch (`row_writer.rs`); letters and rejects written
//!     (`output.rs`); handed to the pool (`handover.rs`, one lane's worker
//!     in `handover_lanes.rs`); the progress bar (`progress.rs`); letters
//!     composed without a database, for the benchmark (`composer.rs`).
//! 28. [`demo`]: `linktrack demo`, the whole loop on the compiled-in fixtures.
//! 29. [`export`]: the recipients export (one row per letter with its
//!     engagement, CSV or JSON lines), streamed page by page; the API and
//!     `linktrack export recipients` write it.
//! 30. [`server`]: `linktrack serve` (`server/mod.rs`). [`server::App`] (`server/app.rs`) is the
//!     one wiring (listeners, event pipeline, workers, ordered shutdown),
//!     with its error (`serve_error.rs`), the public listener's routes, clicks
//!     and opens served past axum's router (`router.rs`) and the stop signals (`shutdown.rs`);
//!     connections served with limits, plain or TLS (`listen.rs`); only known hosts
//!     answered once tracking domains exist (`hosts.rs`); thin handlers for `/c`,
//!     `/o`, `/u`, `/i` and health (`handlers.rs`) with the `Tracked`
//!     extractor (`request.rs`); shared state and token checks, every
//!     method of `AppState` (`state.rs`); cache misses of concurrent clicks
//!     share one statement (`lookups.rs`); the link templates of live
//!     mailings held in memory, for clicks while the database is away
//!     (`offline_targets.rs`); a hit classified and journaled,
//!     functions taking the state (`hits.rs`), with the reader's country
//!     (`geoip.rs`); universal links' `/.well-known/` files
//!     (`well_known.rs`); repointed links and UTM
//!     tags held in memory and applied to each click (`link_rules.rs`); one
//!     limiter of wrong secrets per client network (`guesses.rs`); the
//!     SSRF-safe image proxy (`image.rs`); the providers' bounce webhooks
//!     (`server/hooks/`) with their settings, held by the server's state
//!     beside the folder (`hook_settings.rs`), and signature checks (SNS in
//!     `sns.rs`, Mailgun in `mailgun.rs`); the
//!     server's error type, which keeps the store's
//!     error and logs its kind, mapped to a status and page in one
//!     `IntoResponse` (`error.rs`, `pages.rs`); Prometheus metrics (`metrics.rs`,
//!     `health_gauges.rs`); the dashboard (`server/stats/`: its state
//!     (`stats/state.rs`), credentials (`credentials.rs`) and login
//!     (`auth.rs`), response headers (`headers.rs`), templates
//!     (`page_templates.rs`), the index and mailing pages
//!     (`dashboard.rs`), the chart (`chart.rs`), the click map
//!     (`clickmap.rs`) and its images (`creative_images.rs`), and its own
//!     error type (`stats/error.rs`)); the operators' API (`server/api/`,
//!     docs/api.md: its state (`api/state.rs`), the caller extractor and
//!     its one scope check (`caller.rs`), the one JSON error shape
//!     (`api/error.rs`), JSON bodies (`json_body.rs`); the handlers of
//!     stats (`api/stats.rs`), the mailings (`mailings.rs`), exports
//!     (`api/export.rs`), keys (`keys.rs`), a mailing's links
//!     (`api/links.rs`), the address lists (`address_lists.rs`), erasure
//!     (`api/erase.rs`), tracked letters (`letters.rs`, with the one
//!     tracker they share in `letter_tracker.rs`) and the live event
//!     stream (`events_stream.rs`, fed by `api/event_feed.rs`); and the
//!     OpenAPI description every route is registered with
//!     (`description.rs`, the schemas of store types in `schema.rs`)).
//!     `/metrics` and
//!     `/readyz` are on the admin listener.
//!
//! 31. [`relay`]: `linktrack relay`, the SMTP relay that tracks mail other
//!     platforms send through it (docs/relay.md), a file per part
//!     (`relay/mod.rs` only wires them): its settings (`settings.rs`), its
//!     STARTTLS certificate (`tls.rs`), its counters for Prometheus
//!     (`relay/metrics.rs`), who
//!     may submit (`access.rs`), a command read (`command.rs`), AUTH
//!     (`auth.rs`), the data after DATA (`data.rs`), where a recipient
//!     stands, held in memory and followed from the change logs
//!     (`standing.rs`), the session (`session.rs`) and what sessions
//!     share (`shared.rs`), a message's
//!     header fields (`headers.rs`) and HTML parts (`mime.rs`), a message
//!     tracked by the builder's rules (`track.rs`, through
//!     `builder/tracked_parts.rs`), the DKIM signatures tracking broke
//!     removed and made again with the domain's key (`dkim.rs`), the
//!     on-disk spool (`spool.rs`) and the worker that forwards it
//!     (`forward.rs`), or the hand-over while the client waits for its
//!     reply to DATA (`hand_over.rs`).
//!
//! Command line:
//! 32. [`cli`]: the command line (clap stops here): its flags in
//!     `cli/args/`, one file per runner, named as it is; runners that turn
//!     them into the settings structs below and print what was done
//!     (`cli/mod.rs` dispatches; `bounces.rs`, `database.rs`, `domains.rs`,
//!     `export.rs`, `keys.rs`, `links.rs`, `mailing.rs`, `relay.rs`, `secrets.rs`,
//!     `serve.rs`, `webhooks.rs`),
//!     with what they share in files of its own: the database and live
//!     layer they connect to (`connect.rs`), their lines out and `say!`
//!     (`output.rs`), exit statuses (`exit_status.rs`), the log
//!     (`logging.rs`).
//!     The binary (`src/main.rs`) only parses and calls [`cli::run`].

#![warn(unreachable_pub)]

pub mod acme;
pub mod address;
pub mod api_keys;
pub mod bots;
pub mod bounces;
pub mod builder;
pub mod cli;
pub mod delivery;
pub mod demo;
pub mod destinations;
pub mod domains;
pub mod error_report;
pub mod event;
pub mod export;
pub mod journal;
pub mod kind;
pub mod letter;
pub mod live;
pub(crate) mod locks;
pub mod mailing_id;
pub mod outbound;
pub mod payload;
pub mod privacy;
pub mod relay;
pub mod retry;
pub mod rollup_worker;
pub mod server;
pub mod settings_file;
pub mod store;
pub(crate) mod timestamp;
pub mod token;
pub mod workers;

#[cfg(test)]
mod layers;
