//! Amazon SNS messages, authenticated: the signature (SignatureVersion 1,
//! SHA1withRSA, or 2, SHA256withRSA) over the message's canonical string,
//! with the public key of the certificate at `SigningCertURL`, fetched
//! only from a trusted URL (https on `sns.<region>.amazonaws.com`, or a
//! prefix the operator names) and cached. The same rule guards the
//! `SubscribeURL` a subscription is confirmed at.

pub use crate::server::hook_settings::{PrefixError, TrustedUrls};
use base64::Engine;
use moka::future::Cache;
use rsa::pkcs8::DecodePublicKey;
use rsa::{Pkcs1v15Sign, RsaPublicKey};
use serde::Deserialize;
use sha2::Digest;
use std::sync::Arc;
use std::time::Duration;
use x509_cert::der::{DecodePem, Encode};

/// An SNS message as posted (the fields the signature covers and ours).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct SnsMessage {
    #[serde(rename = "Type")]
    pub(crate) kind: String,
    pub(crate) message_id: String,
    pub(crate) topic_arn: String,
    #[serde(default)]
    pub(crate) subject: Option<String>,
    pub(crate) message: String,
    pub(crate) timestamp: String,
    #[serde(default)]
    pub(crate) token: Option<String>,
    #[serde(rename = "SubscribeURL", default)]
    pub(crate) subscribe_url: Option<String>,
    #[serde(default)]
    pub(crate) signature_version: Option<String>,
    #[serde(default)]
    pub(crate) signature: Option<String>,
    #[serde(rename = "SigningCertURL", default)]
    pub(crate) signing_cert_url: Option<String>,
}

/// Why a message is not SNS's; the text is the response body, the label
/// the metric's `reason`.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("unsigned: no Signature, SignatureVersion or SigningCertURL")]
    Unsigned,
    #[error("SignatureVersion {0:?} is not 1 or 2")]
    Version(String),
    #[error("SigningCertURL {0} is not a trusted SNS certificate URL (https://sns.<region>.amazonaws.com/….pem or a --sns-cert-url-prefix)")]
    UntrustedUrl(String),
    /// Shared: the refusal is cloned, the cause is not `Clone`.
    #[error("the signing certificate could not be used: {0}")]
    Certificate(#[source] Arc<CertificateError>),
    #[error("the signature does not verify")]
    BadSignature,
    #[error("{0} has no field {1}, which its signature covers")]
    Incomplete(&'static str, &'static str),
}

impl Refusal {
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Refusal::Unsigned => "unsigned",
            Refusal::Version(_) => "bad_signature_version",
            Refusal::UntrustedUrl(_) => "untrusted_cert_url",
            Refusal::Certificate(_) => "cert_unavailable",
            Refusal::BadSignature => "bad_signature",
            Refusal::Incomplete(..) => "bad_request",
        }
    }
}

/// The string SNS signs: the covered fields in order, `Name\nvalue\n`
/// each (docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html).
pub(crate) fn canonical(message: &SnsMessage) -> Result<String, Refusal> {
    let mut out = String::new();
    let mut field = |name: &str, value: &str| {
        out.push_str(name);
        out.push('\n');
        out.push_str(value);
        out.push('\n');
    };
    field("Message", &message.message);
    field("MessageId", &message.message_id);
    if message.kind == "Notification" {
        if let Some(subject) = &message.subject {
            field("Subject", subject);
        }
        field("Timestamp", &message.timestamp);
    } else {
        let url = message
            .subscribe_url
            .as_deref()
            .ok_or(Refusal::Incomplete("a confirmation", "SubscribeURL"))?;
        field("SubscribeURL", url);
        field("Timestamp", &message.timestamp);
        let token = message
            .token
            .as_deref()
            .ok_or(Refusal::Incomplete("a confirmation", "Token"))?;
        field("Token", token);
    }
    field("TopicArn", &message.topic_arn);
    field("Type", &message.kind);
    Ok(out)
}

/// Why a signing certificate (or a confirmation's SubscribeURL) could not
/// be fetched or used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CertificateError {
    #[error("{url}: {source}")]
    Request {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url} answered {status}")]
    Status {
        url: String,
        status: reqwest::StatusCode,
    },
    #[error("{url}: over {MAX_CERTIFICATE_BYTES} bytes")]
    TooLarge { url: String },
    #[error("not a PEM certificate: {0}")]
    NotPem(#[source] x509_cert::der::Error),
    #[error("the certificate is not valid now")]
    NotValidNow,
    #[error("its public key: {0}")]
    PublicKey(#[source] x509_cert::der::Error),
    #[error("not an RSA key: {0}")]
    NotRsa(#[source] rsa::pkcs8::spki::Error),
}

/// The signing certificates' public keys, by URL, fetched once.
#[derive(Clone)]
pub(crate) struct Certificates {
    client: reqwest::Client,
    keys: Cache<String, Arc<RsaPublicKey>>,
    pub(crate) trusted: TrustedUrls,
}

/// A certificate is a few kilobytes; anything longer is not one.
const MAX_CERTIFICATE_BYTES: usize = 64 << 10;

impl Certificates {
    pub(crate) fn new(trusted: TrustedUrls) -> Result<Certificates, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            // A redirect could lead off the trusted host.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Certificates {
            client,
            // SNS rotates its certificate rarely; a day bounds how long a
            // revoked one would be used.
            keys: Cache::builder()
                .max_capacity(64)
                .time_to_live(Duration::from_secs(24 * 3600))
                .build(),
            trusted,
        })
    }

    /// Check `message`'s signature; `Ok` only when it verifies with the
    /// key of a certificate at a trusted URL.
    pub(crate) async fn verify(&self, message: &SnsMessage) -> Result<(), Refusal> {
        let (Some(version), Some(signature), Some(url)) = (
            message.signature_version.as_deref(),
            message.signature.as_deref(),
            message.signing_cert_url.as_deref(),
        ) else {
            return Err(Refusal::Unsigned);
        };
        let canonical = canonical(message)?;
        let scheme = match version {
            "1" => (
                Pkcs1v15Sign::new::<sha1::Sha1>(),
                sha1::Sha1::digest(canonical.as_bytes()).to_vec(),
            ),
            "2" => (
                Pkcs1v15Sign::new::<sha2::Sha256>(),
                sha2::Sha256::digest(canonical.as_bytes()).to_vec(),
            ),
            other => return Err(Refusal::Version(other.to_owned())),
        };
        if !self.trusted.trusts(url) || !url.ends_with(".pem") {
            return Err(Refusal::UntrustedUrl(url.to_owned()));
        }
        let signature = base64::engine::general_purpose::STANDARD
            .decode(signature.trim())
            .map_err(|_| Refusal::BadSignature)?;
        let key = self.key(url).await?;
        key.verify(scheme.0, &scheme.1, &signature)
            .map_err(|_| Refusal::BadSignature)
    }

    async fn key(&self, url: &str) -> Result<Arc<RsaPublicKey>, Refusal> {
        if let Some(key) = self.keys.get(url).await {
            return Ok(key);
        }
        let unusable = |err| Refusal::Certificate(Arc::new(err));
        let pem = self.fetch(url).await.map_err(unusable)?;
        let key = Arc::new(public_key(&pem).map_err(unusable)?);
        self.keys.insert(url.to_owned(), key.clone()).await;
        Ok(key)
    }

    /// GET a trusted URL, its body (at most [`MAX_CERTIFICATE_BYTES`]).
    pub(crate) async fn fetch(&self, url: &str) -> Result<Vec<u8>, CertificateError> {
        let request = |source| CertificateError::Request {
            url: url.to_owned(),
            source,
        };
        let mut response = self.client.get(url).send().await.map_err(request)?;
        if !response.status().is_success() {
            return Err(CertificateError::Status {
                url: url.to_owned(),
                status: response.status(),
            });
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(request)? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_CERTIFICATE_BYTES {
                return Err(CertificateError::TooLarge {
                    url: url.to_owned(),
                });
            }
        }
        Ok(body)
    }
}

/// The RSA public key of a PEM certificate that is valid now.
fn public_key(pem: &[u8]) -> Result<RsaPublicKey, CertificateError> {
    let cert = x509_cert::Certificate::from_pem(pem).map_err(CertificateError::NotPem)?;
    let validity = &cert.tbs_certificate.validity;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let from = validity.not_before.to_date_time().unix_duration();
    let until = validity.not_after.to_date_time().unix_duration();
    if now < from || now > until {
        return Err(CertificateError::NotValidNow);
    }
    let spki = cert
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .map_err(CertificateError::PublicKey)?;
    RsaPublicKey::from_public_key_der(&spki).map_err(CertificateError::NotRsa)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_sns_hosts_and_the_operators_prefixes_are_trusted() {
        let none = TrustedUrls::default();
        for good in [
            "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem",
            "https://sns.eu-central-1.amazonaws.com/?Action=ConfirmSubscription&Token=x",
        ] {
            assert!(none.trusts(good), "{good}");
        }
        for bad in [
            "http://sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com.evil.example/x.pem",
            "https://evil.example/sns.us-east-1.amazonaws.com/x.pem",
            "https://sns..amazonaws.com/x.pem",
            "https://sns.US-EAST-1.amazonaws.com:8443/x.pem",
            "https://user@sns.us-east-1.amazonaws.com/x.pem",
            "https://s3.amazonaws.com/x.pem",
            "not a url",
        ] {
            assert!(!none.trusts(bad), "{bad}");
        }
        let operator = TrustedUrls::new(&["http://127.0.0.1:9999/certs/".into()]).unwrap();
        assert!(operator.trusts("http://127.0.0.1:9999/certs/a.pem"));
        assert!(!operator.trusts("http://127.0.0.1:9999/other/a.pem"));
        assert!(!operator.trusts("http://127.0.0.1:99999/certs/a.pem"));
        assert!(TrustedUrls::new(&["http://127.0.0.1:9999/certs".into()]).is_err());
        assert!(TrustedUrls::new(&["ftp://x.example/".into()]).is_err());
    }

    #[test]
    fn the_canonical_string_covers_the_documented_fields_in_order() {
        let message = SnsMessage {
            kind: "Notification".into(),
            message_id: "m".into(),
            topic_arn: "arn:t".into(),
            subject: None,
            message: "{}".into(),
            timestamp: "2026-11-27T05:00:00.000Z".into(),
            token: None,
            subscribe_url: None,
            signature_version: Some("1".into()),
            signature: Some("x".into()),
            signing_cert_url: None,
        };
        assert_eq!(
            canonical(&message).unwrap(),
            "Message\n{}\nMessageId\nm\nTimestamp\n2026-11-27T05:00:00.000Z\nTopicArn\narn:t\nType\nNotification\n"
        );
        let confirm = SnsMessage {
            kind: "SubscriptionConfirmation".into(),
            subscribe_url: Some("https://s".into()),
            token: Some("tok".into()),
            ..message
        };
        assert_eq!(
            canonical(&confirm).unwrap(),
            "Message\n{}\nMessageId\nm\nSubscribeURL\nhttps://s\nTimestamp\n2026-11-27T05:00:00.000Z\nToken\ntok\nTopicArn\narn:t\nType\nSubscriptionConfirmation\n"
        );
    }
}
