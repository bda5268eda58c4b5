//! [`KeyRefusal`]: why a seal key ring is refused ([`RingPolicy`]), each
//! reason saying what to do. A file of its own because the store's error
//! carries it too.
//!
//! [`RingPolicy`]: super::RingPolicy

use chrono::NaiveDate;

/// Why a ring is refused; each says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyRefusal {
    #[error(
        "{} gives the seal key {fingerprint}, which this database has never seen (its current \
         key is {current}, since {since}): tokens sealed or opened with it would not match \
         the other builders' and servers'. Use the LINKTRACK_SECRET they use; if this is a new \
         secret, rotate to it first: `linktrack secrets rotate` (or --new-secret), with the old \
         one in LINKTRACK_PREVIOUS_SECRETS (docs/token.md, \"Rotating the secret\")",
        secret_name(*unset)
    )]
    Unknown {
        fingerprint: String,
        unset: bool,
        current: String,
        since: NaiveDate,
    },
    #[error(
        "{} gives the seal key {fingerprint}, which key {current} replaced on {since}: letters \
         built with it would be sealed with a retiring key. Build with the current \
         LINKTRACK_SECRET (`linktrack secrets list` names the keys), or pass --new-secret to \
         make this key the current one again",
        secret_name(*unset)
    )]
    NotCurrent {
        fingerprint: String,
        unset: bool,
        current: String,
        since: NaiveDate,
    },
    #[error(
        "the seal key {fingerprint} ({why}) is neither LINKTRACK_SECRET's nor one of \
         LINKTRACK_PREVIOUS_SECRETS: its links would answer 404 here. Add its secret to \
         LINKTRACK_PREVIOUS_SECRETS (or to the file LINKTRACK_PREVIOUS_SECRETS_FILE names), or \
         give its links up with `linktrack secrets retire {fingerprint}`"
    )]
    MissingFromRing { fingerprint: String, why: String },
    #[error(
        "{} does not open the tokens this database already holds ({opened} of its newest \
         {sampled} open to their kind): they were sealed with another secret. Use the secret \
         they were built with; or, to start a new key, pass --new-secret (their links then \
         answer 404 unless that secret is in LINKTRACK_PREVIOUS_SECRETS)",
        secret_name(*unset)
    )]
    OpensNoStoredToken {
        unset: bool,
        opened: usize,
        sampled: usize,
    },
    #[error(
        "the seal key {fingerprint} of LINKTRACK_SECRET was retired (`linktrack secrets \
         retire`): its links were given up, and nothing new is sealed with it. Build with a new \
         secret: `linktrack secrets new`, then `linktrack secrets rotate` to it (or pass \
         --new-secret)"
    )]
    Retired { fingerprint: String },
    #[error("the seal key {fingerprint} of LINKTRACK_SECRET is already the current key: set LINKTRACK_SECRET to the new secret (and the old one in LINKTRACK_PREVIOUS_SECRETS) to rotate")]
    AlreadyCurrent { fingerprint: String },
}

fn secret_name(unset: bool) -> &'static str {
    if unset {
        "LINKTRACK_SECRET is unset, which"
    } else {
        "LINKTRACK_SECRET"
    }
}
