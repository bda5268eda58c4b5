//! The plain figures every stats read fills: counts of one kind of event
//! split by the bot flag, and late events' counts.

/// Counts for one kind of event, split by the bot flag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub total: u64,
    /// Letters with at least one such event.
    pub unique: u64,
}

/// Human and bot counts of one kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Split {
    pub human: Counts,
    pub bot: Counts,
}

/// Late events: hits on tokens whose link row was dropped with
/// its partition, counted per mailing and position and never in the
/// regular figures, so those do not change months after a send. They name
/// no letter, so there are no unique counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LateCounts {
    pub human: u64,
    pub bot: u64,
}
