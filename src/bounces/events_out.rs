//! Where the events of the ingest's decisions go: the trait the layer
//! above (events out) answers, in a file of its own so that the ingest
//! (`ingest.rs`) takes it without reaching into `mod.rs`.

/// Where the events of stored decisions (`email.bounced`,
/// `email.complained`) go: the names of the endpoints that want an event
/// of `event_type` in `mailing_id`. `outbound::Outbound` answers it with
/// the endpoints' filters (it is a later layer); the ingest queues one
/// outbox row per name, in the transaction that stores the decision, and
/// the servers' senders deliver them like every event.
pub trait EventsOut: Send + Sync {
    fn endpoints_for(&self, event_type: &str, mailing_id: &str) -> Vec<String>;
}

/// No endpoint: events out are off.
impl EventsOut for () {
    fn endpoints_for(&self, _: &str, _: &str) -> Vec<String> {
        Vec::new()
    }
}
