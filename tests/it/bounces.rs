//! `linktrack bounces ingest` on a real database: letters built with
//! `--bounce-domain` carry their VERP address; the fixtures of
//! fixtures/bounces/, addressed to a real letter, suppress (or count, or
//! only report) its recipient; a second delivery changes nothing; bad
//! input (a forged token, a letter whose rows are gone, a reply, a 50 MB
//! message) gets its own line and exit status and suppresses nobody.

use crate::common::{build, linktrack, linktrack_binary, TestDb};
use linktrack::builder;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const BOUNCE_DOMAIN: &str = "bounces.example.test";
const PLACEHOLDER_VERP: &str = "bounces+01890000000070008000000000000000@bounces.example.com";
const PLACEHOLDER_ID: &str = "<4242.spring-2026@news.example.com>";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// One built letter: recipient, envelope sender, Message-ID.
#[derive(Debug, Clone)]
pub struct Built {
    pub email: String,
    pub envelope_from: String,
    pub message_id: String,
    pub letter_id: u64,
}

/// Build the fixture mailing with `--bounce-domain`; its letters.
pub async fn build_letters(db: &TestDb, dir: &Path) -> Vec<Built> {
    let options = builder::BuildOptions {
        bounce_domain: Some(BOUNCE_DOMAIN.into()),
        ..build::options(
            dir,
            fixtures().join("mailing.json"),
            fixtures().join("recipients.csv"),
        )
    };
    builder::run(&db.pool, &options).await.unwrap();
    let text = std::fs::read_to_string(dir.join("letters.jsonl")).unwrap();
    text.lines()
        .map(|line| {
            let letter: Value = serde_json::from_str(line).unwrap();
            Built {
                email: letter["email"].as_str().unwrap().to_owned(),
                envelope_from: letter["envelope_from"].as_str().unwrap().to_owned(),
                message_id: letter["message_id"].as_str().unwrap().to_owned(),
                letter_id: letter["letter_id"].as_u64().unwrap(),
            }
        })
        .collect()
}

/// A fixture addressed to `letter`: its VERP address, recipient and
/// Message-ID in place of the placeholders (`named` the address the
/// report names), with a Message-ID of its own (`tag`).
pub fn addressed(fixture: &str, letter: &Built, named: &str, tag: &str) -> String {
    let text = std::fs::read_to_string(fixtures().join("bounces").join(fixture)).unwrap();
    let recipients = [
        "nobody@example.org",
        "reader@example.org",
        "full@example.com",
        "gone@example.org",
    ];
    let mut text = text
        .replace(PLACEHOLDER_VERP, &letter.envelope_from)
        .replace(PLACEHOLDER_ID, &letter.message_id);
    for placeholder in recipients {
        text = text.replace(placeholder, named);
    }
    // Each test message its own id: a bounce's Message-ID is its identity.
    let own_id = |line: &str| {
        let lower = line.to_ascii_lowercase();
        lower.starts_with("message-id:") && !line.contains(&letter.message_id)
    };
    text.lines()
        .map(|line| {
            if own_id(line) {
                format!("Message-ID: <{tag}@bounce.test>")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ingest_text(db: &TestDb, dir: &Path, name: &str, text: &str, extra: &[&str]) -> (i32, String) {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let mut args = vec!["bounces", "ingest"];
    args.extend_from_slice(extra);
    let path = path.display().to_string();
    args.push(&path);
    let out = linktrack(db, &args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}");
    (out.status.code().unwrap_or(-1), stdout)
}

async fn reason(db: &TestDb, email: &str) -> Option<String> {
    sqlx::query_scalar("SELECT reason FROM suppressions WHERE email = ?")
        .bind(email)
        .fetch_optional(&db.pool)
        .await
        .unwrap()
}

async fn decisions(db: &TestDb) -> Vec<(String, String, String, String)> {
    sqlx::query_as(
        "SELECT CONVERT(email USING utf8mb4), CAST(kind AS CHAR), status, CAST(action AS CHAR) \
         FROM bounces ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn bounces_and_complaints_suppress_the_letters_recipient_once() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    assert!(letters.len() >= 5, "{letters:?}");
    for letter in &letters {
        assert!(
            letter.envelope_from.starts_with("bounces+")
                && letter.envelope_from.ends_with(&format!("@{BOUNCE_DOMAIN}")),
            "{letter:?}"
        );
    }
    let (hard, soft, complained, policy) = (&letters[0], &letters[1], &letters[2], &letters[3]);

    // A hard bounce: suppressed with reason bounce, stored with its status.
    let dsn = addressed("postfix-dsn-user-unknown.eml", hard, &hard.email, "hard-1");
    let (code, out) = ingest_text(&db, dir.path(), "hard.eml", &dsn, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("hard bounce for {}", hard.email)),
        "{out}"
    );
    assert!(out.contains("suppressed (reason bounce)"), "{out}");
    assert_eq!(reason(&db, &hard.email).await.as_deref(), Some("bounce"));
    // The same bounce again (a retried pipe): nothing changes.
    let (code, again) = ingest_text(&db, dir.path(), "hard.eml", &dsn, &[]);
    assert_eq!(code, 0, "{again}");
    assert!(again.contains("second delivery"), "{again}");
    assert_eq!(decisions(&db).await.len(), 1);

    // A soft bounce is counted; with a limit of 1 it suppresses.
    let full = addressed("postfix-dsn-mailbox-full.eml", soft, &soft.email, "soft-1");
    let (code, out) = ingest_text(&db, dir.path(), "soft.eml", &full, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("counted, 1 of 3 in 14 days"), "{out}");
    assert_eq!(reason(&db, &soft.email).await, None);
    let full = addressed("postfix-dsn-mailbox-full.eml", soft, &soft.email, "soft-2");
    let (_, out) = ingest_text(
        &db,
        dir.path(),
        "soft2.eml",
        &full,
        &["--soft-bounces", "1"],
    );
    assert!(out.contains("suppressed (reason bounce)"), "{out}");
    assert_eq!(reason(&db, &soft.email).await.as_deref(), Some("bounce"));

    // A DMARC rejection is the sender's problem: reported, never suppressed.
    let dmarc = addressed("postfix-dsn-dmarc.eml", policy, &policy.email, "policy-1");
    let (code, out) = ingest_text(&db, dir.path(), "dmarc.eml", &dmarc, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("policy block"), "{out}");
    assert_eq!(reason(&db, &policy.email).await, None);

    // A complaint whose recipient the provider redacted: the VERP token
    // names the letter.
    let arf = addressed(
        "arf-abuse-redacted.eml",
        complained,
        "x@isp.example.net",
        "arf-1",
    );
    let (code, out) = ingest_text(&db, dir.path(), "arf.eml", &arf, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("complaint (abuse)"), "{out}");
    assert_eq!(
        reason(&db, &complained.email).await.as_deref(),
        Some("complaint")
    );

    let kinds: Vec<(String, String)> = decisions(&db)
        .await
        .into_iter()
        .map(|(_, kind, _, action)| (kind, action))
        .collect();
    let expected = [
        ("hard", "suppressed"),
        ("soft", "counted"),
        ("soft", "suppressed"),
        ("policy", "reported"),
        ("complaint", "suppressed"),
    ]
    .map(|(k, a)| (k.to_owned(), a.to_owned()));
    assert_eq!(kinds, expected);

    // The next build of the same list skips them.
    let again = build_letters(&db, dir.path()).await;
    let emails: Vec<&str> = again.iter().map(|l| l.email.as_str()).collect();
    for gone in [&hard.email, &soft.email, &complained.email] {
        assert!(!emails.contains(&gone.as_str()), "{gone} built again");
    }
    assert!(emails.contains(&policy.email.as_str()));
}

#[tokio::test]
async fn bad_input_gets_its_own_line_and_suppresses_nobody() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    let (letter, other) = (&letters[0], &letters[1]);

    // A report that names another address than the letter's recipient.
    let wrong = addressed(
        "postfix-dsn-user-unknown.eml",
        letter,
        "victim@example.net",
        "w",
    );
    let (code, out) = ingest_text(&db, dir.path(), "wrong.eml", &wrong, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("not the letter's recipient"), "{out}");

    // A forged VERP token (well formed, made by no key of ours).
    let mut forged_letter = letter.clone();
    forged_letter.envelope_from =
        format!("bounces+0189abcdef12700080aa55aa55aa55aa@{BOUNCE_DOMAIN}");
    let forged = addressed(
        "postfix-dsn-user-unknown.eml",
        &forged_letter,
        &letter.email,
        "f",
    );
    let (code, out) = ingest_text(&db, dir.path(), "forged.eml", &forged, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("forged or foreign"), "{out}");

    // A reply, an auto-reply and a truncated report.
    let reply = addressed("not-a-bounce.eml", letter, &letter.email, "r");
    let (code, out) = ingest_text(&db, dir.path(), "reply.eml", &reply, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("not a bounce"), "{out}");
    let vacation = addressed("vacation-auto-reply.eml", letter, &letter.email, "v");
    let (code, out) = ingest_text(&db, dir.path(), "vacation.eml", &vacation, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("auto-reply"), "{out}");
    let cut = addressed("dsn-truncated.eml", letter, &letter.email, "t");
    let (code, out) = ingest_text(&db, dir.path(), "cut.eml", &cut, &[]);
    assert_eq!(code, 2, "{out}");

    // A letter whose rows were rotated away.
    sqlx::query("DELETE FROM links WHERE letter_id = ?")
        .bind(other.letter_id)
        .execute(&db.pool)
        .await
        .unwrap();
    let gone = addressed("postfix-dsn-user-unknown.eml", other, &other.email, "g");
    let (code, out) = ingest_text(&db, dir.path(), "gone.eml", &gone, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("rows are gone"), "{out}");

    // 50 MB on standard input: named, not read.
    let mut child = std::process::Command::new(linktrack_binary())
        .args(["bounces", "ingest", "-"])
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let big = addressed("postfix-dsn-user-unknown.eml", letter, &letter.email, "big");
    let writer = std::thread::spawn(move || {
        stdin.write_all(big.as_bytes()).unwrap();
        let filler = vec![b'x'; 1 << 20];
        for _ in 0..50 {
            stdin.write_all(&filler).unwrap();
        }
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("stdin: too big"), "{stdout}");

    for letter in &letters {
        assert_eq!(reason(&db, &letter.email).await, None, "{}", letter.email);
    }
    assert_eq!(reason(&db, "victim@example.net").await, None);
    assert!(decisions(&db).await.is_empty());
}

#[tokio::test]
async fn without_a_bounce_address_the_message_id_and_recipient_find_the_letter() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    let letter = &letters[0];
    let mut plain = letter.clone();
    plain.envelope_from = "news@example.com".into();
    let exim = addressed("exim-user-unknown.eml", &plain, &letter.email, "e");
    // Not delivered (no `deliveries` row): not ours to act on.
    let (code, out) = ingest_text(&db, dir.path(), "exim.eml", &exim, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("names no letter of ours"), "{out}");
    let mailing_id: String = sqlx::query_scalar("SELECT mailing_id FROM mailings LIMIT 1")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    linktrack::store::deliveries::mark_delivered_now(
        &db.pool,
        &crate::common::mailing_id(&mailing_id),
        &[letter.letter_id],
        "250 ok",
    )
    .await
    .unwrap();
    let (code, out) = ingest_text(&db, dir.path(), "exim.eml", &exim, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("exim: hard bounce"), "{out}");
    assert_eq!(reason(&db, &letter.email).await.as_deref(), Some("bounce"));
    // Through the Message-ID alone the report must name the recipient.
    let other = &letters[1];
    linktrack::store::deliveries::mark_delivered_now(
        &db.pool,
        &crate::common::mailing_id(&mailing_id),
        &[other.letter_id],
        "250 ok",
    )
    .await
    .unwrap();
    let mut guessed = other.clone();
    guessed.envelope_from = "news@example.com".into();
    let arf = addressed("arf-abuse-redacted.eml", &guessed, "x@isp.example.net", "a");
    let (code, out) = ingest_text(&db, dir.path(), "arf.eml", &arf, &[]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(reason(&db, &other.email).await, None);
}

/// A returned Message-ID acts only when it carries a sealed token of a
/// letter that was handed over: a guessed (sequential) id, a forged token
/// and a real token under another mailing or domain name nobody; and an
/// ARF report whose `Original-Rcpt-To` is another address is refused even
/// with the letter's own bounce address.
#[tokio::test]
async fn only_a_sealed_token_proves_a_letter_and_only_for_its_recipient() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    let mailing_id: String = sqlx::query_scalar("SELECT mailing_id FROM mailings LIMIT 1")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let ids: Vec<u64> = letters.iter().map(|l| l.letter_id).collect();
    linktrack::store::deliveries::mark_delivered_now(
        &db.pool,
        &crate::common::mailing_id(&mailing_id),
        &ids,
        "250 ok",
    )
    .await
    .unwrap();
    let letter = &letters[0];
    let (left, domain) = letter
        .message_id
        .trim_matches(['<', '>'])
        .rsplit_once('@')
        .unwrap();
    let (token, part) = left.split_once('.').unwrap();
    assert_eq!(
        token.len(),
        32,
        "the Message-ID carries the letter's token: {left}"
    );
    assert!(
        !letter
            .message_id
            .contains(&format!("<{}.", letter.letter_id)),
        "{}",
        letter.message_id
    );
    let without_verp = |message_id: String| Built {
        envelope_from: "news@example.com".into(),
        message_id,
        ..letter.clone()
    };
    let tries = [
        ("guessed", format!("<{}.{part}@{domain}>", letter.letter_id)),
        (
            "forged",
            format!("<0189abcdef12700080aa55aa55aa55aa.{part}@{domain}>"),
        ),
        (
            "foreign mailing",
            format!("<{token}.other-mailing@{domain}>"),
        ),
        (
            "foreign domain",
            format!("<{}.{part}@evil.test>", letter.letter_id),
        ),
    ];
    for (n, (what, message_id)) in tries.into_iter().enumerate() {
        let text = addressed(
            "exim-user-unknown.eml",
            &without_verp(message_id),
            &letter.email,
            &format!("try{n}"),
        );
        let (code, out) = ingest_text(&db, dir.path(), "try.eml", &text, &[]);
        assert_eq!(code, 2, "{what}: {out}");
        assert_eq!(reason(&db, &letter.email).await, None, "{what}: {out}");
    }
    assert!(decisions(&db).await.is_empty());

    // A complaint with the letter's bounce address that names someone else.
    let other = &letters[1];
    let arf = addressed("arf-abuse.eml", other, "victim@example.net", "arf-other");
    let (code, out) = ingest_text(&db, dir.path(), "arf.eml", &arf, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("victim@example.net"), "{out}");
    assert_eq!(reason(&db, &other.email).await, None);
    assert_eq!(reason(&db, "victim@example.net").await, None);

    // The letter's own sealed Message-ID, naming its recipient, acts.
    let text = addressed(
        "exim-user-unknown.eml",
        &without_verp(letter.message_id.clone()),
        &letter.email,
        "real",
    );
    let (code, out) = ingest_text(&db, dir.path(), "real.eml", &text, &[]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(reason(&db, &letter.email).await.as_deref(), Some("bounce"));
}
