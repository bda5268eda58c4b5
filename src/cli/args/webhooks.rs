//! Flags of `webhooks` and of events out (`serve`, `webhooks list|test|replay`).

use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// Each configured endpoint: target, filters, queued events, the age of
    /// the oldest (the lag) and dead letters.
    List(WebhooksListArgs),
    /// Send a signed `webhook.test` event to an endpoint now and print the answer.
    Test(WebhooksTestArgs),
    /// Queue an endpoint's dead letters again (events since --since); a
    /// running server sends them.
    Replay(WebhooksReplayArgs),
    /// Print a fresh random secret (`whsec_` + base64) for an endpoint.
    NewSecret,
}

#[derive(Debug, Clone, Args)]
pub struct WebhooksListArgs {
    #[command(flatten)]
    pub outbound: OutboundArgs,
}

#[derive(Debug, Clone, Args)]
pub struct WebhooksTestArgs {
    /// The endpoint's name (`default` for LINKTRACK_WEBHOOK_URL).
    #[arg(long, default_value = "default", value_name = "NAME")]
    pub endpoint: String,
    #[command(flatten)]
    pub outbound: OutboundArgs,
}

#[derive(Debug, Clone, Args)]
pub struct WebhooksReplayArgs {
    /// The endpoint's name (`default` for LINKTRACK_WEBHOOK_URL, `amqp` for LINKTRACK_AMQP_URL).
    #[arg(long, value_name = "NAME")]
    pub endpoint: String,
    /// Only events that happened at or after this UTC time: RFC 3339
    /// (2026-11-23T10:00:00Z) or a date (2026-11-23).
    #[arg(long, value_name = "TIME")]
    pub since: String,
}

/// Where events go out (see docs/serve.md, "Events out").
#[derive(Debug, Clone, Args)]
pub struct OutboundArgs {
    /// POST every event to this http(s) URL, signed per Standard Webhooks
    /// (the endpoint named `default`).
    #[arg(long, env = "LINKTRACK_WEBHOOK_URL", value_name = "URL")]
    pub webhook_url: Option<String>,

    /// The signing secret of --webhook-url: `whsec_` + base64 of 24 to 64
    /// bytes (`linktrack webhooks new-secret` makes one).
    #[arg(
        long,
        env = "LINKTRACK_WEBHOOK_SECRET",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    pub webhook_secret: Option<String>,

    /// A TOML file of endpoints, each with its URL, secret and optional
    /// filters by event type and mailing (docs/serve.md).
    #[arg(long, env = "LINKTRACK_WEBHOOKS", value_name = "FILE")]
    pub webhooks: Option<PathBuf>,

    /// Publish every event to RabbitMQ, e.g.
    /// amqp://guest:guest@127.0.0.1:5672/%2f (the endpoint named `amqp`).
    #[arg(
        long,
        env = "LINKTRACK_AMQP_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub amqp_url: Option<String>,

    /// The durable topic exchange of --amqp-url (routing key = event type).
    #[arg(long, env = "LINKTRACK_AMQP_EXCHANGE", default_value = crate::outbound::endpoints::DEFAULT_AMQP_EXCHANGE, value_name = "NAME")]
    pub amqp_exchange: String,

    /// Longest wait for an endpoint's answer, in milliseconds.
    #[arg(
        long,
        env = "LINKTRACK_WEBHOOK_TIMEOUT_MS",
        default_value_t = 10_000,
        value_name = "MS"
    )]
    pub webhook_timeout_ms: u64,

    /// Deliveries in flight at once per endpoint (and server).
    #[arg(
        long,
        env = "LINKTRACK_WEBHOOK_CONCURRENCY",
        default_value_t = 8,
        value_name = "N"
    )]
    pub webhook_concurrency: usize,

    /// Events per webhook request: 1 sends each event on its own; N from 2
    /// to 1000 sends up to N in one `"type": "batch"` body (docs/serve.md).
    #[arg(
        long,
        env = "LINKTRACK_WEBHOOK_BATCH",
        default_value_t = 1,
        value_name = "N"
    )]
    pub webhook_batch: usize,

    /// Delay before the first retry, in milliseconds; each further retry
    /// doubles it (with jitter) up to --outbound-retry-max-secs.
    #[arg(
        long,
        env = "LINKTRACK_OUTBOUND_RETRY_BASE_MS",
        default_value_t = 5_000,
        value_name = "MS"
    )]
    pub outbound_retry_base_ms: u64,

    /// Longest delay between two attempts, in seconds.
    #[arg(
        long,
        env = "LINKTRACK_OUTBOUND_RETRY_MAX_SECS",
        default_value_t = 3_600,
        value_name = "SECS"
    )]
    pub outbound_retry_max_secs: u64,

    /// Give up on an event this many seconds after it was queued: it moves
    /// to the dead letters (`linktrack webhooks replay` sends them again).
    #[arg(
        long,
        env = "LINKTRACK_OUTBOUND_GIVE_UP_SECS",
        default_value_t = 259_200,
        value_name = "SECS"
    )]
    pub outbound_give_up_secs: u64,

    /// The safety net of held events (docs/serve.md, "What is held, and for
    /// how long"): a click or open still waiting for its settled verdict
    /// --verdict-settle-secs + this many seconds after it was queued (no
    /// rollup settled it) is sent anyway, with its first verdict.
    #[arg(
        long,
        env = "LINKTRACK_OUTBOUND_HOLD_GRACE_SECS",
        default_value_t = 120,
        value_name = "SECS"
    )]
    pub outbound_hold_grace_secs: u64,

    /// A private network webhooks may go to (an internal receiver), e.g.
    /// 10.0.0.0/8 or fd00::/8; repeat it, or separate networks with commas.
    /// Without it, webhook URLs that are or resolve to loopback, private,
    /// link-local or other non-public addresses are refused at start, in
    /// the `webhooks` commands and at send (docs/serve.md, "Security").
    #[arg(
        long,
        env = "LINKTRACK_OUTBOUND_ALLOW_PRIVATE",
        value_delimiter = ',',
        value_name = "CIDR"
    )]
    pub outbound_allow_private: Vec<String>,
}

impl OutboundArgs {
    /// The plain settings the outbound layer takes.
    pub fn settings(&self) -> crate::outbound::OutboundSettings {
        crate::outbound::OutboundSettings {
            webhook_url: self.webhook_url.clone(),
            webhook_secret: self.webhook_secret.clone(),
            webhooks: self.webhooks.clone(),
            amqp_url: self.amqp_url.clone(),
            amqp_exchange: self.amqp_exchange.clone(),
            webhook_timeout_ms: self.webhook_timeout_ms,
            webhook_concurrency: self.webhook_concurrency,
            webhook_batch: self.webhook_batch,
            outbound_retry_base_ms: self.outbound_retry_base_ms,
            outbound_retry_max_secs: self.outbound_retry_max_secs,
            outbound_give_up_secs: self.outbound_give_up_secs,
            outbound_hold_grace_secs: self.outbound_hold_grace_secs,
            outbound_allow_private: self.outbound_allow_private.clone(),
        }
    }
}
