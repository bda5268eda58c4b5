//! When soft bounces suppress an address: the count of distinct letters
//! within a number of days, the setting the ingest (`ingest.rs`) applies
//! and the command line fills in.

/// When soft bounces suppress: `count` soft bounces of distinct letters
/// within `days` days. The defaults, 3 in 14 days, suppress a mailbox
/// that stayed full across three sends of a weekly or daily newsletter
/// over two weeks (a mailbox that is being read gets emptied sooner), and
/// never one that was full on one day; a single mailing's retries count
/// once, as one letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftPolicy {
    pub count: u32,
    pub days: u32,
}

impl Default for SoftPolicy {
    fn default() -> Self {
        SoftPolicy { count: 3, days: 14 }
    }
}
