//! What the IMAP and POP3 sessions share: the TCP connection, TLS on
//! it (the system's roots and Mozilla's, as for SMTP; `SSL_CERT_FILE`
//! names others), a deadline on every exchange with the server, and a
//! message listed before it is read.

use super::address::MailboxUrl;
use super::error::{MailboxError, Step};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// The stream both protocols speak once TLS is up.
pub(super) type TlsStream = tokio_rustls::client::TlsStream<TcpStream>;

/// How long one exchange with the server may take (connecting, one
/// command and its answer, one message's bytes).
pub(super) const TIMEOUT: Duration = Duration::from_secs(120);

/// One message of the mailbox: its id (an IMAP UID, a POP3 message
/// number) and its size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Listed {
    pub(super) id: u32,
    pub(super) size: usize,
}

/// `work` within [`TIMEOUT`]; its error, or the timeout, said as a
/// failure of `step` on `server`.
pub(super) async fn within<T, E: std::error::Error + Send + Sync + 'static>(
    server: &str,
    step: Step,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, MailboxError> {
    match tokio::time::timeout(TIMEOUT, work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(MailboxError::caused(server, step, "", err)),
        Err(_) => Err(MailboxError::new(
            server,
            step,
            format!("no answer in {} s", TIMEOUT.as_secs()),
        )),
    }
}

/// A TCP connection to the mailbox's server.
pub(super) async fn tcp(url: &MailboxUrl) -> Result<TcpStream, MailboxError> {
    let server = url.to_string();
    let tcp = within(
        &server,
        Step::Connect,
        TcpStream::connect((url.host.as_str(), url.port)),
    )
    .await?;
    let _ = tcp.set_nodelay(true);
    Ok(tcp)
}

/// TLS on `tcp`, the certificate checked for the URL's host.
pub(super) async fn tls(
    tcp: TcpStream,
    url: &MailboxUrl,
    config: &Arc<rustls::ClientConfig>,
) -> Result<TlsStream, MailboxError> {
    let server = url.to_string();
    let name = rustls::pki_types::ServerName::try_from(url.host.clone())
        .map_err(|e| MailboxError::caused(&server, Step::Tls, url.host.as_str(), e))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
    within(&server, Step::Tls, connector.connect(name, tcp)).await
}
