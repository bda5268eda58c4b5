//! Sending mechanics: each built letter as a complete RFC 5322 message
//! ([`message`]); [`smtp`] hands messages to an MTA, [`pools`] names each
//! pool's MTAs, [`ledger`] records each outcome so a re-run delivers nothing
//! twice ([`log_file`]: first in a local file, so a connection need not
//! wait for a database commit before its next letter). Which letters go when is the builder's (`builder::handover`).

pub mod body;
mod counters;
pub mod ledger;
pub mod log_file;
pub mod message;
pub mod pools;
pub mod smtp;

pub use counters::DeliveryCounters;
