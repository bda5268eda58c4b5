//! STARTTLS (RFC 3207): the certificate the relay shows. A certificate
//! file (`--tls-cert`/`--tls-key`), the tracking domains' certificates
//! that `serve` obtained and stored (`--tls-from-domains`, picked by the
//! name the client asks for), or both: a client asking for a tracking
//! domain gets that domain's, any other the file's.

use crate::acme::Certificates;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sqlx::MySqlPool;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often the stored certificates are read again (renewals reach the
/// relay within this).
const RELOAD_EVERY: Duration = Duration::from_secs(600);

/// Where the relay's certificates come from.
#[derive(Debug, Clone, Default)]
pub struct RelayTls {
    /// A PEM chain and its PEM key.
    pub files: Option<(PathBuf, PathBuf)>,
    /// The tracking domains' stored certificates, by SNI.
    pub from_domains: bool,
}

impl RelayTls {
    /// Whether STARTTLS is offered at all.
    pub fn is_on(&self) -> bool {
        self.files.is_some() || self.from_domains
    }
}

/// A certificate file that cannot be served, named.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("--tls-cert/--tls-key {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--tls-cert/--tls-key: {0}")]
    Unusable(#[from] crate::acme::certificate::CertificateError),
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The SNI table of the tracking domains, then the file's certificate.
#[derive(Debug)]
struct Resolver {
    file: Option<Arc<CertifiedKey>>,
    domains: Option<Arc<Certificates>>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let by_name = match (&self.domains, hello.server_name()) {
            (Some(domains), Some(name)) => domains.for_host(name),
            _ => None,
        };
        by_name.or_else(|| self.file.clone())
    }
}

/// The server side of STARTTLS, and the task that keeps the stored
/// certificates current (abort it on shutdown); `None` when TLS is off.
pub(crate) async fn acceptor(
    tls: &RelayTls,
    pool: &MySqlPool,
) -> Result<
    Option<(
        tokio_rustls::TlsAcceptor,
        Option<tokio::task::JoinHandle<()>>,
    )>,
    TlsError,
> {
    if !tls.is_on() {
        return Ok(None);
    }
    let file = match &tls.files {
        Some((chain, key)) => Some(read_pair(chain, key)?),
        None => None,
    };
    let (domains, reloading) = if tls.from_domains {
        let certificates = Arc::new(Certificates::default());
        crate::acme::load(pool, &certificates).await;
        let (pool, held) = (pool.clone(), Arc::clone(&certificates));
        let reloading = tokio::spawn(async move {
            loop {
                tokio::time::sleep(RELOAD_EVERY).await;
                crate::acme::load(&pool, &held).await;
            }
        });
        (Some(certificates), Some(reloading))
    } else {
        (None, None)
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Resolver { file, domains }));
    Ok(Some((
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        reloading,
    )))
}

/// The certificate chain and key files, read and checked before the relay
/// listens, so a wrong file stops the start with its name.
fn read_pair(chain: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let (chain_pem, key_pem) = (read(chain)?, read(key)?);
    let name = chain.display().to_string();
    Ok(crate::acme::certificate::certified_key_of(
        &name, &chain_pem, &key_pem,
    )?)
}
