//! `linktrack bounces classify`: messages of many MTAs' shapes read and
//! said, one line or JSON object each, with no database at all (the URL
//! points at a closed port); nothing it reads makes it fail.

use crate::common::linktrack_binary;
use serde_json::Value;
use std::path::Path;

/// Short messages in the shapes MTAs and providers write (our own, not
/// copies of anyone's): (file name, message, expected kind, reason).
const MESSAGES: &[(&str, &str, &str, &str)] = &[
    (
        "01-exim-5.7.1-unknown-user.eml",
        "From: Mail Delivery System <Mailer-Daemon@mx.example.net>\n\
         To: bounces@example.com\nSubject: Mail delivery failed: returning message to sender\n\
         X-Failed-Recipients: gone@example.org\nMessage-Id: <e1@mx.example.net>\n\n\
         This message was created automatically by mail delivery software.\n\n\
         A message that you sent could not be delivered to one or more of its\n\
         recipients. This is a permanent error. The following address(es) failed:\n\n\
           gone@example.org\n\
             host mx.example.org [192.0.2.10]\n\
             SMTP error from remote mail server after RCPT TO:<gone@example.org>:\n\
             550 5.7.1 <gone@example.org>: unknown user\n",
        "hard",
        "userunknown",
    ),
    (
        "02-postfix-mailbox-full-5.x.eml",
        "From: MAILER-DAEMON@mail.example.com (Mail Delivery System)\n\
         To: bounces@example.com\nSubject: Undelivered Mail Returned to Sender\n\
         Message-Id: <p2@mail.example.com>\nMIME-Version: 1.0\n\
         Content-Type: multipart/report; report-type=delivery-status; boundary=\"B\"\n\n\
         --B\nContent-Type: text/plain\n\nI'm sorry to have to inform you...\n\n\
         --B\nContent-Type: message/delivery-status\n\n\
         Reporting-MTA: dns; mail.example.com\n\n\
         Final-Recipient: rfc822; full@example.net\nAction: failed\nStatus: 5.0.0\n\
         Diagnostic-Code: smtp; 552 sorry, mailbox is full (#5.2.2)\n\n--B--\n",
        "soft",
        "mailboxfull",
    ),
    (
        "03-exchange-message-too-big.eml",
        "From: postmaster@outlook.example\nTo: bounces@example.com\n\
         Subject: Undeliverable: spring news\nMessage-Id: <x3@outlook.example>\nMIME-Version: 1.0\n\
         Content-Type: multipart/report; report-type=delivery-status; boundary=\"B\"\n\n\
         --B\nContent-Type: message/delivery-status\n\n\
         Reporting-MTA: dns;outlook.example\n\n\
         Final-Recipient: rfc822;big@contoso.example\nAction: failed\nStatus: 5.3.4\n\
         Diagnostic-Code: smtp;552 5.3.4 Message size exceeds fixed maximum message size\n\n--B--\n",
        "soft",
        "mesgtoobig",
    ),
    (
        "04-gmail-spam-block.eml",
        "From: Mail Delivery Subsystem <mailer-daemon@googlemail.com>\nTo: bounces@example.com\n\
         Subject: Delivery Status Notification (Failure)\nMessage-Id: <g4@mail.gmail.com>\n\
         MIME-Version: 1.0\n\
         Content-Type: multipart/report; report-type=delivery-status; boundary=\"B\"\n\n\
         --B\nContent-Type: message/delivery-status\n\n\
         Reporting-MTA: dns; googlemail.com\n\n\
         Final-Recipient: rfc822; reader@gmail.example\nAction: failed\nStatus: 5.7.1\n\
         Diagnostic-Code: smtp; 550-5.7.1 Our system has detected that this message is likely\n \
         unsolicited mail. To reduce the amount of spam sent to Gmail, this message has been blocked.\n\n--B--\n",
        "policy",
        "spamdetected",
    ),
    (
        "05-vacation.eml",
        "From: reader@example.org\nTo: news@example.com\nSubject: Out of office\n\
         Auto-Submitted: auto-replied\nMessage-Id: <v5@example.org>\n\nI am away until Monday.\n",
        "auto-reply",
        "vacation",
    ),
    (
        "06-ses-notification-by-mail.eml",
        "From: AWS Notifications <no-reply@sns.amazonaws.com>\nTo: ops@example.com\n\
         Subject: AWS Notification Message\nMessage-Id: <s6@sns.amazonaws.com>\n\n\
         {\"notificationType\":\"Bounce\",\"bounce\":{\"bounceType\":\"Permanent\",\
         \"bounceSubType\":\"General\",\"bouncedRecipients\":[{\"emailAddress\":\"nobody@example.org\",\
         \"action\":\"failed\",\"status\":\"5.1.1\",\"diagnosticCode\":\"smtp; 550 5.1.1 user unknown\"}],\
         \"timestamp\":\"2026-11-20T10:00:00.000Z\",\"feedbackId\":\"0100-aaa\"},\
         \"mail\":{\"timestamp\":\"2026-11-20T09:59:59.000Z\",\"source\":\"news@example.com\",\
         \"messageId\":\"0100-bbb\",\"destination\":[\"nobody@example.org\"]}}\n\n--\n\
         If you wish to stop receiving notifications from this topic, ...\n",
        "hard",
        "userunknown",
    ),
    (
        "07-not-a-bounce.eml",
        "From: friend@example.org\nTo: news@example.com\nSubject: thanks\n\nGreat letter!\n",
        "not a bounce",
        "",
    ),
];

fn classify(dir: &Path, json: bool) -> (i32, String) {
    let mut command = std::process::Command::new(linktrack_binary());
    command
        .args(["bounces", "classify"])
        .args(json.then_some("--json"))
        .arg(dir)
        // No database: a closed port, never contacted.
        .env("DATABASE_URL", "mysql://root@127.0.0.1:9/none");
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "{stderr}");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn each_message_is_said_with_its_kind_reason_and_recipient() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text, ..) in MESSAGES {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let (code, out) = classify(dir.path(), true);
    assert_eq!(code, 0, "{out}");
    let objects: Vec<Value> = out
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(objects.len(), MESSAGES.len(), "{out}");
    for (object, (name, _, kind, reason)) in objects.iter().zip(MESSAGES) {
        assert!(
            object["source"].as_str().unwrap().ends_with(name),
            "{object}"
        );
        assert_eq!(object["kind"], *kind, "{name}: {object}");
        assert_eq!(
            object["reason"].as_str().unwrap_or_default(),
            *reason,
            "{name}: {object}"
        );
    }
    assert_eq!(objects[0]["recipients"][0], "gone@example.org");
    assert_eq!(objects[0]["status"], "5.7.1");
    assert_eq!(objects[0]["format"], "exim");
    assert_eq!(objects[5]["format"], "ses");

    let (code, lines) = classify(dir.path(), false);
    assert_eq!(code, 0);
    let first = lines.lines().next().unwrap();
    assert!(
        first.contains("01-exim-5.7.1-unknown-user.eml: hard (userunknown) gone@example.org, status 5.7.1, exim: "),
        "{first}"
    );
}

#[test]
fn garbage_and_cut_messages_are_said_not_crashed_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut seed: u32 = 0x9e37_79b9;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    for n in 0..40 {
        let bytes: Vec<u8> = (0..next() % 3000).map(|_| next() as u8).collect();
        std::fs::write(dir.path().join(format!("random-{n:02}")), bytes).unwrap();
    }
    for (name, text, ..) in MESSAGES {
        for cut in [1, text.len() / 3, text.len() / 2, text.len() - 5] {
            std::fs::write(dir.path().join(format!("cut-{cut}-{name}")), &text[..cut]).unwrap();
        }
    }
    let (code, out) = classify(dir.path(), true);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.lines().count(), 40 + 4 * MESSAGES.len(), "{out}");
}

/// sisimai's public samples of fixtures/bounces/set-of-emails/ (real
/// bounces of many MTAs, their licence beside them), classified by the
/// binary one folder at a time: each file's kind and status code as
/// SOURCES.md there gives them.
#[test]
fn real_public_bounces_are_said_with_their_kind_and_status() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bounces/set-of-emails");
    let sources = std::fs::read_to_string(dir.join("SOURCES.md")).unwrap();
    let expected: Vec<(String, String, String)> = sources
        .lines()
        .filter(|line| line.starts_with("| ") && line.contains(".eml |"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (
                cells[1].to_owned(),
                cells[3].to_owned(),
                cells[4].to_owned(),
            )
        })
        .collect();
    let (code, out) = classify(&dir, true);
    assert_eq!(code, 0, "{out}");
    // One object per message (LICENSE and SOURCES.md are said too, as
    // no bounce); a file that starts with an mbox `From ` line is an mbox
    // of one message, `name#1`.
    let objects: Vec<Value> = out
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|o| o["source"].as_str().unwrap_or_default().contains(".eml"))
        .collect();
    assert_eq!(objects.len(), expected.len(), "{out}");
    let of = |name: &str| {
        objects
            .iter()
            .find(|o| {
                let source = o["source"].as_str().unwrap_or_default();
                source.ends_with(name) || source.ends_with(&format!("{name}#1"))
            })
            .unwrap_or_else(|| panic!("{name} not said: {out}"))
    };
    for (name, kind, status) in &expected {
        let object = of(name);
        assert_eq!(object["kind"], kind.as_str(), "{name}: {object}");
        let said = object["status"]
            .as_str()
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or("–");
        assert_eq!(said, status, "{name}: {object}");
    }
    // A few whose recipients the text alone gives.
    let recipients = |name: &str| of(name)["recipients"].clone();
    assert_eq!(
        recipients("lhost-verizon-02.eml")[0],
        "may-be-straycat-nyaaaaaan@vtext.com"
    );
    assert_eq!(
        recipients("lhost-biglobe-01.eml")[0],
        "postmaster@mxr.biglobe.ne.jp"
    );
    assert_eq!(recipients("arf-26.eml")[0], "example@icloud.com");
}
