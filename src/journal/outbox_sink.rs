//! Where the replay hands on the events it stores: the trait the layer
//! above (events out) implements, in a file of its own so that the
//! pipeline (`mod.rs`) and the replay (`replay.rs`) both take it from here.

use crate::event::EventRow;
use crate::store::StoreError;
use sqlx::MySqlPool;
use std::future::Future;
use std::pin::Pin;

/// Where the replay hands on the events it stores: the outbox of the
/// outbound layer above (its `Outbound` implements this), given to
/// [`EventPipeline::start`](super::EventPipeline::start) by whoever wires the server. Called with a
/// batch's rows before they are inserted, so an event's outbox row always
/// exists before the rollup can settle the event; idempotent, as the
/// replay is.
pub trait OutboxSink: Send + Sync {
    fn enqueue<'a>(&'a self, pool: &'a MySqlPool, rows: &'a [EventRow]) -> Enqueued<'a>;
}

/// What [`OutboxSink::enqueue`] returns: boxed, so the pipeline can hold
/// the sink as a trait object (one allocation per replayed batch).
pub type Enqueued<'a> = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'a>>;
