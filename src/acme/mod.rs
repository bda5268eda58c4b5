//! Automatic TLS for the tracking domains (docs/domains.md,
//! "Certificates"): each verified tracking host gets a certificate from an
//! ACME directory (HTTP-01, instant-acme), kept in the database with the
//! account (`store::tls_certificates`) and renewed before it ends; the TLS
//! listener picks each host's certificate by SNI from [`Certificates`].
//!
//! One worker per server ([`run`]): every pass it orders what is missing
//! or due (under a database lock, so one server of a deployment talks to
//! the CA at a time), then loads every stored certificate into the
//! listener's table and the expiry gauges. A server with `--tls-listen`
//! and no ACME directory only loads: it serves what another server
//! ordered.

pub mod certificate;
pub mod order;
mod settings;

use crate::locks::ReadWriteEvenPoisoned;
use crate::store::tls_certificates::{self, StoredCertificate};
use crate::store::tracking_domains::{self, DomainState};
use crate::workers::Stopping;
use chrono::Utc;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
pub use settings::{AcmeSettings, CertificateSettings, DEFAULT_CHECK_EVERY};
use sqlx::MySqlPool;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Certificates issued, by reason (`new`, `renewal`).
pub const ISSUED: &str = "linktrack_acme_certificates_issued_total";
/// Orders that brought no certificate.
pub const FAILED: &str = "linktrack_acme_order_failures_total";
/// Each served certificate's end, Unix seconds, by host (the expiry alert).
pub const EXPIRY: &str = "linktrack_tls_certificate_expiry_timestamp_seconds";
/// When each served certificate was issued, Unix seconds, by host.
pub const ISSUED_AT: &str = "linktrack_tls_certificate_issued_timestamp_seconds";

/// The longest wait before a failed host is tried again.
const MAX_BACKOFF: Duration = Duration::from_secs(24 * 3600);

/// The served certificates by host: the TLS listener's SNI table.
#[derive(Debug, Default)]
pub struct Certificates {
    by_host: RwLock<HashMap<String, Arc<CertifiedKey>>>,
}

impl Certificates {
    fn replace(&self, loaded: HashMap<String, Arc<CertifiedKey>>) {
        *self.by_host.write_even_poisoned() = loaded;
    }

    /// The certificate served for `host` (a trailing dot and case ignored).
    pub fn for_host(&self, host: &str) -> Option<Arc<CertifiedKey>> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.by_host.read_even_poisoned().get(&host).cloned()
    }

    /// The hosts a certificate is served for.
    pub fn hosts(&self) -> Vec<String> {
        let by_host = self.by_host.read_even_poisoned();
        let mut hosts: Vec<String> = by_host.keys().cloned().collect();
        hosts.sort();
        hosts
    }
}

impl ResolvesServerCert for Certificates {
    /// A handshake without SNI, or for a host without a certificate, is
    /// refused: there is no default certificate to give away.
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.for_host(hello.server_name()?)
    }
}

/// The TLS listener's configuration: HTTP/1.1, each host's certificate by SNI.
pub fn server_config(
    certificates: Arc<Certificates>,
) -> Result<rustls::ServerConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(certificates);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The worker: a pass now, then every `check_every`, until stopped.
pub async fn run(
    pool: MySqlPool,
    certificates: Arc<Certificates>,
    settings: CertificateSettings,
    mut stopping: Stopping,
) {
    let mut issuer = settings.acme.map(Issuer::new);
    loop {
        if let Some(issuer) = issuer.as_mut() {
            issuer.pass(&pool).await;
        }
        load(&pool, &certificates).await;
        tokio::select! {
            _ = stopping.requested() => return,
            _ = tokio::time::sleep(settings.check_every) => {}
        }
    }
}

/// Reads every stored certificate into the SNI table and the gauges. A
/// certificate that cannot be used is left out (and said); the others are
/// served.
pub async fn load(pool: &MySqlPool, certificates: &Certificates) {
    let stored = match tls_certificates::list(pool).await {
        Ok(stored) => stored,
        Err(err) => {
            tracing::warn!(%err, "certificates not read; serving the last ones read");
            return;
        }
    };
    let mut loaded = HashMap::new();
    for cert in &stored {
        match certificate::certified_key(cert) {
            Ok(key) => {
                metrics::gauge!(EXPIRY, "host" => cert.host.clone())
                    .set(cert.not_after.and_utc().timestamp() as f64);
                metrics::gauge!(ISSUED_AT, "host" => cert.host.clone())
                    .set(cert.issued.and_utc().timestamp() as f64);
                loaded.insert(cert.host.clone(), key);
            }
            Err(err) => tracing::error!(%err, "certificate not served"),
        }
    }
    certificates.replace(loaded);
}

/// Orders what is missing or due, remembering failures so a failing host
/// is not asked for at every pass (CAs limit failed validations).
struct Issuer {
    settings: AcmeSettings,
    account: Option<instant_acme::Account>,
    failures: HashMap<String, (u32, Instant)>,
}

impl Issuer {
    fn new(settings: AcmeSettings) -> Issuer {
        Issuer {
            settings,
            account: None,
            failures: HashMap::new(),
        }
    }

    async fn pass(&mut self, pool: &MySqlPool) {
        let lock = match tls_certificates::try_issuer_lock(pool).await {
            Ok(Some(lock)) => lock,
            Ok(None) => return tracing::debug!("another server is ordering certificates"),
            Err(err) => return tracing::warn!(%err, "certificates not checked"),
        };
        let wanted = match self.wanted(pool).await {
            Ok(wanted) => wanted,
            Err(err) => return tracing::warn!(%err, "certificates not checked"),
        };
        for (host, reason) in wanted {
            if self.backing_off(&host) {
                continue;
            }
            self.issue(pool, &host, reason).await;
        }
        drop(lock);
    }

    /// Verified hosts without a certificate (`new`) or whose certificate
    /// is due (`renewal`).
    async fn wanted(
        &self,
        pool: &MySqlPool,
    ) -> Result<Vec<(String, &'static str)>, crate::store::StoreError> {
        let verified: Vec<String> = tracking_domains::list(pool)
            .await?
            .into_iter()
            .filter(|domain| domain.state == DomainState::Verified)
            .map(|domain| domain.host)
            .collect();
        let stored: HashMap<String, StoredCertificate> = tls_certificates::list(pool)
            .await?
            .into_iter()
            .map(|cert| (cert.host.clone(), cert))
            .collect();
        let now = Utc::now().naive_utc();
        let mut seen = HashSet::new();
        Ok(verified
            .into_iter()
            .filter(|host| seen.insert(host.clone()))
            .filter_map(|host| match stored.get(&host) {
                None => Some((host, "new")),
                Some(cert) => certificate::renewal_due(
                    cert.not_before,
                    cert.not_after,
                    now,
                    self.settings.renew_before,
                )
                .then_some((host, "renewal")),
            })
            .collect())
    }

    fn backing_off(&self, host: &str) -> bool {
        self.failures
            .get(host)
            .is_some_and(|(_, retry_at)| Instant::now() < *retry_at)
    }

    async fn issue(&mut self, pool: &MySqlPool, host: &str, reason: &'static str) {
        let directory = self.settings.directory_url.clone();
        let issued = match self.account(pool).await {
            Ok(account) => order::order(pool, &account, &directory, host).await,
            Err(err) => Err(err),
        };
        let saved = match issued {
            Ok(cert) => tls_certificates::save(pool, &cert)
                .await
                .map(|()| cert)
                .map_err(order::OrderError::from),
            Err(err) => Err(err),
        };
        match saved {
            Ok(cert) => {
                self.failures.remove(host);
                metrics::counter!(ISSUED, "reason" => reason).increment(1);
                tracing::info!(
                    host,
                    reason,
                    serial = %cert.serial,
                    not_after = %cert.not_after,
                    "certificate issued"
                );
            }
            Err(err) => {
                let failures = self.failures.get(host).map_or(1, |(n, _)| n + 1);
                let wait = backoff(failures);
                self.failures
                    .insert(host.to_owned(), (failures, Instant::now() + wait));
                metrics::counter!(FAILED).increment(1);
                tracing::warn!(%err, host, retry_in_secs = wait.as_secs(), "certificate not issued");
            }
        }
    }

    /// The account, read or created once per server.
    async fn account(
        &mut self,
        pool: &MySqlPool,
    ) -> Result<instant_acme::Account, order::OrderError> {
        if let Some(account) = &self.account {
            return Ok(account.clone());
        }
        let account = order::account(pool, &self.settings).await?;
        self.account = Some(account.clone());
        Ok(account)
    }
}

/// The wait after `failures` failed orders in a row: a minute, doubled
/// each time, at most a day.
fn backoff(failures: u32) -> Duration {
    let minutes = 1u64 << failures.saturating_sub(1).min(11);
    Duration::from_secs(minutes * 60).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::backoff;
    use std::time::Duration;

    #[test]
    fn failed_hosts_wait_longer_each_time_up_to_a_day() {
        assert_eq!(backoff(1), Duration::from_secs(60));
        assert_eq!(backoff(2), Duration::from_secs(120));
        assert_eq!(backoff(40), Duration::from_secs(24 * 3600));
    }
}
