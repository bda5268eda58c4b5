//! A certificate chain and key as PEM, made into what rustls serves, and
//! the dates that decide when it is renewed.

use crate::store::tls_certificates::StoredCertificate;
use chrono::{DateTime, NaiveDateTime, Utc};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use std::sync::Arc;
use std::time::Duration;

/// A chain or key that cannot be used, said with the host it is for.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("certificate of {host}: {detail}")]
    Unusable { host: String, detail: &'static str },
    /// A part (the chain's PEM, the leaf, the key) its parser refused.
    #[error("certificate of {host}: {part}: {source}")]
    Unreadable {
        host: String,
        part: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn unusable(host: &str, detail: &'static str) -> CertificateError {
    CertificateError::Unusable {
        host: host.to_owned(),
        detail,
    }
}

fn unreadable<E>(host: &str, part: &'static str) -> impl FnOnce(E) -> CertificateError
where
    E: std::error::Error + Send + Sync + 'static,
{
    let host = host.to_owned();
    move |source| CertificateError::Unreadable {
        host,
        part,
        source: Box::new(source),
    }
}

/// What the leaf says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafFacts {
    pub serial: String,
    pub not_before: NaiveDateTime,
    pub not_after: NaiveDateTime,
}

/// The chain's certificates, leaf first.
fn chain(host: &str, chain_pem: &str) -> Result<Vec<CertificateDer<'static>>, CertificateError> {
    let certs = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(unreadable(host, "chain PEM"))?;
    if certs.is_empty() {
        return Err(unusable(host, "the chain holds no certificate"));
    }
    Ok(certs)
}

/// The serial and validity of the chain's leaf.
pub fn leaf_facts(host: &str, chain_pem: &str) -> Result<LeafFacts, CertificateError> {
    let certs = chain(host, chain_pem)?;
    let (_, leaf) = x509_parser::parse_x509_certificate(&certs[0])
        .map_err(unreadable(host, "leaf certificate"))?;
    let validity = leaf.validity();
    let time = |at: x509_parser::time::ASN1Time| {
        DateTime::<Utc>::from_timestamp(at.timestamp(), 0)
            .map(|at| at.naive_utc())
            .ok_or_else(|| unusable(host, "validity out of range"))
    };
    Ok(LeafFacts {
        serial: leaf.raw_serial_as_string().replace(':', ""),
        not_before: time(validity.not_before)?,
        not_after: time(validity.not_after)?,
    })
}

/// The chain and key as rustls serves them (ring's signing keys).
pub fn certified_key(cert: &StoredCertificate) -> Result<Arc<CertifiedKey>, CertificateError> {
    certified_key_of(&cert.host, &cert.chain_pem, &cert.key_pem)
}

/// A PEM chain and key as rustls serves them; `name` (a host or a file)
/// names them in an error.
pub fn certified_key_of(
    name: &str,
    chain_pem: &str,
    key_pem: &str,
) -> Result<Arc<CertifiedKey>, CertificateError> {
    let certs = chain(name, chain_pem)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(unreadable(name, "private key PEM"))?;
    let provider = rustls::crypto::ring::default_provider();
    let certified = CertifiedKey::from_der(certs, key, &provider)
        .map_err(unreadable(name, "key and certificate"))?;
    Ok(Arc::new(certified))
}

/// The renewal window when the operator names none: 30 days before the
/// end, as Let's Encrypt advises for its 90-day certificates.
pub const DEFAULT_RENEW_BEFORE: Duration = Duration::from_secs(30 * 86_400);

/// Whether a certificate valid from `not_before` to `not_after` is due for
/// renewal at `now`: within `renew_before` of its end when the operator
/// set a window; else within [`DEFAULT_RENEW_BEFORE`] of its end but never
/// before two thirds of its lifetime (a 6-day certificate is renewed after
/// 4 days, not 30 days before it ends, which is before it was issued).
pub fn renewal_due(
    not_before: NaiveDateTime,
    not_after: NaiveDateTime,
    now: NaiveDateTime,
    renew_before: Option<Duration>,
) -> bool {
    let window = match renew_before {
        Some(window) => chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX),
        None => {
            let default =
                chrono::Duration::from_std(DEFAULT_RENEW_BEFORE).unwrap_or(chrono::Duration::MAX);
            default.min((not_after - not_before) / 3)
        }
    };
    match not_after.checked_sub_signed(window) {
        Some(start) => now >= start,
        // A window reaching before the calendar: always due.
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(day: i64) -> NaiveDateTime {
        DateTime::<Utc>::from_timestamp(1_800_000_000 + day * 86_400, 0)
            .unwrap()
            .naive_utc()
    }

    #[test]
    fn a_90_day_certificate_is_renewed_30_days_before_it_ends() {
        assert!(!renewal_due(at(0), at(90), at(59), None));
        assert!(renewal_due(at(0), at(90), at(60), None));
        assert!(renewal_due(at(0), at(90), at(95), None));
    }

    #[test]
    fn a_short_lived_certificate_is_renewed_at_two_thirds_of_its_life() {
        assert!(!renewal_due(at(0), at(6), at(3), None));
        assert!(renewal_due(at(0), at(6), at(4), None));
        // A five-year certificate: 30 days before its end.
        assert!(!renewal_due(at(0), at(1825), at(1794), None));
        assert!(renewal_due(at(0), at(1825), at(1795), None));
    }

    #[test]
    fn the_operators_window_is_taken_as_given() {
        let ten_days = Some(Duration::from_secs(10 * 86_400));
        assert!(!renewal_due(at(0), at(90), at(79), ten_days));
        assert!(renewal_due(at(0), at(90), at(80), ten_days));
        let longer_than_the_lifetime = Some(Duration::from_secs(100 * 86_400));
        assert!(renewal_due(at(0), at(90), at(0), longer_than_the_lifetime));
        assert!(renewal_due(at(0), at(90), at(0), Some(Duration::MAX)));
    }
}
