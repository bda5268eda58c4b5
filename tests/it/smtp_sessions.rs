//! The SMTP session against a real Postfix (a private instance per test):
//! the message a receiver stores is byte for byte the one built, whichever
//! way it went (BDAT with PIPELINING and CHUNKING, DATA with the next
//! envelope pipelined, or step by step for a server that pipelines
//! nothing); refusals inside a pipelined session leave it in step;
//! STARTTLS and AUTH as the URL asks, with a certificate the client must
//! trust.

use crate::common::build::build_command;
use crate::common::postfix::{Postfix, PostfixConfig};
use crate::common::TestDb;
use std::path::Path;
use std::process::Output;

/// Eight letters; line 4's recipient is refused by the server (when the
/// config refuses it). The creative has lines that start with a period in
/// its text part, so the data is dot-stuffed on the way.
fn write_inputs(dir: &Path) {
    std::fs::write(
        dir.join("mailing.json"),
        r#"{"mailing_id":"sessions","subject":"Hi {{ first_name }}","from":"News <news@sender.test>","html":"<p>Hi {{ first_name }},</p><p>.hidden line</p><p>..two dots</p><p><a href=\"https://example.com/a\">read</a></p>"}"#,
    )
    .unwrap();
    let recipients: String = std::iter::once("email,first_name\n".to_owned())
        .chain((0..8).map(|n| {
            let who = if n == 4 { "refused" } else { "reader" };
            format!("{who}{n}@example.com,R{n}\n")
        }))
        .collect();
    std::fs::write(dir.join("recipients.csv"), recipients).unwrap();
}

fn build(db: &TestDb, dir: &Path, smtp: &str, ca_file: Option<&Path>) -> Output {
    let mut command = build_command(&db.url);
    command
        .args(["--smtp", smtp])
        .args(["--smtp-connections", "1", "--smtp-retries", "1"])
        .args(["--smtp-backoff-ms", "10", "--mailing"])
        .arg(dir.join("mailing.json"))
        .arg("--recipients")
        .arg(dir.join("recipients.csv"))
        .arg("--out")
        .arg(dir.join("letters.jsonl"));
    if let Some(ca_file) = ca_file {
        command.env("SSL_CERT_FILE", ca_file);
    }
    command.output().unwrap()
}

/// Each built letter's recipient and message, from the letters file.
fn built(dir: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(dir.join("letters.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            let letter: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                letter["email"].as_str().unwrap().to_owned(),
                letter["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The message as sent, from a maildir file: Postfix's own headers
/// (Return-Path, Delivered-To, Received, …) come before ours, which start
/// with the built message's first header line; line ends are LF.
fn as_sent<'a>(stored: &'a str, first_header: &str) -> &'a str {
    let at = stored
        .find(first_header)
        .unwrap_or_else(|| panic!("{first_header:?} is not in {stored}"));
    &stored[at..]
}

/// Every letter but the refused one arrives exactly as built, over one
/// session; the refused one is in the rejects file with Postfix's reply.
fn assert_delivered_as_built(postfix: &Postfix, dir: &Path, output: &Output) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let letters = built(dir);
    assert_eq!(letters.len(), 8, "{stderr}");
    let stored = postfix.wait_for_messages(7);
    assert_eq!(stored.len(), 7, "{stderr}\n{}", postfix.log());
    for (email, message) in letters.iter().filter(|(e, _)| !e.starts_with("refused")) {
        let sent = message.replace("\r\n", "\n");
        let first_line = sent.lines().next().unwrap();
        let arrived = stored
            .iter()
            .find(|s| s.contains(&format!("Delivered-To: {email}\n")))
            .unwrap_or_else(|| panic!("no message for {email}"));
        assert_eq!(as_sent(arrived, first_line), sent, "{email}");
        assert!(arrived.contains("\n.hidden line"), "{arrived}");
    }
    let rejects = std::fs::read_to_string(dir.join("letters.jsonl.rejects.jsonl")).unwrap();
    let refused: Vec<&str> = rejects
        .lines()
        .filter(|l| l.contains("refused by the MTA"))
        .collect();
    assert_eq!(refused.len(), 1, "{rejects}");
    assert!(refused[0].contains("refused4@example.com"), "{rejects}");
    assert!(
        refused[0].contains("permanent error (554)"),
        "the server's own reply: {rejects}"
    );
    assert_eq!(output.status.code(), Some(2), "a refused letter: {stderr}");
}

fn refusing_one_recipient(hide: Vec<&'static str>) -> PostfixConfig {
    PostfixConfig {
        hide,
        main_cf: vec![
            // Inline map: a value with spaces is in braces of its own.
            "smtpd_recipient_restrictions = check_recipient_access inline:{ { refused4@example.com = REJECT no such reader } }, permit_mynetworks, reject".into(),
        ],
        ..PostfixConfig::default()
    }
}

/// With PIPELINING and CHUNKING (Postfix's defaults): envelope, BDAT and
/// the message in one write per letter; the refused recipient's BDAT is
/// still read by the server, and the session carries on.
#[tokio::test]
async fn with_chunking_every_letter_goes_as_bdat_in_one_session() {
    let postfix = Postfix::start(refusing_one_recipient(vec![]));
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());
    let output = build(&db, dir.path(), &postfix.url("127.0.0.1", None, ""), None);
    assert_delivered_as_built(&postfix, dir.path(), &output);
    let sessions = postfix.sessions();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert!(sessions[0].contains("bdat=7/8"), "{sessions:?}");
    assert!(!sessions[0].contains(" data="), "{sessions:?}");
}

/// PIPELINING without CHUNKING: DATA, with each next letter's envelope
/// sent with the current letter's data. The refused recipient's envelope
/// goes ahead that way too, and is answered in its turn.
#[tokio::test]
async fn with_pipelining_each_next_envelope_travels_with_the_data() {
    let postfix = Postfix::start(refusing_one_recipient(vec!["chunking"]));
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());
    let output = build(&db, dir.path(), &postfix.url("127.0.0.1", None, ""), None);
    assert_delivered_as_built(&postfix, dir.path(), &output);
    let sessions = postfix.sessions();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert!(sessions[0].contains("data=7/8"), "{sessions:?}");
    assert!(sessions[0].contains("rcpt=7/8"), "{sessions:?}");
    assert!(
        !postfix.log().contains("improper command pipelining"),
        "Postfix saw commands sent before their turn: {}",
        postfix.log()
    );
}

/// A server that offers neither: each command waits for its reply.
#[tokio::test]
async fn without_pipelining_each_command_waits_for_its_reply() {
    let postfix = Postfix::start(refusing_one_recipient(vec!["chunking", "pipelining"]));
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());
    let output = build(&db, dir.path(), &postfix.url("127.0.0.1", None, ""), None);
    assert_delivered_as_built(&postfix, dir.path(), &output);
    assert!(
        !postfix.log().contains("improper command pipelining"),
        "{}",
        postfix.log()
    );
    let sessions = postfix.sessions();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert!(sessions[0].contains("data=7"), "{sessions:?}");
}

/// `?tls=required` with a user and password: STARTTLS, then AUTH, then
/// every letter. Without trusting the server's certificate, or with a
/// wrong password, nothing is delivered and the job says why.
#[tokio::test]
async fn starttls_and_auth_as_the_url_asks() {
    let postfix = Postfix::start(PostfixConfig {
        tls: true,
        auth: Some(("sender".into(), "s3cret pass".into())),
        ..PostfixConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());

    let untrusted = TestDb::new().await;
    let url = postfix.url(
        "localhost",
        Some(("sender", "s3cret%20pass")),
        "?tls=required",
    );
    let output = build(&untrusted, dir.path(), &url, None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("TLS handshake"), "{stderr}");
    assert!(
        !stderr.contains("s3cret"),
        "no password in messages: {stderr}"
    );
    assert!(postfix.messages().is_empty());

    let wrong = TestDb::new().await;
    let bad_url = postfix.url("localhost", Some(("sender", "wrong")), "?tls=required");
    let output = build(&wrong, dir.path(), &bad_url, Some(&postfix.ca_file()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("535"), "Postfix's refusal: {stderr}");
    assert!(postfix.messages().is_empty());

    let db = TestDb::new().await;
    let output = build(&db, dir.path(), &url, Some(&postfix.ca_file()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}\n{}", postfix.log());
    assert_eq!(postfix.wait_for_messages(8).len(), 8, "{}", postfix.log());
    let sessions = postfix.sessions();
    let delivering = sessions.last().unwrap();
    assert!(
        delivering.contains("starttls=1") && delivering.contains("auth=1"),
        "{sessions:?}"
    );
    assert!(
        postfix.log().contains("sasl_username=sender"),
        "{}",
        postfix.log()
    );
}
