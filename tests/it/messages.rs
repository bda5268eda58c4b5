//! Built letters as complete RFC 5322 messages, parsed by a real parser
//! (Python's `email` package) rather than by our own code.

use crate::common::build::build_command;
use crate::common::TestDb;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Python reads every `message` of the letters file and prints one JSON line
/// per message with what a mail client would see.
const PARSE: &str = r#"
import email, email.policy, json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    letter = json.loads(line)
    raw = letter["message"].encode("utf-8")
    assert b"\n" not in raw.replace(b"\r\n", b""), "bare LF"
    assert all(len(l) <= 998 for l in raw.split(b"\r\n")), "line over 998 octets"
    m = email.message_from_bytes(raw, policy=email.policy.default)
    parts = [p.get_content_type() for p in m.iter_parts()]
    text = m.get_body(("plain",)).get_content()
    html = m.get_body(("html",)).get_content()
    print(json.dumps({
        "email": letter["email"], "type": m.get_content_type(), "parts": parts,
        "from": str(m["From"]), "to": str(m["To"]), "subject": str(m["Subject"]),
        "message_id": str(m["Message-ID"]), "json_message_id": letter["message_id"],
        "date": str(m["Date"]), "list_unsubscribe": str(m["List-Unsubscribe"]),
        "list_unsubscribe_post": str(m["List-Unsubscribe-Post"]),
        "list_id": str(m["List-Id"]), "feedback_id": str(m["Feedback-ID"]),
        "mime": str(m["MIME-Version"]), "text": text, "html_equal": html.replace("\r\n", "\n") == letter["html"].replace("\r\n", "\n"),
    }))
"#;

#[tokio::test]
async fn every_built_letter_is_a_message_a_real_parser_reads() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let out = dir.path().join("letters.jsonl");
    let built = build_command(&db.url)
        .args(["--base-url", "https://t.example.test", "--mailing"])
        .arg(fixtures.join("mailing.json"))
        .arg("--recipients")
        .arg(fixtures.join("recipients.csv"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        built.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );

    let script = dir.path().join("parse.py");
    std::fs::File::create(&script)
        .unwrap()
        .write_all(PARSE.as_bytes())
        .unwrap();
    let parsed = Command::new("python3")
        .arg(&script)
        .arg(&out)
        .stderr(Stdio::piped())
        .output()
        .expect("python3 runs (the machine image has CPython)");
    assert!(
        parsed.status.success(),
        "{}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    let messages: Vec<serde_json::Value> = String::from_utf8(parsed.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    // fixtures/recipients.csv, no suppressions imported: nine rows, two
    // rejected.
    assert_eq!(messages.len(), 7, "{messages:?}");

    let mut ids = std::collections::HashSet::new();
    for m in &messages {
        assert_eq!(m["type"], "multipart/alternative", "{m}");
        assert_eq!(
            m["parts"],
            serde_json::json!(["text/plain", "text/html"]),
            "{m}"
        );
        assert_eq!(m["mime"], "1.0");
        assert!(
            m["from"]
                .as_str()
                .unwrap()
                .contains("news@weekly.example.com"),
            "{m}"
        );
        assert!(
            m["to"]
                .as_str()
                .unwrap()
                .contains(m["email"].as_str().unwrap()),
            "{m}"
        );
        assert_eq!(m["message_id"], m["json_message_id"], "{m}");
        assert!(
            m["message_id"]
                .as_str()
                .unwrap()
                .ends_with("@weekly.example.com>"),
            "{m}"
        );
        assert!(
            ids.insert(m["message_id"].as_str().unwrap().to_owned()),
            "duplicate id {m}"
        );
        assert!(!m["date"].as_str().unwrap().is_empty(), "{m}");
        assert!(m["list_unsubscribe"]
            .as_str()
            .unwrap()
            .starts_with("<https://t.example.test/u/"));
        assert_eq!(m["list_unsubscribe_post"], "List-Unsubscribe=One-Click");
        assert!(
            m["list_id"]
                .as_str()
                .unwrap()
                .starts_with("<weekly-2026-47."),
            "{m}"
        );
        assert!(
            m["feedback_id"]
                .as_str()
                .unwrap()
                .starts_with("weekly-2026-47:"),
            "{m}"
        );
        // MIME line ends are CRLF; otherwise the HTML part is the letter.
        assert_eq!(
            m["html_equal"], true,
            "the HTML part is the letter's HTML: {m}"
        );
        let text = m["text"].as_str().unwrap();
        assert!(
            text.contains("https://t.example.test/c/"),
            "tracked links in the text: {text}"
        );
        assert!(!text.contains(".gif"), "no pixel in the text: {text}");
        assert!(!text.contains("{{"), "{text}");
    }
    // Non-ASCII subjects (RFC 2047 in the header) decode back.
    let subjects: Vec<&str> = messages
        .iter()
        .map(|m| m["subject"].as_str().unwrap())
        .collect();
    assert!(
        subjects.iter().any(|s| s.starts_with("Lucía,")),
        "{subjects:?}"
    );
    assert!(
        subjects.iter().any(|s| s.starts_with("伟,")),
        "{subjects:?}"
    );
}
