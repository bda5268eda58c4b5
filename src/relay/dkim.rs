//! DKIM (RFC 6376) for what the relay changes. Tracking rewrites a
//! letter's body, so a signature made upstream no longer verifies: the
//! relay removes it, and signs the letter again with the sender domain's
//! key when `--dkim-key DOMAIN=SELECTOR:FILE` gives one (relaxed/relaxed,
//! SHA-256, RSA or Ed25519, through mail-auth). Without a key the removal
//! is counted (`linktrack_relay_dkim_removed_total{domain}`) and logged
//! naming the domain. A message forwarded untouched (no HTML part) keeps
//! its signatures, unless one signed an `X-Linktrack-*` field the relay
//! removes (docs/relay.md, "DKIM").
//!
//! The keys are read once at start, so a bad flag or file stops the start
//! naming both. Signing (RSA-2048: about a millisecond a letter) runs on a
//! blocking thread, off the sessions' executor (`track.rs` calls
//! [`Dkim::seal`] there).

use super::headers::{field_value, whole_fields, without_whole_fields};
use base64::Engine;
use mail_auth::common::crypto::{Algorithm, DkimKey, Ed25519Key, RsaKey, Sha256, SigningKey};
use mail_auth::common::headers::{HeaderWriter, Writable};
use mail_auth::dkim::{Canonicalization, DkimSigner, Signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;
use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

/// The header field of a signature.
const SIGNATURE_FIELD: &str = "dkim-signature";

/// The fields the relay's signature covers, those of them a letter has:
/// what a reader sees and what the relay adds (`List-Unsubscribe`, whose
/// one-click POST mailbox providers trust only under a signature).
const SIGNED_FIELDS: [&str; 15] = [
    "From",
    "Sender",
    "Reply-To",
    "To",
    "Cc",
    "Subject",
    "Date",
    "Message-ID",
    "In-Reply-To",
    "References",
    "MIME-Version",
    "Content-Type",
    "Content-Transfer-Encoding",
    "List-Unsubscribe",
    "List-Unsubscribe-Post",
];

/// The domain label of a removed signature whose `d=` cannot be read.
const UNREADABLE_DOMAIN: &str = "unreadable";

/// One `--dkim-key DOMAIN=SELECTOR:FILE`, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DkimKeySpec {
    /// The signing domain (`d=`), lowercase.
    pub domain: String,
    /// The selector (`s=`): the key's record is `SELECTOR._domainkey.DOMAIN`.
    pub selector: String,
    /// The PEM private key.
    pub file: PathBuf,
}

/// A `--dkim-key` value that is not `DOMAIN=SELECTOR:FILE`.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not DOMAIN=SELECTOR:FILE: {problem}")]
pub struct BadDkimKeySpec {
    value: String,
    problem: &'static str,
}

impl FromStr for DkimKeySpec {
    type Err = BadDkimKeySpec;

    fn from_str(value: &str) -> Result<DkimKeySpec, BadDkimKeySpec> {
        let bad = |problem| BadDkimKeySpec {
            value: value.to_owned(),
            problem,
        };
        let (domain, rest) = value.split_once('=').ok_or_else(|| bad("no '='"))?;
        let (selector, file) = rest
            .split_once(':')
            .ok_or_else(|| bad("no ':' between the selector and the file"))?;
        let domain = domain.trim().trim_end_matches('.').to_ascii_lowercase();
        let is_name = |s: &str| {
            !s.is_empty()
                && s.split('.').all(|label| {
                    !label.is_empty()
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                })
        };
        if !is_name(&domain) {
            return Err(bad("the domain is not a DNS name"));
        }
        if !is_name(selector) {
            return Err(bad(
                "the selector is not DNS labels (letters, digits, '-', '_', '.')",
            ));
        }
        if file.is_empty() {
            return Err(bad("no file"));
        }
        Ok(DkimKeySpec {
            domain,
            selector: selector.to_owned(),
            file: PathBuf::from(file),
        })
    }
}

impl std::fmt::Display for DkimKeySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}={}:{}",
            self.domain,
            self.selector,
            self.file.display()
        )
    }
}

/// A `--dkim-key` whose file cannot be used, named with the flag.
#[derive(Debug, thiserror::Error)]
pub enum DkimKeyError {
    #[error("--dkim-key {spec}: cannot read {}: {source}", .spec.file.display())]
    Read {
        spec: DkimKeySpec,
        #[source]
        source: std::io::Error,
    },
    #[error("--dkim-key {spec}: {}: {problem}", .spec.file.display())]
    Unusable {
        spec: DkimKeySpec,
        problem: &'static str,
    },
    #[error("--dkim-key {spec}: {}: no PEM private key in it ({source})", .spec.file.display())]
    NoPem {
        spec: DkimKeySpec,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error(
        "--dkim-key {spec}: {}: not a usable RSA key ({source}); RSA keys need 2048 bits or more",
        .spec.file.display()
    )]
    WeakRsa {
        spec: DkimKeySpec,
        #[source]
        source: mail_auth::Error,
    },
    #[error("--dkim-key {spec}: a second key for {}; one key per domain", .spec.domain)]
    Twice { spec: DkimKeySpec },
}

/// One domain's key.
struct DomainKey {
    selector: String,
    key: Arc<DkimKey>,
}

/// A domain's key shared by the letters it signs (mail-auth's signer
/// takes its key by value; the key itself is read once).
struct SharedKey(Arc<DkimKey>);

impl SigningKey for SharedKey {
    type Hasher = Sha256;

    fn sign(&self, input: impl Writable) -> mail_auth::Result<Vec<u8>> {
        self.0.sign(input)
    }

    fn algorithm(&self) -> Algorithm {
        self.0.algorithm()
    }
}

/// The relay's DKIM keys, by domain.
#[derive(Default)]
pub(crate) struct Dkim {
    keys: HashMap<String, DomainKey>,
}

/// What a message's letters need, decided once per message from what
/// came in (cheap: no cryptography).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Forwarded as they are.
    AsIs,
    /// The `strip`ped upstream signatures removed (whole fields, byte for
    /// byte), then signed for `sign_as` when a key applies; else the
    /// `removed` domains are counted and logged.
    Seal {
        strip: Vec<Vec<u8>>,
        removed: Vec<String>,
        sign_as: Option<String>,
    },
}

impl Dkim {
    /// Read every key; the first that cannot be used stops the start.
    pub(crate) fn load(specs: &[DkimKeySpec]) -> Result<Dkim, DkimKeyError> {
        let mut keys = HashMap::new();
        for spec in specs {
            if keys.contains_key(&spec.domain) {
                return Err(DkimKeyError::Twice { spec: spec.clone() });
            }
            let (key, record) = read_key(spec)?;
            tracing::info!(
                domain = %spec.domain,
                record = format!("{}._domainkey.{}", spec.selector, spec.domain),
                txt = %record,
                "DKIM key loaded; its public key must be published as this TXT record"
            );
            keys.insert(
                spec.domain.clone(),
                DomainKey {
                    selector: spec.selector.clone(),
                    key: Arc::new(key),
                },
            );
        }
        Ok(Dkim { keys })
    }

    /// What `raw`'s letters need: `rewritten` when tracking changed their
    /// body; `removed_fields` the fields the relay took out of its header.
    pub(crate) fn plan(&self, raw: &[u8], rewritten: bool, removed_fields: &[&str]) -> Plan {
        let mut strip = Vec::new();
        let mut removed = Vec::new();
        for whole in whole_fields(raw, SIGNATURE_FIELD) {
            let signature = signature_of(whole);
            let broken = rewritten
                || signature.as_ref().is_some_and(|s| {
                    s.h.iter()
                        .any(|h| removed_fields.iter().any(|r| h.eq_ignore_ascii_case(r)))
                });
            if broken {
                strip.push(whole.to_vec());
                let domain = signature
                    .map(|s| s.d.to_ascii_lowercase())
                    .filter(|d| !d.is_empty())
                    .unwrap_or_else(|| UNREADABLE_DOMAIN.to_owned());
                if !removed.contains(&domain) {
                    removed.push(domain);
                }
            }
        }
        if strip.is_empty() && !rewritten {
            return Plan::AsIs;
        }
        let sign_as = self.signing_domain(from_domain(raw).as_deref(), &removed);
        if strip.is_empty() && sign_as.is_none() {
            return Plan::AsIs;
        }
        Plan::Seal {
            strip,
            removed,
            sign_as,
        }
    }

    /// The domain whose key signs: the From address's domain, else its
    /// nearest parent with a key (aligned for DMARC's relaxed mode), else
    /// the domain of a removed signature.
    fn signing_domain(&self, from: Option<&str>, removed: &[String]) -> Option<String> {
        let mut candidate = from;
        while let Some(domain) = candidate {
            if self.keys.contains_key(domain) {
                return Some(domain.to_owned());
            }
            candidate = domain.split_once('.').map(|(_, parent)| parent);
        }
        removed
            .iter()
            .find(|d| self.keys.contains_key(d.as_str()))
            .cloned()
    }

    /// Carry out `plan` on a message's letters (their data; on a blocking
    /// thread: it signs each). A letter that cannot be signed goes on
    /// unsigned, logged.
    pub(crate) fn seal<'a>(&self, plan: &Plan, letters: impl IntoIterator<Item = &'a mut Vec<u8>>) {
        let Plan::Seal {
            strip,
            removed,
            sign_as,
        } = plan
        else {
            return;
        };
        let key = sign_as
            .as_ref()
            .and_then(|domain| Some((domain, self.keys.get(domain)?)));
        let mut unsigned = 0usize;
        for data in letters {
            if !strip.is_empty() {
                *data = without_whole_fields(data, strip);
            }
            let Some((domain, key)) = key else {
                unsigned += 1;
                continue;
            };
            match sign(data, domain, key) {
                Ok(field) => {
                    let mut signed = field.into_bytes();
                    signed.extend_from_slice(data);
                    *data = signed;
                    let label = domain.clone();
                    metrics::counter!("linktrack_relay_dkim_signed_total", "domain" => label)
                        .increment(1);
                }
                Err(err) => {
                    unsigned += 1;
                    tracing::warn!(
                        %domain,
                        %err,
                        "a relayed letter could not be DKIM-signed; it goes on unsigned"
                    );
                }
            }
        }
        if unsigned == 0 {
            return;
        }
        for domain in removed {
            let label = domain.clone();
            metrics::counter!("linktrack_relay_dkim_removed_total", "domain" => label).increment(1);
            tracing::warn!(
                %domain,
                letters = unsigned,
                "removed a DKIM signature the relay's rewriting broke; \
                 give --dkim-key for the sender's domain to sign again"
            );
        }
    }
}

/// One letter's `DKIM-Signature` field (its line end included).
fn sign(message: &[u8], domain: &str, key: &DomainKey) -> mail_auth::Result<String> {
    let fields: Vec<&str> = SIGNED_FIELDS
        .into_iter()
        .filter(|name| field_value(message, name).is_some())
        .collect();
    let signature = DkimSigner::from_key(SharedKey(Arc::clone(&key.key)))
        .domain(domain)
        .selector(&key.selector)
        .headers(fields)
        .header_canonicalization(Canonicalization::Relaxed)
        .body_canonicalization(Canonicalization::Relaxed)
        .sign(message)?;
    Ok(signature.to_header())
}

/// A `DKIM-Signature` field's tags; `None` when they cannot be read.
fn signature_of(whole: &[u8]) -> Option<Signature> {
    let colon = memchr::memchr(b':', whole)?;
    Signature::parse(&whole[colon + 1..]).ok()
}

/// The domain of the message's From address, lowercase.
fn from_domain(raw: &[u8]) -> Option<String> {
    crate::builder::tracked_parts::sender_domain(&field_value(raw, "from")?)
}

/// The key of `spec` and its DNS record's text (`v=DKIM1; k=…; p=…`).
fn read_key(spec: &DkimKeySpec) -> Result<(DkimKey, String), DkimKeyError> {
    let unusable = |problem: &'static str| DkimKeyError::Unusable {
        spec: spec.clone(),
        problem,
    };
    let pem = std::fs::read(&spec.file).map_err(|source| DkimKeyError::Read {
        spec: spec.clone(),
        source,
    })?;
    let der = PrivateKeyDer::from_pem_slice(&pem).map_err(|source| DkimKeyError::NoPem {
        spec: spec.clone(),
        source,
    })?;
    let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let rsa_record = |key: &RsaKey<Sha256>| {
        rsa_public_key_info(key)
            .map(|info| format!("v=DKIM1; k=rsa; p={}", base64(&info)))
            .ok_or_else(|| unusable("its public key cannot be encoded"))
    };
    match der {
        PrivateKeyDer::Pkcs1(_) => {
            let key =
                RsaKey::<Sha256>::from_key_der(der).map_err(|source| DkimKeyError::WeakRsa {
                    spec: spec.clone(),
                    source,
                })?;
            let record = rsa_record(&key)?;
            Ok((DkimKey::Rsa(key), record))
        }
        PrivateKeyDer::Pkcs8(pkcs8) => {
            let bytes = pkcs8.secret_pkcs8_der().to_vec();
            let as_rsa = RsaKey::<Sha256>::from_key_der(PrivateKeyDer::Pkcs8(bytes.clone().into()));
            if let Ok(key) = as_rsa {
                let record = rsa_record(&key)?;
                return Ok((DkimKey::Rsa(key), record));
            }
            let key = Ed25519Key::from_pkcs8_maybe_unchecked_der(&bytes).map_err(|_| {
                unusable("neither an RSA key of 2048 bits or more nor an Ed25519 key")
            })?;
            let record = format!("v=DKIM1; k=ed25519; p={}", base64(&key.public_key()));
            Ok((DkimKey::Ed25519(key), record))
        }
        _ => Err(unusable("an EC key: DKIM signs with RSA or Ed25519")),
    }
}

/// An RSA key's public half as DKIM records carry it: DER
/// SubjectPublicKeyInfo (ring gives the bare PKCS#1 RSAPublicKey).
fn rsa_public_key_info(key: &RsaKey<Sha256>) -> Option<Vec<u8>> {
    use rsa::pkcs1::DecodeRsaPublicKey;
    use rsa::pkcs8::EncodePublicKey;
    let public = rsa::RsaPublicKey::from_pkcs1_der(&key.public_key()).ok()?;
    Some(public.to_public_key_der().ok()?.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signature field as a platform adds it (its `b=` and `bh=` are
    /// never checked here), signing the fields `h`.
    fn upstream_signature(domain: &str, h: &str) -> String {
        format!(
            "DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d={domain}; s=s1;\r\n\
             \th={h}; bh=AAAA; b=AAAA\r\n"
        )
    }

    const RECEIPT: &str = "From: Shop <shop@example.com>\r\nSubject: hi\r\n\
        X-Linktrack-Mailing: receipts\r\n\r\nThanks\r\n";

    #[test]
    fn a_flag_value_is_domain_selector_and_file() {
        let spec: DkimKeySpec = "Example.COM.=s2026:/etc/dkim/a:b.pem".parse().unwrap();
        assert_eq!(spec.domain, "example.com");
        assert_eq!(spec.selector, "s2026");
        assert_eq!(spec.file, PathBuf::from("/etc/dkim/a:b.pem"));
        for bad in [
            "example.com",
            "example.com=s1",
            "=s1:f",
            "example.com=:f",
            "example.com=s1:",
            "a b=s1:f",
        ] {
            let err = bad.parse::<DkimKeySpec>().unwrap_err();
            assert!(
                err.to_string().contains("DOMAIN=SELECTOR:FILE"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn an_untouched_message_loses_only_a_signature_over_the_fields_removed() {
        let dkim = Dkim::default();
        let over_ours = upstream_signature("example.com", "From:Subject:X-Linktrack-Mailing");
        let other = upstream_signature("esp.example", "From:Subject");
        let raw = format!("{over_ours}{other}{RECEIPT}");
        let plan = dkim.plan(raw.as_bytes(), false, &["x-linktrack-mailing"]);
        assert_eq!(
            plan,
            Plan::Seal {
                strip: vec![over_ours.clone().into_bytes()],
                removed: vec!["example.com".to_owned()],
                sign_as: None,
            }
        );
        let mut data = raw.clone().into_bytes();
        dkim.seal(&plan, [&mut data]);
        assert_eq!(
            String::from_utf8(data).unwrap(),
            format!("{other}{RECEIPT}")
        );
        // Nothing the relay removed is signed: the message goes as it is.
        let raw = format!("{other}{RECEIPT}");
        assert_eq!(
            dkim.plan(raw.as_bytes(), false, &["x-linktrack-mailing"]),
            Plan::AsIs
        );
        // Tracked and unsigned, without a key: nothing to do either.
        assert_eq!(dkim.plan(RECEIPT.as_bytes(), true, &[]), Plan::AsIs);
    }

    #[test]
    fn a_removal_without_a_key_is_counted_by_domain() {
        let dkim = Dkim::default();
        let raw = format!(
            "{}{}{RECEIPT}",
            upstream_signature("Example.com", "From"),
            upstream_signature("esp.example", "From:Subject"),
        );
        let plan = dkim.plan(raw.as_bytes(), true, &[]);
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let mut letters = vec![raw.clone().into_bytes(), raw.into_bytes()];
        metrics::with_local_recorder(&recorder, || dkim.seal(&plan, letters.iter_mut()));
        for letter in &letters {
            assert_eq!(String::from_utf8_lossy(letter), RECEIPT);
        }
        let rendered = handle.render();
        for domain in ["example.com", "esp.example"] {
            let line = format!("linktrack_relay_dkim_removed_total{{domain=\"{domain}\"}} 1");
            assert!(rendered.contains(&line), "{line} in {rendered}");
        }
    }

    #[test]
    fn the_from_domain_or_its_parent_or_a_removed_signatures_domain_signs() {
        let key = || DomainKey {
            selector: "s".into(),
            key: Arc::new(DkimKey::Ed25519(
                Ed25519Key::from_pkcs8_der(&Ed25519Key::generate_pkcs8().unwrap()).unwrap(),
            )),
        };
        let dkim = Dkim {
            keys: HashMap::from([
                ("example.com".to_owned(), key()),
                ("esp.example".to_owned(), key()),
            ]),
        };
        assert_eq!(
            dkim.signing_domain(Some("example.com"), &[]).as_deref(),
            Some("example.com")
        );
        assert_eq!(
            dkim.signing_domain(Some("mail.example.com"), &[])
                .as_deref(),
            Some("example.com")
        );
        assert_eq!(
            dkim.signing_domain(Some("shop.example"), &["esp.example".into()])
                .as_deref(),
            Some("esp.example")
        );
        assert_eq!(
            dkim.signing_domain(Some("shop.example"), &["x.example".into()]),
            None
        );
        assert_eq!(dkim.signing_domain(None, &[]), None);
        // A tracked letter of a domain with a key is signed, even unsigned upstream.
        let raw = RECEIPT.replace("shop@example.com", "shop@mail.example.com");
        let plan = dkim.plan(raw.as_bytes(), true, &[]);
        assert_eq!(
            plan,
            Plan::Seal {
                strip: vec![],
                removed: vec![],
                sign_as: Some("example.com".into())
            }
        );
        let mut data = raw.clone().into_bytes();
        dkim.seal(&plan, [&mut data]);
        let signed = String::from_utf8(data).unwrap();
        assert!(
            signed.starts_with(
                "DKIM-Signature: v=1; a=ed25519-sha256; s=s; d=example.com; c=relaxed/relaxed;"
            ),
            "{signed}"
        );
        assert!(signed.ends_with(&raw));
    }
}
