//! The providers' webhooks on a real server over a real socket:
//! `POST /hooks/ses` with SNS messages signed by a real RSA key whose
//! certificate (made here) a loopback listener of the test serves under
//! the operator's `--sns-cert-url-prefix`, and `POST /hooks/mailgun` with
//! real HMACs. A good post suppresses the letter's recipient; a forged,
//! unsigned, stale or replayed one is refused and counted; the same
//! event twice changes nothing; bad JSON gets a clear error and the next
//! post still works.

use crate::bounces::{build_letters, Built};
use crate::common::wait::{eventually_eq, PATIENCE};
use crate::common::{client, metrics_text, TestDb, TestServer};
use base64::Engine;
use hmac::{Hmac, Mac};
use linktrack::server::hooks::{sns::TrustedUrls, HookSettings};
use linktrack::server::AppSettings;
use rsa::pkcs1v15::SigningKey;
use rsa::signature::{SignatureEncoding, Signer};
use rsa::RsaPrivateKey;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TOPIC: &str = "arn:aws:sns:eu-west-1:123456789012:ses-feedback";
const MAILGUN_KEY: &str = "key-0123456789abcdef-test";

/// An SNS signing key and its certificate, served by a loopback listener
/// (`/certs/sns.pem`), which also answers subscription confirmations
/// (`/certs/confirm`) and counts them.
struct FakeSnsHost {
    key: RsaPrivateKey,
    addr: SocketAddr,
    confirmations: Arc<AtomicUsize>,
}

impl FakeSnsHost {
    async fn start() -> FakeSnsHost {
        let mut rng = rsa::rand_core::OsRng;
        let key = RsaPrivateKey::new(&mut rng, 2048).expect("an RSA key");
        let pem = certificate(&key);
        let confirmations = Arc::new(AtomicUsize::new(0));
        let counted = confirmations.clone();
        let app = axum::Router::new()
            .route(
                "/certs/sns.pem",
                axum::routing::get(move || {
                    let pem = pem.clone();
                    async move { pem }
                }),
            )
            .route(
                "/certs/confirm",
                axum::routing::get(move || {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async { "<ConfirmSubscriptionResponse/>" }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeSnsHost {
            key,
            addr,
            confirmations,
        }
    }

    fn prefix(&self) -> String {
        format!("http://{}/certs/", self.addr)
    }

    fn cert_url(&self) -> String {
        format!("{}sns.pem", self.prefix())
    }

    /// `message` signed as SNS signs: `version` 1 (SHA1withRSA) or 2
    /// (SHA256withRSA) over the canonical string.
    fn sign(&self, message: &mut Value, version: &str) {
        let canonical = canonical(message);
        let signature = match version {
            "1" => SigningKey::<sha1::Sha1>::new(self.key.clone())
                .sign(canonical.as_bytes())
                .to_vec(),
            _ => SigningKey::<sha2::Sha256>::new(self.key.clone())
                .sign(canonical.as_bytes())
                .to_vec(),
        };
        message["SignatureVersion"] = json!(version);
        message["Signature"] = json!(base64::engine::general_purpose::STANDARD.encode(signature));
        message["SigningCertURL"] = json!(self.cert_url());
    }
}

/// A self-signed certificate of `key`, valid for an hour.
fn certificate(key: &RsaPrivateKey) -> String {
    use x509_cert::builder::{Builder, CertificateBuilder, Profile};
    use x509_cert::der::EncodePem;
    use x509_cert::spki::SubjectPublicKeyInfoOwned;
    let signer = SigningKey::<sha2::Sha256>::new(key.clone());
    let spki = SubjectPublicKeyInfoOwned::from_key(key.to_public_key()).unwrap();
    let builder = CertificateBuilder::new(
        Profile::Root,
        x509_cert::serial_number::SerialNumber::from(1u32),
        x509_cert::time::Validity::from_now(Duration::from_secs(3600)).unwrap(),
        x509_cert::name::Name::from_str("CN=sns.test").unwrap(),
        spki,
        &signer,
    )
    .unwrap();
    let cert = builder.build::<rsa::pkcs1v15::Signature>().unwrap();
    cert.to_pem(x509_cert::der::pem::LineEnding::LF).unwrap()
}

/// The string SNS signs, written from AWS's documentation (not from the
/// code under test).
fn canonical(message: &Value) -> String {
    let kind = message["Type"].as_str().unwrap();
    let fields: &[&str] = if kind == "Notification" {
        &[
            "Message",
            "MessageId",
            "Subject",
            "Timestamp",
            "TopicArn",
            "Type",
        ]
    } else {
        &[
            "Message",
            "MessageId",
            "SubscribeURL",
            "Timestamp",
            "Token",
            "TopicArn",
            "Type",
        ]
    };
    let mut out = String::new();
    for field in fields {
        if let Some(value) = message.get(*field).and_then(Value::as_str) {
            out.push_str(&format!("{field}\n{value}\n"));
        }
    }
    out
}

fn notification(id: &str, ses_message: &Value) -> Value {
    json!({
        "Type": "Notification",
        "MessageId": id,
        "TopicArn": TOPIC,
        "Message": ses_message.to_string(),
        "Timestamp": "2026-11-27T05:00:00.000Z",
    })
}

fn ses_bounce(letter: &Built, feedback: &str, bounce_type: &str, status: &str) -> Value {
    json!({
        "notificationType": "Bounce",
        "bounce": {
            "bounceType": bounce_type, "bounceSubType": "General",
            "bouncedRecipients": [{"emailAddress": letter.email, "action": "failed",
                "status": status, "diagnosticCode": format!("smtp; 550 {status} user unknown")}],
            "timestamp": "2026-11-27T05:00:00.000Z", "feedbackId": feedback
        },
        "mail": {"messageId": format!("ses-{feedback}"), "source": letter.envelope_from,
            "destination": [letter.email],
            "commonHeaders": {"messageId": letter.message_id}}
    })
}

fn ses_complaint(letter: &Built, feedback: &str) -> Value {
    json!({
        "notificationType": "Complaint",
        "complaint": {"complainedRecipients": [{"emailAddress": letter.email}],
            "complaintFeedbackType": "abuse", "feedbackId": feedback},
        "mail": {"messageId": format!("ses-{feedback}"), "source": letter.envelope_from,
            "commonHeaders": {"messageId": letter.message_id}}
    })
}

async fn hook_server(db: &TestDb, sns: &FakeSnsHost) -> TestServer {
    let prefix = sns.prefix();
    TestServer::start(db.pool.clone(), move |settings| {
        let mut server = settings.server.clone();
        server.hooks = HookSettings {
            ses_topics: vec![TOPIC.into()],
            sns_trusted: TrustedUrls::new(&[prefix]).unwrap(),
            mailgun_key: Some(MAILGUN_KEY.into()),
            mailgun_max_age: Duration::from_secs(900),
            soft: Default::default(),
        };
        AppSettings { server, ..settings }
    })
    .await
}

async fn post(url: &str, body: String) -> (u16, String) {
    let response = client()
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

async fn reason(db: &TestDb, email: &str) -> Option<String> {
    sqlx::query_scalar("SELECT reason FROM suppressions WHERE email = ?")
        .bind(email)
        .fetch_optional(&db.pool)
        .await
        .unwrap()
}

async fn decisions(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM bounces")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// The value of the metric line that starts with `name{` and has every
/// one of `labels` (`0` when absent).
fn counter(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .find(|line| labels.iter().all(|label| line.contains(label)))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn ses_posts_signed_by_sns_suppress_and_forged_ones_are_refused_and_counted() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    let sns = FakeSnsHost::start().await;
    let server = hook_server(&db, &sns).await;
    let url = format!("{}/hooks/ses", server.base);
    let (hard, complained, forged, soft) = (&letters[0], &letters[1], &letters[2], &letters[3]);

    // A permanent bounce, SignatureVersion 1: suppressed.
    let mut good = notification("n-1", &ses_bounce(hard, "fb-1", "Permanent", "5.1.1"));
    sns.sign(&mut good, "1");
    let (status, body) = post(&url, good.to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(&format!("hard bounce for {}", hard.email)),
        "{body}"
    );
    assert_eq!(reason(&db, &hard.email).await.as_deref(), Some("bounce"));
    assert_eq!(decisions(&db).await, 1);

    // SNS delivers it again: nothing changes.
    let (status, body) = post(&url, good.to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("second delivery"), "{body}");
    assert_eq!(decisions(&db).await, 1);

    // A complaint, SignatureVersion 2: suppressed with reason complaint.
    let mut complaint = notification("n-2", &ses_complaint(complained, "fb-2"));
    sns.sign(&mut complaint, "2");
    let (status, body) = post(&url, complaint.to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        reason(&db, &complained.email).await.as_deref(),
        Some("complaint")
    );

    // Forged: a signed message with its Message swapped for another
    // letter's bounce; unsigned; a certificate from an untrusted host; a
    // topic that is not ours. None suppresses anyone.
    let mut tampered = notification("n-3", &ses_bounce(forged, "fb-3", "Permanent", "5.1.1"));
    sns.sign(&mut tampered, "1");
    tampered["Message"] = json!(ses_bounce(forged, "fb-4", "Permanent", "5.1.1").to_string());
    let (status, body) = post(&url, tampered.to_string()).await;
    assert_eq!(
        (status, body.as_str()),
        (403, "refused: the signature does not verify\n")
    );
    let unsigned = notification("n-4", &ses_bounce(forged, "fb-5", "Permanent", "5.1.1"));
    let (status, body) = post(&url, unsigned.to_string()).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("unsigned"), "{body}");
    let mut elsewhere = notification("n-5", &ses_bounce(forged, "fb-6", "Permanent", "5.1.1"));
    sns.sign(&mut elsewhere, "2");
    elsewhere["SigningCertURL"] = json!("https://sns.eu-west-1.amazonaws.com.evil.test/x.pem");
    let (status, body) = post(&url, elsewhere.to_string()).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("not a trusted SNS certificate URL"), "{body}");
    let mut foreign = notification("n-6", &ses_bounce(forged, "fb-7", "Permanent", "5.1.1"));
    foreign["TopicArn"] = json!("arn:aws:sns:eu-west-1:999999999999:theirs");
    sns.sign(&mut foreign, "2");
    let (status, body) = post(&url, foreign.to_string()).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("TopicArn"), "{body}");
    assert_eq!(reason(&db, &forged.email).await, None);

    // Bad JSON: a clear 400, and the next post is served.
    let (status, body) = post(&url, "{\"Type\": \"Notification\",".into()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not an SNS message"), "{body}");
    let mut transient = notification("n-7", &ses_bounce(soft, "fb-8", "Transient", "4.2.2"));
    sns.sign(&mut transient, "2");
    let (status, body) = post(&url, transient.to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("counted, 1 of 3"), "{body}");
    assert_eq!(reason(&db, &soft.email).await, None);
    assert_eq!(decisions(&db).await, 3);

    // A subscription is confirmed at its SubscribeURL, under the same
    // host rule; one on another host is refused and not fetched.
    let mut subscribe = json!({
        "Type": "SubscriptionConfirmation", "MessageId": "s-1", "TopicArn": TOPIC,
        "Token": "tok-1", "Message": "You have chosen to subscribe",
        "SubscribeURL": format!("{}confirm?Action=ConfirmSubscription&Token=tok-1", sns.prefix()),
        "Timestamp": "2026-11-27T05:00:00.000Z",
    });
    sns.sign(&mut subscribe, "1");
    let (status, body) = post(&url, subscribe.to_string()).await;
    assert_eq!((status, body.as_str()), (200, "subscription confirmed\n"));
    assert_eq!(sns.confirmations.load(Ordering::SeqCst), 1);
    subscribe["SubscribeURL"] = json!("http://127.0.0.2:9/confirm");
    sns.sign(&mut subscribe, "1");
    let (status, body) = post(&url, subscribe.to_string()).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(sns.confirmations.load(Ordering::SeqCst), 1);

    let text = metrics_text(&server.admin).await;
    let refused = |reason: &str| {
        counter(
            &text,
            "linktrack_webhook_refused_total",
            &["provider=\"ses\"", &format!("reason=\"{reason}\"")],
        )
    };
    assert_eq!(refused("bad_signature"), 1.0, "{text}");
    assert_eq!(refused("unsigned"), 1.0, "{text}");
    assert_eq!(refused("untrusted_cert_url"), 1.0, "{text}");
    assert_eq!(refused("unknown_topic"), 1.0, "{text}");
    assert_eq!(refused("bad_request"), 1.0, "{text}");
    assert_eq!(refused("untrusted_subscribe_url"), 1.0, "{text}");
    let bounces = |class: &str| {
        counter(
            &text,
            "linktrack_bounces_total",
            &["source=\"ses\"", &format!("class=\"{class}\"")],
        )
    };
    assert_eq!((bounces("hard"), bounces("soft")), (1.0, 1.0), "{text}");
    assert_eq!(
        counter(&text, "linktrack_complaints_total", &["source=\"ses\""]),
        1.0,
        "{text}"
    );
    server.stop().await;
}

fn mailgun_post(key: &str, timestamp: u64, token: &str, event: &Value) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(timestamp.to_string().as_bytes());
    mac.update(token.as_bytes());
    json!({
        "signature": {"timestamp": timestamp.to_string(), "token": token,
            "signature": hex::encode(mac.finalize().into_bytes())},
        "event-data": event,
    })
    .to_string()
}

fn mailgun_failed(letter: &Built, id: &str) -> Value {
    json!({
        "event": "failed", "id": id, "severity": "permanent", "reason": "bounce",
        "recipient": letter.email,
        "envelope": {"sender": letter.envelope_from, "targets": letter.email},
        "delivery-status": {"code": 550, "enhanced-code": "5.1.1",
            "message": "5.1.1 The email account that you tried to reach does not exist",
            "description": ""},
        "message": {"headers": {"message-id": letter.message_id.trim_matches(['<', '>'])}}
    })
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn mailgun_posts_need_their_hmac_a_fresh_timestamp_and_an_unused_token() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    let sns = FakeSnsHost::start().await;
    let server = hook_server(&db, &sns).await;
    let url = format!("{}/hooks/mailgun", server.base);
    let (hard, complained, untouched) = (&letters[0], &letters[1], &letters[2]);

    let first = mailgun_post(MAILGUN_KEY, now(), "token-1", &mailgun_failed(hard, "ev-1"));
    let (status, body) = post(&url, first.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(&format!("hard bounce for {}", hard.email)),
        "{body}"
    );
    assert_eq!(reason(&db, &hard.email).await.as_deref(), Some("bounce"));

    // The same post again (its token spent): refused.
    let (status, body) = post(&url, first).await;
    assert_eq!(
        (status, body.as_str()),
        (
            403,
            "refused: the token was used before (a replayed post)\n"
        )
    );
    // Mailgun's retry of the same event, signed anew: nothing changes.
    let retry = mailgun_post(MAILGUN_KEY, now(), "token-2", &mailgun_failed(hard, "ev-1"));
    let (status, body) = post(&url, retry).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("second delivery"), "{body}");
    assert_eq!(decisions(&db).await, 1);

    // Another key, an old timestamp, no signature: refused, nobody suppressed.
    let wrong = mailgun_post(
        "key-of-someone-else",
        now(),
        "token-3",
        &mailgun_failed(untouched, "ev-2"),
    );
    let (status, body) = post(&url, wrong).await;
    assert_eq!(
        (status, body.as_str()),
        (403, "refused: the signature does not verify\n")
    );
    let stale = mailgun_post(
        MAILGUN_KEY,
        now() - 3600,
        "token-4",
        &mailgun_failed(untouched, "ev-3"),
    );
    let (status, body) = post(&url, stale).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("is not within 900 s of now"), "{body}");
    let unsigned = json!({"event-data": mailgun_failed(untouched, "ev-4")}).to_string();
    let (status, body) = post(&url, unsigned).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(reason(&db, &untouched.email).await, None);

    // Bad JSON: a clear 400; the next post (a complaint) is served.
    let (status, body) = post(&url, "not json".into()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not a Mailgun webhook post"), "{body}");
    let complaint = json!({"event": "complained", "id": "ev-5", "recipient": complained.email,
        "envelope": {"sender": complained.envelope_from},
        "message": {"headers": {"message-id": complained.message_id}}});
    let (status, body) = post(
        &url,
        mailgun_post(MAILGUN_KEY, now(), "token-5", &complaint),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        reason(&db, &complained.email).await.as_deref(),
        Some("complaint")
    );
    assert_eq!(decisions(&db).await, 2);

    let text = metrics_text(&server.admin).await;
    let refused = |reason: &str| {
        counter(
            &text,
            "linktrack_webhook_refused_total",
            &["provider=\"mailgun\"", &format!("reason=\"{reason}\"")],
        )
    };
    for reason in [
        "replayed_token",
        "bad_signature",
        "stale",
        "unsigned",
        "bad_request",
    ] {
        assert_eq!(refused(reason), 1.0, "{reason}: {text}");
    }
    assert_eq!(
        counter(
            &text,
            "linktrack_bounces_total",
            &["source=\"mailgun\"", "class=\"hard\""]
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        counter(&text, "linktrack_complaints_total", &["source=\"mailgun\""]),
        1.0,
        "{text}"
    );
    server.stop().await;

    // A server started now reads the last day's complaints for the alert
    // (the first server's read, at its start, was 0: the gauge is the
    // process's, so wait for the new server's read).
    let next = hook_server(&db, &sns).await;
    eventually_eq(
        PATIENCE,
        "the new server's complaints of the last day",
        Some(1.0),
        || async {
            let text = metrics_text(&next.admin).await;
            crate::common::metric_value(&text, "linktrack_complaints_last_day")
        },
    )
    .await;
    next.stop().await;
}

/// A Mailgun signature spent on one server, replayed on a second server
/// of the same database with another event (a complaint about another
/// letter): refused there too, nothing stored. The token is bound to its
/// first event in the database; the provider's own retry of that event
/// with the same token is still answered (and decided once).
#[tokio::test]
async fn a_mailgun_signature_is_spent_on_every_server_at_once() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    let sns = FakeSnsHost::start().await;
    let (one, two) = (hook_server(&db, &sns).await, hook_server(&db, &sns).await);
    let (hard, victim) = (&letters[0], &letters[1]);
    let at = now();
    let first = mailgun_post(MAILGUN_KEY, at, "token-x", &mailgun_failed(hard, "ev-x"));
    let (status, body) = post(&format!("{}/hooks/mailgun", one.base), first.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(decisions(&db).await, 1);

    // The same signature, another body, the other server.
    let complained = json!({
        "event": "complained", "id": "ev-forged",
        "recipient": victim.email,
        "envelope": {"sender": victim.envelope_from, "targets": victim.email},
        "message": {"headers": {"message-id": victim.message_id.trim_matches(['<', '>'])}}
    });
    let forged = mailgun_post(MAILGUN_KEY, at, "token-x", &complained);
    let (status, body) = post(&format!("{}/hooks/mailgun", two.base), forged).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("used before"), "{body}");
    assert_eq!(reason(&db, &victim.email).await, None);
    assert_eq!(decisions(&db).await, 1);

    // The provider retrying the very same post elsewhere: decided once.
    let (status, body) = post(&format!("{}/hooks/mailgun", two.base), first).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(decisions(&db).await, 1);
    one.stop().await;
    two.stop().await;
}
