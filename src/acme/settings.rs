//! Where and how certificates are ordered, and how often the worker
//! looks: the plain settings the command line fills in, which the worker
//! (`mod.rs`) and an order (`order.rs`) both read.

use std::path::PathBuf;
use std::time::Duration;

/// Default of `--acme-check-secs`: how often certificates are checked and
/// the stored ones read again.
pub const DEFAULT_CHECK_EVERY: Duration = Duration::from_secs(3600);

/// Where and how certificates are ordered.
#[derive(Debug, Clone)]
pub struct AcmeSettings {
    /// The directory URL (Let's Encrypt's:
    /// `https://acme-v02.api.letsencrypt.org/directory`).
    pub directory_url: String,
    /// A PEM root the directory's own HTTPS certificate is checked against
    /// instead of the system's (a test or private CA).
    pub ca_file: Option<PathBuf>,
    /// The account's contact addresses (the CA's expiry notices).
    pub contact: Vec<String>,
    /// Renew this long before a certificate ends; `None`: 30 days, or a
    /// third of a shorter certificate's lifetime.
    pub renew_before: Option<Duration>,
}

/// The certificate worker's settings.
#[derive(Debug, Clone)]
pub struct CertificateSettings {
    /// Order and renew here; `None`: only serve what is stored.
    pub acme: Option<AcmeSettings>,
    /// How often a pass runs.
    pub check_every: Duration,
}
