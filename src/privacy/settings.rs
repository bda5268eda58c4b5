//! How a server keeps its view of opt-outs and erasures current, and how
//! long `erase` counts a server alive after it acknowledged: the timings
//! the view (`mod.rs`) and the erasure (`erase.rs`) both read.

use std::time::Duration;

/// How the view is kept current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrivacySettings {
    /// Read the change log this often: the bound on how late a server
    /// learns of an opt-out or an erasure (docs/privacy.md).
    pub refresh_every: Duration,
    /// Load the lists whole this often (and when the log was pruned past
    /// what this server read).
    pub full_every: Duration,
    /// Change rows younger than this are read again at the next refresh.
    pub settle: Duration,
    /// Change rows older than this are deleted (by any server).
    pub keep_changes: Duration,
    /// Acknowledge at least this often, even with nothing new: `erase`
    /// counts a server alive when it acknowledged within a minute.
    pub heartbeat: Duration,
}

impl Default for PrivacySettings {
    fn default() -> Self {
        PrivacySettings {
            refresh_every: Duration::from_secs(2),
            full_every: Duration::from_secs(3_600),
            settle: Duration::from_secs(5),
            keep_changes: Duration::from_secs(7 * 24 * 3_600),
            heartbeat: Duration::from_secs(10),
        }
    }
}

/// How long `erase` counts a server as alive after its last acknowledgement.
pub const ALIVE_WITHIN: Duration = Duration::from_secs(60);
