//! `linktrack relay` and DKIM (issue 54): a message signed upstream,
//! tracked by the relay, reaches the MTA signed again with the domain's
//! `--dkim-key` (the signature verifies against the published key, the
//! links in the body tracked); without a key the broken signature is gone
//! and the log names its domain; a message forwarded untouched keeps the
//! upstream signature, which still verifies. Keys are made by openssl;
//! signatures are made and checked by mail-auth, its DNS answers taken
//! from a table the test fills (no DNS traffic).

use crate::common::build::BASE;
use crate::common::smtp_sink::SmtpSink;
use crate::common::TestDb;
use crate::relay::{smtplib, start_relay};
use base64::Engine;
use mail_auth::common::crypto::{RsaKey, Sha256};
use mail_auth::common::headers::HeaderWriter;
use mail_auth::common::parse::TxtRecordParser;
use mail_auth::common::verify::DomainKey;
use mail_auth::dkim::DkimSigner;
use mail_auth::hickory_resolver::config::{ResolverConfig, ResolverOpts};
use mail_auth::{AuthenticatedMessage, DkimResult, MessageAuthenticator, ResolverCache, Txt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// An HTML newsletter of example.com, as a platform signs it.
const NEWSLETTER: &str = "From: News <news@example.com>\r\n\
To: reader@example.net\r\n\
Subject: Spring\r\n\
Date: Sun, 29 Nov 2026 12:00:00 +0000\r\n\
Message-ID: <spring-1@example.com>\r\n\
X-Linktrack-Mailing: spring-dkim\r\n\
MIME-Version: 1.0\r\n\
Content-Type: multipart/alternative; boundary=\"b1\"\r\n\r\n\
--b1\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nRead https://example.com/page\r\n\
--b1\r\nContent-Type: text/html; charset=utf-8\r\n\r\n\
<html><body><p><a href=\"https://example.com/page\">read</a></p></body></html>\r\n\
--b1--\r\n";

/// A plain-text receipt: nothing for the relay to track.
const RECEIPT: &str = "From: Shop <shop@example.com>\r\n\
To: buyer@example.net\r\n\
Subject: Your receipt\r\n\
Date: Sun, 29 Nov 2026 12:00:00 +0000\r\n\
Message-ID: <receipt-1@example.com>\r\n\
MIME-Version: 1.0\r\n\
Content-Type: text/plain; charset=utf-8\r\n\r\n\
Thank you. https://example.com/orders/1\r\n";

/// A private key made by openssl (`RSA` of 2048 bits, or `ED25519`), in
/// `dir`; returns its file and the TXT record of its public key.
fn make_key(dir: &Path, name: &str, algorithm: &str) -> (PathBuf, String) {
    let file = dir.join(format!("{name}.pem"));
    let mut genpkey = Command::new("openssl");
    genpkey
        .args(["genpkey", "-algorithm", algorithm, "-out"])
        .arg(&file);
    if algorithm == "RSA" {
        genpkey.args(["-pkeyopt", "rsa_keygen_bits:2048"]);
    }
    let made = genpkey.output().expect("openssl runs");
    assert!(made.status.success(), "{made:?}");
    let public = Command::new("openssl")
        .args(["pkey", "-pubout", "-outform", "DER", "-in"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(public.status.success(), "{public:?}");
    let engine = base64::engine::general_purpose::STANDARD;
    let record = if algorithm == "RSA" {
        format!("v=DKIM1; k=rsa; p={}", engine.encode(&public.stdout))
    } else {
        // An Ed25519 record holds the bare 32-byte key (RFC 8463), the
        // end of its SubjectPublicKeyInfo.
        let raw = &public.stdout[public.stdout.len() - 32..];
        format!("v=DKIM1; k=ed25519; p={}", engine.encode(raw))
    };
    (file, record)
}

/// `message` signed as a platform would sign it, for `domain` with the
/// key in `key_file` (From, To, Subject, Date, Message-ID and the
/// relay's own X-Linktrack-Mailing when it is there).
fn sign_upstream(message: &str, domain: &str, selector: &str, key_file: &Path) -> String {
    let pem = std::fs::read(key_file).unwrap();
    let key = RsaKey::<Sha256>::from_key_der(PrivateKeyDer::from_pem_slice(&pem).unwrap()).unwrap();
    let signature = DkimSigner::from_key(key)
        .domain(domain)
        .selector(selector)
        .headers(["From", "To", "Subject", "Date", "Message-ID"])
        .sign(message.as_bytes())
        .unwrap();
    format!("{}{message}", signature.to_header())
}

/// DNS answers a test gives: TXT records by name.
#[derive(Default)]
struct TxtTable(Mutex<HashMap<Box<str>, Txt>>);

impl ResolverCache<Box<str>, Txt> for TxtTable {
    fn get<Q>(&self, name: &Q) -> Option<Txt>
    where
        Box<str>: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.lock().unwrap().get(name).cloned()
    }

    fn remove<Q>(&self, name: &Q) -> Option<Txt>
    where
        Box<str>: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.lock().unwrap().remove(name)
    }

    fn insert(&self, key: Box<str>, value: Txt, _: Instant) {
        self.0.lock().unwrap().insert(key, value);
    }
}

/// Each DKIM signature of `message` and whether it verifies, as
/// (d=, s=, passes), against `records` ((name, TXT text)) alone.
async fn verify(message: &str, records: &[(&str, &str)]) -> Vec<(String, String, bool)> {
    let table = TxtTable::default();
    for (name, text) in records {
        let key = DomainKey::parse(text.as_bytes()).unwrap();
        table.insert(
            format!("{name}.").into_boxed_str(),
            Txt::DomainKey(Arc::new(key)),
            Instant::now(),
        );
    }
    // No name server: an answer not in the table is a failure, never a query.
    let authenticator = MessageAuthenticator::new(
        ResolverConfig::from_parts(None, vec![], vec![]),
        ResolverOpts::default(),
    )
    .unwrap();
    let crlf = message.replace("\r\n", "\n").replace('\n', "\r\n");
    let parsed = AuthenticatedMessage::parse(crlf.as_bytes()).unwrap();
    let params = mail_auth::Parameters::new(&parsed).with_txt_cache(&table);
    authenticator
        .verify_dkim(params)
        .await
        .iter()
        .map(|output| {
            let signature = output.signature().unwrap();
            (
                signature.d.clone(),
                signature.s.clone(),
                *output.result() == DkimResult::Pass,
            )
        })
        .collect()
}

/// Send `message` from news@example.com to `to` through the relay.
fn send(port: u16, to: &str, message: &str) {
    let script = format!(
        "s = smtplib.SMTP('127.0.0.1', PORT, source_address=('127.0.0.3', 0))\n\
         out('send', s.sendmail('news@example.com', [{to:?}], {message:?}.encode()))\n\
         s.quit()\n"
    );
    let replies = smtplib(port, &script);
    assert_eq!(replies[0][1], serde_json::json!({}), "{replies:?}");
}

#[tokio::test]
async fn a_tracked_letter_signed_upstream_is_signed_again_with_the_domains_key() {
    let db = TestDb::new().await;
    let keys = tempfile::tempdir().unwrap();
    let (upstream_key, upstream_record) = make_key(keys.path(), "upstream", "RSA");
    let (relay_key, relay_record) = make_key(keys.path(), "relay", "RSA");
    let sink = SmtpSink::start(&[]);
    let spool = tempfile::tempdir().unwrap();
    let flag = format!("example.com=relay2026:{}", relay_key.display());
    let relay = start_relay(&db, &sink.url(), spool.path(), &["--dkim-key", &flag]).await;
    assert!(
        relay.log().contains(&relay_record),
        "the log names the record to publish ({relay_record}): {}",
        relay.log()
    );

    let signed = sign_upstream(NEWSLETTER, "example.com", "platform", &upstream_key);
    let records = [
        ("platform._domainkey.example.com", upstream_record.as_str()),
        ("relay2026._domainkey.example.com", relay_record.as_str()),
    ];
    assert_eq!(
        verify(&signed, &records).await,
        vec![("example.com".into(), "platform".into(), true)],
        "the upstream signature verifies before the relay"
    );
    send(relay.addr.port(), "reader@example.net", &signed);

    let messages = sink.wait_for(1);
    assert_eq!(messages.len(), 1, "{}", relay.log());
    let letter = &messages[0];
    assert_eq!(
        verify(letter, &records).await,
        vec![("example.com".into(), "relay2026".into(), true)],
        "only the relay's signature, and it verifies: {letter}"
    );
    assert!(
        letter.contains("https://t.example.test/c/"),
        "tracked: {letter}"
    );
    assert!(
        !letter.contains("href=\"https://example.com/page\""),
        "{letter}"
    );
    let signature = letter
        .split("DKIM-Signature:")
        .nth(1)
        .and_then(|rest| rest.split("\nb=").next())
        .unwrap_or_default()
        .replace(['\r', '\n', '\t', ' '], "");
    assert!(
        signature.contains("c=relaxed/relaxed") && signature.contains("a=rsa-sha256"),
        "{signature}"
    );
    for field in [
        "From",
        "Subject",
        "List-Unsubscribe",
        "List-Unsubscribe-Post",
    ] {
        let covered = signature
            .split("h=")
            .nth(1)
            .and_then(|h| h.split(';').next())
            .is_some_and(|h| h.split(':').any(|f| f.eq_ignore_ascii_case(field)));
        assert!(covered, "h= names {field}: {signature}");
    }
}

#[tokio::test]
async fn without_a_key_the_broken_signature_is_removed_and_logged_naming_its_domain() {
    let db = TestDb::new().await;
    let keys = tempfile::tempdir().unwrap();
    let (upstream_key, _) = make_key(keys.path(), "upstream", "RSA");
    // A key for another domain signs nothing of example.com's.
    let (other_key, _) = make_key(keys.path(), "other", "ED25519");
    let sink = SmtpSink::start(&[]);
    let spool = tempfile::tempdir().unwrap();
    let flag = format!("other.example=s1:{}", other_key.display());
    let relay = start_relay(&db, &sink.url(), spool.path(), &["--dkim-key", &flag]).await;
    let signed = sign_upstream(NEWSLETTER, "example.com", "platform", &upstream_key);
    send(relay.addr.port(), "reader@example.net", &signed);
    let messages = sink.wait_for(1);
    assert_eq!(messages.len(), 1, "{}", relay.log());
    assert!(
        !messages[0].to_ascii_lowercase().contains("dkim-signature"),
        "the broken signature is gone: {}",
        messages[0]
    );
    assert!(messages[0].contains("https://t.example.test/c/"));
    let log = relay.log();
    assert!(
        log.lines()
            .any(|line| line.contains("removed a DKIM signature")
                && line.contains("example.com")
                && !line.contains("other.example")),
        "{log}"
    );
}

#[tokio::test]
async fn an_untouched_plain_text_message_keeps_its_signature() {
    let db = TestDb::new().await;
    let keys = tempfile::tempdir().unwrap();
    let (upstream_key, upstream_record) = make_key(keys.path(), "upstream", "RSA");
    let (relay_key, relay_record) = make_key(keys.path(), "relay", "ED25519");
    let sink = SmtpSink::start(&[]);
    let spool = tempfile::tempdir().unwrap();
    let flag = format!("example.com=ed:{}", relay_key.display());
    let relay = start_relay(&db, &sink.url(), spool.path(), &["--dkim-key", &flag]).await;
    let signed = sign_upstream(RECEIPT, "example.com", "platform", &upstream_key);
    send(relay.addr.port(), "buyer@example.net", &signed);
    let messages = sink.wait_for(1);
    assert_eq!(messages.len(), 1, "{}", relay.log());
    let records = [
        ("platform._domainkey.example.com", upstream_record.as_str()),
        ("ed._domainkey.example.com", relay_record.as_str()),
    ];
    assert_eq!(
        verify(&messages[0], &records).await,
        vec![("example.com".into(), "platform".into(), true)],
        "the upstream signature alone, still verifying: {}",
        messages[0]
    );
}

#[tokio::test]
async fn an_ed25519_key_signs_and_its_signature_verifies() {
    let db = TestDb::new().await;
    let keys = tempfile::tempdir().unwrap();
    let (relay_key, relay_record) = make_key(keys.path(), "relay", "ED25519");
    let sink = SmtpSink::start(&[]);
    let spool = tempfile::tempdir().unwrap();
    // A key of the parent domain signs mail of news.example.com (aligned
    // for DMARC's relaxed mode).
    let flag = format!("example.com=ed:{}", relay_key.display());
    let relay = start_relay(&db, &sink.url(), spool.path(), &["--dkim-key", &flag]).await;
    let message = NEWSLETTER.replace("news@example.com", "news@news.example.com");
    send(relay.addr.port(), "reader@example.net", &message);
    let messages = sink.wait_for(1);
    assert_eq!(messages.len(), 1, "{}", relay.log());
    assert_eq!(
        verify(
            &messages[0],
            &[("ed._domainkey.example.com", relay_record.as_str())]
        )
        .await,
        vec![("example.com".into(), "ed".into(), true)],
        "{}",
        messages[0]
    );
}

#[tokio::test]
async fn a_key_file_that_is_not_one_stops_the_start_naming_the_flag_and_file() {
    let db = TestDb::new().await;
    let spool = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let bad = keys.path().join("not-a-key.pem");
    std::fs::write(&bad, "not a key").unwrap();
    let cases = [
        (format!("example.com=s1:{}", bad.display()), "not-a-key.pem"),
        (
            format!(
                "example.com=s1:{}",
                keys.path().join("missing.pem").display()
            ),
            "missing.pem",
        ),
        ("example.com:s1".to_owned(), "DOMAIN=SELECTOR:FILE"),
    ];
    for (flag, named) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_linktrack"))
            .args(["relay", "--listen", "127.0.0.1:0"])
            .args(["--smtp", "smtp://127.0.0.1:9", "--base-url", BASE])
            .arg("--spool")
            .arg(spool.path())
            .args(["--dkim-key", &flag])
            .env("DATABASE_URL", &db.url)
            .env_remove("LINKTRACK_SMTP_URL")
            .env_remove("LINKTRACK_RELAY_DKIM_KEYS")
            .output()
            .unwrap();
        assert!(!output.status.success(), "{flag}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("--dkim-key") && stderr.contains(named),
            "{flag}: {stderr}"
        );
    }
}
