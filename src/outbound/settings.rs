//! Where events go out and how, as the command line gives it: the plain
//! settings the endpoints (`endpoints.rs`) and the configured set
//! (`configured.rs`) are made from.

/// Where events go out and how (docs/serve.md, "Events out"), as the
/// command line gives it: the environment variable names in the errors are
/// the settings' names.
#[derive(Debug, Clone)]
pub struct OutboundSettings {
    /// The endpoint named `default`: POST every event here, signed.
    pub webhook_url: Option<String>,
    /// The signing secret of `webhook_url` (`whsec_` + base64).
    pub webhook_secret: Option<String>,
    /// A TOML file of endpoints.
    pub webhooks: Option<std::path::PathBuf>,
    /// The endpoint named `amqp`: publish every event to RabbitMQ.
    pub amqp_url: Option<String>,
    /// The durable topic exchange of `amqp_url`.
    pub amqp_exchange: String,
    pub webhook_timeout_ms: u64,
    /// Deliveries in flight at once per endpoint.
    pub webhook_concurrency: usize,
    /// Events per webhook request (1 to 1000).
    pub webhook_batch: usize,
    pub outbound_retry_base_ms: u64,
    pub outbound_retry_max_secs: u64,
    /// Give up on an event this long after it was queued (dead letters).
    pub outbound_give_up_secs: u64,
    /// The safety net of held events.
    pub outbound_hold_grace_secs: u64,
    /// Private networks webhooks may go to besides public addresses
    /// (`10.0.0.0/8`, `fd00::/8`, one address), as given.
    pub outbound_allow_private: Vec<String>,
}
