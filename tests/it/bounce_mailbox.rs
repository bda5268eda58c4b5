//! `linktrack bounces fetch` against a real Dovecot on loopback
//! (common/dovecot.rs): bounces and complaints in its maildir, addressed
//! to letters built with `--bounce-domain`, are read over IMAPS, IMAP
//! with STARTTLS and POP3 with STLS; the suppressions are stored and each
//! message is moved, flagged or deleted only after; a message that needs
//! a look does not stop the rest; a connection cut in the middle of a
//! message loses nothing and the next pass reads nothing twice.

use crate::bounces::{addressed, build_letters, Built};
use crate::common::dovecot::{Dovecot, PASSWORD};
use crate::common::wait::{eventually, PATIENCE};
use crate::common::KillOnDrop;
use crate::common::{linktrack_binary, TestDb};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};

const DONE: &str = "linktrack-done";
const LOOK: &str = "linktrack-look";

/// `linktrack bounces fetch ARGS` on `db`, trusting `dovecot`'s
/// certificate; `password` in LINKTRACK_MAILBOX_PASSWORD when given.
fn fetch_command(db: &TestDb, dovecot: &Dovecot, password: Option<&str>, args: &[&str]) -> Command {
    let mut command = Command::new(linktrack_binary());
    command
        .args(["bounces", "fetch"])
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .env("SSL_CERT_FILE", dovecot.ca_file())
        .env_remove("LINKTRACK_MAILBOX_PASSWORD");
    if let Some(password) = password {
        command.env("LINKTRACK_MAILBOX_PASSWORD", password);
    }
    command
}

fn fetch(db: &TestDb, dovecot: &Dovecot, password: Option<&str>, args: &[&str]) -> (i32, String) {
    let out: Output = fetch_command(db, dovecot, password, args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("{stdout}{stderr}");
    (out.status.code().unwrap_or(-1), stdout + &stderr)
}

async fn reason(db: &TestDb, email: &str) -> Option<String> {
    sqlx::query_scalar("SELECT reason FROM suppressions WHERE email = ?")
        .bind(email)
        .fetch_optional(&db.pool)
        .await
        .unwrap()
}

/// The stored decisions: (address, kind), in order.
async fn decisions(db: &TestDb) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT CONVERT(email USING utf8mb4), CAST(kind AS CHAR) FROM bounces ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/bounces")
            .join(name),
    )
    .unwrap()
}

fn hard_bounce(letter: &Built, tag: &str) -> Vec<u8> {
    addressed("postfix-dsn-user-unknown.eml", letter, &letter.email, tag).into_bytes()
}

#[tokio::test]
async fn a_mailbox_read_over_imaps_suppresses_then_moves_each_message_once() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    let (hard, soft, complained, policy) = (&letters[0], &letters[1], &letters[2], &letters[3]);
    let dovecot = Dovecot::start();
    let hard_message = hard_bounce(hard, "m-hard");
    dovecot.deliver("INBOX", &hard_message);
    let full = addressed("postfix-dsn-mailbox-full.eml", soft, &soft.email, "m-soft");
    dovecot.deliver("INBOX", full.as_bytes());
    // A bad message in the middle does not stop the rest.
    dovecot.deliver("INBOX", b"\x00\x01\x02 this is no message at all");
    dovecot.deliver("INBOX", &fixture("not-a-bounce.eml"));
    let arf = addressed(
        "arf-abuse-redacted.eml",
        complained,
        "x@isp.example.net",
        "m-arf",
    );
    dovecot.deliver("INBOX", arf.as_bytes());
    dovecot.deliver("INBOX", &fixture("vacation-auto-reply.eml"));
    let dmarc = addressed("postfix-dsn-dmarc.eml", policy, &policy.email, "m-dmarc");
    dovecot.deliver("INBOX", dmarc.as_bytes());
    let url = format!("imaps://bounce@127.0.0.1:{}/INBOX", dovecot.imaps);

    // A wrong password is a setting: exit 78, nothing read or moved.
    let (code, out) = fetch(&db, &dovecot, Some("wrong"), &[&url]);
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("login refused"), "{out}");
    // No password at all, or one in the URL: the same, said.
    let (code, out) = fetch(&db, &dovecot, None, &[&url]);
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("LINKTRACK_MAILBOX_PASSWORD"), "{out}");
    let in_url = format!(
        "imaps://bounce:{PASSWORD}@127.0.0.1:{}/INBOX",
        dovecot.imaps
    );
    let (code, out) = fetch(&db, &dovecot, Some(PASSWORD), &[&in_url]);
    assert_eq!(code, 78, "{out}");
    assert!(
        !out.contains(PASSWORD),
        "the password is never printed: {out}"
    );
    assert_eq!(dovecot.messages("INBOX").len(), 7);
    assert!(decisions(&db).await.is_empty());

    let password_file = dovecot.password_file();
    let password_file = password_file.to_str().unwrap();
    let (code, out) = fetch(
        &db,
        &dovecot,
        None,
        &["--password-file", password_file, &url],
    );
    assert_eq!(code, 2, "two messages need a look: {out}");
    assert!(
        out.contains(&format!("hard bounce for {}", hard.email)),
        "{out}"
    );
    assert!(out.contains("complaint (abuse)"), "{out}");
    assert!(out.contains("not a bounce"), "{out}");
    assert!(
        out.contains("7 messages read: 5 acted on, 2 to look at"),
        "{out}"
    );
    assert_eq!(reason(&db, &hard.email).await.as_deref(), Some("bounce"));
    assert_eq!(
        reason(&db, &complained.email).await.as_deref(),
        Some("complaint")
    );
    assert_eq!(
        reason(&db, &soft.email).await,
        None,
        "one soft bounce is counted"
    );
    assert_eq!(reason(&db, &policy.email).await, None);
    let kinds: Vec<String> = decisions(&db).await.into_iter().map(|(_, k)| k).collect();
    assert_eq!(kinds, ["hard", "soft", "complaint", "policy"]);
    assert!(dovecot.messages("INBOX").is_empty());
    assert_eq!(dovecot.messages(DONE).len(), 5);
    let looks = dovecot.messages(LOOK);
    assert_eq!(looks.len(), 2);
    assert!(looks.iter().any(|m| m.starts_with(b"\x00\x01\x02")));
    // Moved, not read: the done folder's messages are unseen (BODY.PEEK).
    assert!(
        dovecot.flags(DONE).iter().all(|f| !f.contains('S')),
        "{:?}",
        dovecot.flags(DONE)
    );

    // The same bounce delivered again (or left behind by a crash between
    // its decision and its move): read, nothing decided twice, moved.
    dovecot.deliver("INBOX", &hard_message);
    let (code, out) = fetch(&db, &dovecot, Some(PASSWORD), &[&url]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("second delivery"), "{out}");
    assert_eq!(decisions(&db).await.len(), 4);
    assert!(dovecot.messages("INBOX").is_empty());
    assert_eq!(dovecot.messages(DONE).len(), 6);
    // An empty mailbox: a pass that reads nothing.
    let (code, out) = fetch(&db, &dovecot, Some(PASSWORD), &[&url]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 messages read"), "{out}");
}

/// A TCP proxy to `upstream` that passes the client's bytes on, and the
/// server's up to `limit`, then cuts both ways.
fn cutting_proxy(upstream: u16, limit: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let server = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
            let (mut client_in, mut server_out) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut client_in, &mut server_out);
            });
            let (mut server_in, mut client_out) = (server, client);
            let mut passed = 0;
            let mut buf = [0u8; 4096];
            while passed < limit {
                let n = match server_in.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n.min(limit - passed),
                };
                if client_out.write_all(&buf[..n]).is_err() {
                    break;
                }
                passed += n;
            }
            let _ = client_out.shutdown(std::net::Shutdown::Both);
            let _ = server_in.shutdown(std::net::Shutdown::Both);
        }
    });
    port
}

#[tokio::test]
async fn a_connection_cut_in_the_middle_of_a_message_loses_nothing_and_reads_nothing_twice() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    let dovecot = Dovecot::start();
    for (n, letter) in letters[..3].iter().enumerate() {
        dovecot.deliver("INBOX", &hard_bounce(letter, &format!("cut-{n}")));
    }
    // A message of 400 KB, in the middle of which the connection is cut.
    let mut big =
        b"From: someone@example.net\nSubject: a long letter\nMessage-ID: <big@example.net>\n\n"
            .to_vec();
    for _ in 0..5000 {
        big.extend_from_slice(b"all work and no play makes a long message, line after line\n");
    }
    dovecot.deliver("INBOX", &big);
    for (n, letter) in letters[3..5].iter().enumerate() {
        dovecot.deliver("INBOX", &hard_bounce(letter, &format!("cut-late-{n}")));
    }
    // IMAP with STARTTLS, through the proxy: the server's first 120 KB
    // carry the first three bounces and part of the big message.
    let proxy = cutting_proxy(dovecot.imap, 120_000);
    let cut_url = format!("imap://bounce@127.0.0.1:{proxy}/INBOX");
    let (code, out) = fetch(&db, &dovecot, Some(PASSWORD), &[&cut_url]);
    assert_eq!(code, 75, "{out}");
    assert!(out.contains("the session failed"), "{out}");
    for letter in &letters[..3] {
        assert_eq!(
            reason(&db, &letter.email).await.as_deref(),
            Some("bounce"),
            "{out}"
        );
    }
    for letter in &letters[3..5] {
        assert_eq!(reason(&db, &letter.email).await, None, "{out}");
    }
    assert_eq!(
        dovecot.messages("INBOX").len(),
        3,
        "the big one and the two after it stay"
    );
    assert_eq!(dovecot.messages(DONE).len(), 3);

    let url = format!("imap://bounce@127.0.0.1:{}/INBOX", dovecot.imap);
    let (code, out) = fetch(&db, &dovecot, Some(PASSWORD), &[&url]);
    assert_eq!(code, 2, "the big message needs a look: {out}");
    assert!(
        !out.contains("second delivery"),
        "nothing read twice: {out}"
    );
    for letter in &letters[..5] {
        assert_eq!(
            reason(&db, &letter.email).await.as_deref(),
            Some("bounce"),
            "{out}"
        );
    }
    let mut decided: Vec<String> = decisions(&db).await.into_iter().map(|(e, _)| e).collect();
    decided.sort();
    let mut expected: Vec<String> = letters[..5].iter().map(|l| l.email.clone()).collect();
    expected.sort();
    assert_eq!(decided, expected, "one decision per bounce");
    assert!(dovecot.messages("INBOX").is_empty());
    assert_eq!(dovecot.messages(DONE).len(), 5);
    assert_eq!(dovecot.messages(LOOK), vec![big]);
}

#[tokio::test]
async fn pop3_with_stls_deletes_what_it_acted_on_and_keeps_the_rest() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    let dovecot = Dovecot::start();
    dovecot.deliver("INBOX", &hard_bounce(&letters[0], "pop-1"));
    let not_a_bounce = fixture("not-a-bounce.eml");
    dovecot.deliver("INBOX", &not_a_bounce);
    dovecot.deliver("INBOX", &hard_bounce(&letters[1], "pop-2"));
    let url = format!("pop3://bounce@127.0.0.1:{}", dovecot.pop3);

    let (code, out) = fetch(&db, &dovecot, Some(PASSWORD), &["--after", "move", &url]);
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("--after delete"), "{out}");

    let (code, out) = fetch(&db, &dovecot, Some(PASSWORD), &[&url]);
    assert_eq!(code, 2, "{out}");
    for letter in &letters[..2] {
        assert_eq!(
            reason(&db, &letter.email).await.as_deref(),
            Some("bounce"),
            "{out}"
        );
    }
    assert_eq!(
        dovecot.messages("INBOX"),
        vec![not_a_bounce],
        "{}",
        dovecot.log()
    );
    assert_eq!(decisions(&db).await.len(), 2);
}

#[tokio::test]
async fn watch_reads_what_arrives_marks_it_seen_and_stops_on_sigterm() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let letters = build_letters(&db, dir.path()).await;
    let dovecot = Dovecot::start();
    let url = format!("imaps://bounce@127.0.0.1:{}/INBOX", dovecot.imaps);
    // Killed if an assertion below fails while it watches.
    let mut child = KillOnDrop::new(
        fetch_command(
            &db,
            &dovecot,
            Some(PASSWORD),
            &["--watch", "--poll", "1", "--after", "seen", &url],
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap(),
    );
    dovecot.deliver("INBOX", &hard_bounce(&letters[0], "watch-1"));
    dovecot.deliver("INBOX", &fixture("not-a-bounce.eml"));
    // Read and kept: the bounce seen, the one that needs a look flagged
    // too (maildir flags: S seen, F flagged).
    eventually(PATIENCE, "the first two messages read and kept", || async {
        let read = reason(&db, &letters[0].email).await;
        let flags = dovecot.flags("INBOX");
        match (&read, flags.as_slice()) {
            (Some(_), [first, second]) if first == "FS" && second == "S" => Ok(()),
            _ => Err(format!("{read:?} {flags:?} {}", dovecot.log())),
        }
    })
    .await;
    // A second bounce arriving later is read by a later pass.
    dovecot.deliver("INBOX", &hard_bounce(&letters[1], "watch-2"));
    eventually(PATIENCE, "the later bounce read", || async {
        match reason(&db, &letters[1].email).await {
            Some(_) => Ok(()),
            None => Err(dovecot.log()),
        }
    })
    .await;
    let status = Command::new("kill")
        .args(["-TERM", &child.get().id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.take().wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{:?}: {stdout}", out.status);
    assert!(
        stdout.contains(&format!("hard bounce for {}", letters[1].email)),
        "{stdout}"
    );
    assert_eq!(
        decisions(&db).await.len(),
        2,
        "seen messages are not read again"
    );
}
