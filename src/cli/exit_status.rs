//! The exit statuses the commands share, besides 0 (done) and 1 (failed).

/// Exit status of a build that rejected some recipients.
pub const EXIT_REJECTED: u8 = 2;
