//! The suppression list (blacklist): an [`AddressList`] whose note is the
//! reason. Addresses are stored normalised (see
//! [`crate::address::normalize`]); callers pass normalised addresses.

use super::address_list::{AddressList, SUPPRESSIONS};
use super::error::StoreError;
use chrono::NaiveDateTime;
use sqlx::MySqlPool;
use std::collections::HashSet;

/// Why an address is on the list, as `suppressions.reason` stores it.
/// The words linktrack writes itself are variants; an operator's own word
/// (`suppressions add --reason bounce`) is kept as it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SuppressionReason {
    /// The recipient unsubscribed (the replay writes it): `unsubscribe`.
    Unsubscribe,
    /// Added by hand, `suppressions add`'s default: `manual`.
    Manual,
    /// Imported from a file, `suppressions import`'s default: `import`.
    Import,
    /// A hard bounce, or soft bounces past the limit (`bounces ingest`):
    /// `bounce`.
    Bounce,
    /// The recipient reported the letter as spam: `complaint`.
    Complaint,
    /// Any other word.
    Other(String),
}

impl SuppressionReason {
    /// The stored word.
    pub fn as_str(&self) -> &str {
        match self {
            SuppressionReason::Unsubscribe => "unsubscribe",
            SuppressionReason::Manual => "manual",
            SuppressionReason::Import => "import",
            SuppressionReason::Bounce => "bounce",
            SuppressionReason::Complaint => "complaint",
            SuppressionReason::Other(word) => word,
        }
    }
}

impl From<&str> for SuppressionReason {
    fn from(word: &str) -> SuppressionReason {
        match word {
            "unsubscribe" => SuppressionReason::Unsubscribe,
            "manual" => SuppressionReason::Manual,
            "import" => SuppressionReason::Import,
            "bounce" => SuppressionReason::Bounce,
            "complaint" => SuppressionReason::Complaint,
            other => SuppressionReason::Other(other.to_owned()),
        }
    }
}

impl From<String> for SuppressionReason {
    fn from(word: String) -> SuppressionReason {
        SuppressionReason::from(word.as_str())
    }
}

/// Every word is a reason: parsing a flag's value cannot fail.
impl std::str::FromStr for SuppressionReason {
    type Err = std::convert::Infallible;

    fn from_str(word: &str) -> Result<SuppressionReason, Self::Err> {
        Ok(SuppressionReason::from(word))
    }
}

impl std::fmt::Display for SuppressionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Serialised as the stored word.
impl serde::Serialize for SuppressionReason {
    fn serialize<S: serde::Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
        to.serialize_str(self.as_str())
    }
}

/// One entry of the list.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Suppression {
    pub email: String,
    pub reason: SuppressionReason,
    pub created_at: NaiveDateTime,
}

const LIST: AddressList = SUPPRESSIONS;

/// Add addresses; an address already on the list keeps its first reason.
/// Returns how many were new.
pub async fn add(
    pool: &MySqlPool,
    emails: &[String],
    reason: impl Into<SuppressionReason>,
) -> Result<u64, StoreError> {
    LIST.add(pool, emails, reason.into().as_str()).await
}

/// Remove addresses; returns how many were on the list.
pub async fn remove(pool: &MySqlPool, emails: &[String]) -> Result<u64, StoreError> {
    LIST.remove(pool, emails).await
}

/// Which of `emails` are on the list.
pub async fn suppressed_among(
    pool: &MySqlPool,
    emails: &[&str],
) -> Result<HashSet<String>, StoreError> {
    LIST.among(pool, emails).await
}

/// The whole list in pages of `limit` after `after`, by address.
pub async fn list(
    pool: &MySqlPool,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<Suppression>, StoreError> {
    let page = LIST.page(pool, after, limit).await?;
    Ok(page
        .into_iter()
        .map(|entry| Suppression {
            email: entry.email,
            reason: SuppressionReason::from(entry.note),
            created_at: entry.created_at,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::SuppressionReason;

    #[test]
    fn reasons_keep_their_word() {
        for word in ["unsubscribe", "manual", "import", "bounce", ""] {
            let reason: SuppressionReason = word.parse().unwrap();
            assert_eq!(reason.as_str(), word);
            assert_eq!(serde_json::to_string(&reason).unwrap(), format!("{word:?}"));
        }
        assert_eq!(
            SuppressionReason::from("unsubscribe"),
            SuppressionReason::Unsubscribe
        );
        assert_eq!(SuppressionReason::from("bounce"), SuppressionReason::Bounce);
        assert_eq!(
            SuppressionReason::from("complaint"),
            SuppressionReason::Complaint
        );
        assert_eq!(
            SuppressionReason::from("moved"),
            SuppressionReason::Other("moved".into())
        );
    }
}
