//! The whole loop on a real, private Postfix (tests/it/common/postfix.rs;
//! scripts/prepare.d/40-postfix.sh installs it): `linktrack build
//! --smtp --bounce-domain` hands the letters to Postfix, which knows some
//! recipients and not others (`virtual_mailbox_maps`, with unlisted
//! recipients accepted at RCPT so that Postfix bounces them itself);
//! Postfix's own DSNs go to each letter's VERP address, whose domain a
//! pipe transport hands to `linktrack bounces ingest -` (the binary under
//! test, as `nobody`, with the test's database) exactly as docs/bounces.md
//! shows; the next mailing to the same list skips the unknown recipients.
//! An ARF complaint and a 4.2.2 soft bounce sent to VERP addresses through
//! the same Postfix take the same pipe; the soft bounce delivered twice
//! changes nothing the second time.

use crate::bounces::{addressed, Built, BOUNCE_DOMAIN};
use crate::common::build::build_command;
use crate::common::postfix::{Postfix, PostfixConfig};
use crate::common::wait::{eventually_blocking, never_within, PATIENCE};
use crate::common::{linktrack_binary, TestDb};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

const KNOWN: [&str; 3] = ["ann@example.com", "bob@example.org", "cat@example.net"];
const UNKNOWN: [&str; 2] = ["gone@example.com", "left@example.org"];

/// The Postfix of the loop: the known recipients' maildir, the bounce
/// domain piped to `linktrack bounces ingest`.
fn postfix(db: &TestDb, maps: &Path) -> Postfix {
    let known: String = KNOWN.iter().map(|a| format!("{a} inbox/\n")).collect();
    std::fs::write(maps.join("known"), known).unwrap();
    std::fs::write(
        maps.join("transport"),
        format!("{BOUNCE_DOMAIN} linktrack:\n"),
    )
    .unwrap();
    for file in ["known", "transport"] {
        std::fs::set_permissions(maps.join(file), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::fs::set_permissions(maps, std::fs::Permissions::from_mode(0o755)).unwrap();
    Postfix::start(PostfixConfig {
        main_cf: vec![
            format!("virtual_mailbox_maps = texthash:{}/known", maps.display()),
            // Accept unknown recipients and bounce them afterwards, as a
            // relay that does not know the mailboxes behind it does.
            "smtpd_reject_unlisted_recipient = no".into(),
            format!("transport_maps = texthash:{}/transport", maps.display()),
            "linktrack_destination_recipient_limit = 1".into(),
        ],
        master_cf: vec![
            "linktrack unix - n n - - pipe".into(),
            format!(
                "  flags=DOq user=nobody argv=/usr/bin/env DATABASE_URL={} RUST_LOG=warn {} bounces ingest -",
                db.url,
                linktrack_binary().display()
            ),
        ],
        ..PostfixConfig::default()
    })
}

/// `linktrack build --smtp` of `mailing` to `recipients`: the letters.
fn build(db: &TestDb, dir: &Path, postfix: &Postfix, mailing: &Path, out: &str) -> Vec<Built> {
    let output = build_command(&db.url)
        .arg("--smtp")
        .arg(postfix.url("127.0.0.1", None, ""))
        .args(["--smtp-connections", "1", "--bounce-domain", BOUNCE_DOMAIN])
        .arg("--mailing")
        .arg(mailing)
        .arg("--recipients")
        .arg(dir.join("recipients.csv"))
        .arg("--out")
        .arg(dir.join(out))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read_to_string(dir.join(out))
        .unwrap()
        .lines()
        .map(|line| {
            let letter: serde_json::Value = serde_json::from_str(line).unwrap();
            Built {
                email: letter["email"].as_str().unwrap().to_owned(),
                envelope_from: letter["envelope_from"].as_str().unwrap().to_owned(),
                message_id: letter["message_id"].as_str().unwrap().to_owned(),
                letter_id: letter["letter_id"].as_u64().unwrap(),
            }
        })
        .collect()
}

/// Deliveries through the pipe that Postfix logged as sent.
fn piped(postfix: &Postfix) -> usize {
    postfix
        .log()
        .lines()
        .filter(|l| l.contains("relay=linktrack") && l.contains("status=sent"))
        .count()
}

/// Wait until `n` messages went through the pipe.
fn wait_piped(postfix: &Postfix, n: usize) {
    let what = format!("{n} messages through the pipe");
    eventually_blocking(PATIENCE, &what, || match piped(postfix) {
        done if done >= n => Ok(()),
        short => Err(format!("{short}:\n{}", postfix.log())),
    });
}

/// Send `message` to `to` through Postfix's SMTP port, with the null
/// sender of a bounce (a plain SMTP dialogue: the test's own client).
/// The headers a delivery adds (the fixtures are messages as a mailbox
/// held them) are left out: Postfix takes its own `Delivered-To` back as
/// a mail loop.
fn send(postfix: &Postfix, to: &str, message: &str) {
    let added_on_delivery = ["delivered-to:", "x-original-to:", "return-path:"];
    let (head, body) = message.split_once("\n\n").unwrap();
    let head: String = head
        .lines()
        .filter(|line| {
            let lower = line.to_ascii_lowercase();
            !added_on_delivery.iter().any(|h| lower.starts_with(h))
        })
        .map(|line| format!("{line}\n"))
        .collect();
    let message = format!("{head}\n{body}");
    let stream = std::net::TcpStream::connect(("127.0.0.1", postfix.port)).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut reply = |expect: &str| {
        let mut line = String::new();
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            assert!(line.starts_with(expect), "expected {expect}, got {line}");
            if line.as_bytes().get(3) != Some(&b'-') {
                break;
            }
        }
    };
    reply("220");
    let mut say = |text: &str, expect: &str, reply: &mut dyn FnMut(&str)| {
        writer.write_all(text.as_bytes()).unwrap();
        reply(expect);
    };
    say("EHLO mx.isp.test\r\n", "250", &mut reply);
    say("MAIL FROM:<>\r\n", "250", &mut reply);
    say(&format!("RCPT TO:<{to}>\r\n"), "250", &mut reply);
    say("DATA\r\n", "354", &mut reply);
    let mut data: String = message
        .lines()
        .map(|line| {
            let stuffed = if line.starts_with('.') { "." } else { "" };
            format!("{stuffed}{line}\r\n")
        })
        .collect();
    data.push_str(".\r\n");
    say(&data, "250", &mut reply);
    say("QUIT\r\n", "221", &mut reply);
}

async fn decisions(db: &TestDb) -> Vec<(String, String, String, String)> {
    sqlx::query_as(
        "SELECT CONVERT(email USING utf8mb4), CAST(kind AS CHAR), status, CAST(action AS CHAR) \
         FROM bounces ORDER BY email, kind",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

async fn suppressed(db: &TestDb) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT CONVERT(email USING utf8mb4), CAST(reason AS CHAR) FROM suppressions ORDER BY email",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounce_loop_through_a_real_postfix_suppresses_the_unknown_and_the_complainer() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let maps = tempfile::tempdir().unwrap();
    let postfix = postfix(&db, maps.path());
    let list: String = std::iter::once("email,first_name,city".to_owned())
        .chain(
            KNOWN
                .iter()
                .chain(&UNKNOWN)
                .map(|a| format!("{a},Reader,Oslo")),
        )
        .map(|line| line + "\n")
        .collect();
    std::fs::write(dir.path().join("recipients.csv"), list).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let letters = build(
        &db,
        dir.path(),
        &postfix,
        &fixtures.join("mailing.json"),
        "letters.jsonl",
    );
    assert_eq!(letters.len(), 5, "{letters:?}");

    // Postfix bounces the two unknown recipients itself; its DSNs come
    // back through the pipe and suppress exactly them.
    let built = Instant::now();
    wait_piped(&postfix, 2);
    let bounced_within = built.elapsed();
    let mut expected: Vec<(String, String)> = UNKNOWN
        .iter()
        .map(|a| (a.to_string(), "bounce".to_owned()))
        .collect();
    assert_eq!(suppressed(&db).await, expected, "{}", postfix.log());
    for (email, kind, status, action) in decisions(&db).await {
        assert!(UNKNOWN.contains(&email.as_str()), "{email}");
        assert_eq!(
            (kind, status, action),
            ("hard".into(), "5.1.1".into(), "suppressed".into())
        );
    }
    assert_eq!(
        postfix.wait_for_messages(3).len(),
        3,
        "the known got theirs"
    );

    // A complaint and a soft bounce (4.2.2) to known letters' VERP
    // addresses, through the same Postfix; the soft bounce twice.
    let of = |email: &str| letters.iter().find(|l| l.email == email).unwrap().clone();
    let (complainer, full) = (of(KNOWN[0]), of(KNOWN[1]));
    let arf = addressed("arf-abuse.eml", &complainer, &complainer.email, "loop-arf");
    send(&postfix, &complainer.envelope_from, &arf);
    let soft = addressed(
        "postfix-dsn-mailbox-full.eml",
        &full,
        &full.email,
        "loop-soft",
    );
    send(&postfix, &full.envelope_from, &soft);
    wait_piped(&postfix, 4);
    let before = decisions(&db).await;
    send(&postfix, &full.envelope_from, &soft);
    wait_piped(&postfix, 5);
    assert_eq!(
        decisions(&db).await,
        before,
        "the second delivery changed nothing"
    );
    assert!(before.contains(&(
        full.email.clone(),
        "soft".into(),
        "4.2.2".into(),
        "counted".into()
    )));
    assert!(before.contains(&(
        complainer.email.clone(),
        "complaint".into(),
        "abuse".into(),
        "suppressed".into()
    )));
    expected.push((complainer.email.clone(), "complaint".into()));
    expected.sort();
    assert_eq!(suppressed(&db).await, expected);

    // The next mailing to the same list skips the suppressed addresses.
    let mut next: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("mailing.json")).unwrap())
            .unwrap();
    next["mailing_id"] = "weekly-2026-48".into();
    next["html_file"] = fixtures
        .join("newsletter.html")
        .display()
        .to_string()
        .into();
    let next_path = dir.path().join("next.json");
    std::fs::write(&next_path, next.to_string()).unwrap();
    let again = build(&db, dir.path(), &postfix, &next_path, "next.jsonl");
    let mut emails: Vec<&str> = again.iter().map(|l| l.email.as_str()).collect();
    emails.sort();
    assert_eq!(emails, [KNOWN[1], KNOWN[2]]);
    assert_eq!(postfix.wait_for_messages(5).len(), 5);
    // No new bounce. A DSN for the second mailing's letters would take the
    // path the first mailing's DSNs took (Postfix's bounce daemon, then
    // the pipe; no retry delay on the way), so a window of three times
    // as long as those took on this machine, and 2 s at the least, would
    // see it come through the pipe.
    let window = (bounced_within * 3).max(Duration::from_secs(2));
    never_within(window, "a bounce of the second mailing", || async {
        match piped(&postfix) {
            5 => Ok(()),
            more => Err(format!("{more} through the pipe:\n{}", postfix.log())),
        }
    })
    .await;
}
