//! `linktrack relay`: real clients (Python's smtplib) hand it messages on
//! loopback, a real MTA (Postfix's smtp-sink) downstream keeps what it
//! forwards. Each recipient gets a letter of its own whose links are
//! tracked (rows stored, redirecting on `serve`), suppressed recipients
//! are refused at RCPT TO, only the open networks submit without AUTH,
//! bad input gets a clear reply and the session goes on, and a message
//! accepted before a kill -9 is forwarded exactly once after a restart.

use crate::common::build::{tracked_tokens, BASE};
use crate::common::smtp_sink::SmtpSink;
use crate::common::spider::until;
use crate::common::wait::{self, PATIENCE};
use crate::common::{down_socket, linktrack, serve_command, Serving, TestDb};
use linktrack::store::links::LinkKind;
use std::path::Path;
use std::process::Command;

const TOKEN: &str = "relay-test-token-0123456789abcdef";

/// `linktrack relay` on a free loopback port, forwarding to `smtp`, open
/// to 127.0.0.3 only, AUTH with [`TOKEN`].
pub(crate) async fn start_relay(db: &TestDb, smtp: &str, spool: &Path, extra: &[&str]) -> Serving {
    let mut command = Command::new(env!("CARGO_BIN_EXE_linktrack"));
    command
        .args(["relay", "--listen", "127.0.0.1:0", "--smtp", smtp])
        .args(["--relay-open-to", "127.0.0.3/32", "--base-url", BASE])
        .args(["--smtp-backoff-ms", "50", "--spool"])
        .arg(spool)
        .args(extra)
        .env("DATABASE_URL", &db.url)
        .env("LINKTRACK_API_TOKEN", TOKEN)
        .env_remove("LINKTRACK_BOUNCE_DOMAIN")
        .env_remove("LINKTRACK_SMTP_URL")
        .env("RUST_LOG", "error,linktrack=info");
    Serving::spawn(command).await
}

/// Run a Python smtplib script against the relay at `port`; its printed
/// lines (JSON) come back.
pub(crate) fn smtplib(port: u16, script: &str) -> Vec<serde_json::Value> {
    let program = format!(
        "import smtplib, json, sys\nPORT = {port}\nTOKEN = {TOKEN:?}\n\
         def out(*a):\n    print(json.dumps([x.decode() if isinstance(x, bytes) else x for x in a]))\n    \
         sys.stdout.flush()\n{script}"
    );
    let output = Command::new("python3")
        .args(["-c", &program])
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "the smtplib script failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

const HTML_MESSAGE: &str = "From: News <news@example.com>\r\n\
Subject: Spring\r\n\
X-Linktrack-Mailing: spring-relay\r\n\
X-Linktrack-Tags: spring, news\r\n\
MIME-Version: 1.0\r\n\
Content-Type: multipart/alternative; boundary=\"b1\"\r\n\r\n\
--b1\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nRead https://example.com/page\r\n\
--b1\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n\
<html><body><p>Caf=C3=A9 <a href=3D\"https://example.com/page?a=3D1&amp;b=3D2\">read</a>\r\n\
<a href=3D\"https://example.com/off\" data-linktrack=3D\"off\">plain</a></p></body></html>\r\n\
--b1--\r\n";

#[tokio::test]
async fn each_recipient_gets_a_tracked_letter_and_the_suppressed_one_is_refused() {
    let db = TestDb::new().await;
    let added = linktrack(&db, &["suppressions", "add", "gone@example.org"]);
    assert!(added.status.success(), "{added:?}");
    let sink = SmtpSink::start(&[]);
    let spool = tempfile::tempdir().unwrap();
    let relay = start_relay(&db, &sink.url(), spool.path(), &[]).await;
    let script = format!(
        "s = smtplib.SMTP('127.0.0.1', PORT, source_address=('127.0.0.2', 0))\n\
         code, ehlo = s.ehlo('client.example')\n\
         out('ehlo', code, ehlo.decode())\n\
         out('mail', *s.mail('news@example.com'))\n\
         s.rset()\n\
         s.login('any', TOKEN)\n\
         out('mail', *s.mail('news@example.com'))\n\
         for r in ['a@example.com', 'b@example.net', 'gone@example.org']:\n    \
             code, text = s.rcpt(r)\n    out('rcpt', r, code, text.decode())\n\
         out('data', *s.data({HTML_MESSAGE:?}.encode()))\n\
         s.quit()\n"
    );
    let replies = smtplib(relay.addr.port(), &script);
    let ehlo = replies[0][2].as_str().unwrap();
    for keyword in [
        "PIPELINING",
        "8BITMIME",
        "SMTPUTF8",
        "SIZE",
        "ENHANCEDSTATUSCODES",
        "AUTH PLAIN LOGIN",
    ] {
        assert!(ehlo.contains(keyword), "EHLO lacks {keyword}: {ehlo}");
    }
    // From 127.0.0.2, not an open network, without AUTH: refused.
    assert_eq!(replies[1][1], 530, "{replies:?}");
    assert_eq!(replies[2][1], 250, "{replies:?}");
    assert_eq!(replies[3][2], 250);
    assert_eq!(replies[4][2], 250);
    assert_eq!(replies[5][2], 550, "{replies:?}");
    let refusal = replies[5][3].as_str().unwrap();
    assert!(
        refusal.starts_with("5.7.1") && refusal.contains("suppression list"),
        "{refusal}"
    );
    assert_eq!(replies[6][1], 250, "{replies:?}");

    let messages = sink.wait_for(2);
    assert_eq!(messages.len(), 2, "{}", relay.log());
    let mut clicks = Vec::new();
    for message in &messages {
        assert!(!message.contains("X-Linktrack-Mailing"), "{message}");
        assert!(
            message.contains("List-Unsubscribe: <https://t.example.test/u/"),
            "{message}"
        );
        assert!(message.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click"));
        assert!(
            message.contains("Read https://example.com/page"),
            "the text part stays: {message}"
        );
        let unfolded = message.replace("=\r\n", "").replace("=\n", "");
        assert!(
            unfolded.contains("https://example.com/off"),
            "data-linktrack=off stays"
        );
        assert!(
            !unfolded.contains("https://example.com/page?a"),
            "the link is tracked: {message}"
        );
        let tokens = tracked_tokens(&unfolded);
        assert!(
            tokens.iter().any(|(kind, _)| *kind == LinkKind::Pixel),
            "{message}"
        );
        clicks.extend(
            tokens
                .into_iter()
                .filter(|(kind, _)| *kind == LinkKind::Click),
        );
    }
    // Two letters, each its click and honeypot tokens, no two the same.
    let mut distinct: Vec<String> = clicks.iter().map(|(_, t)| t.to_string()).collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), clicks.len());

    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT email, url FROM links WHERE mailing_id = 'spring-relay' AND kind = 'click' \
         AND url <> '' ORDER BY email",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            (
                "a@example.com".to_owned(),
                "https://example.com/page?a=1&b=2".to_owned()
            ),
            (
                "b@example.net".to_owned(),
                "https://example.com/page?a=1&b=2".to_owned()
            ),
        ]
    );
    let letters: u64 =
        sqlx::query_scalar("SELECT letters FROM stats_letters WHERE mailing_id = 'spring-relay'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(letters, 2);

    // The links redirect to their originals on `serve`.
    let journal = tempfile::tempdir().unwrap();
    let serving = Serving::spawn(serve_command(&db, journal.path(), &[])).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut redirected = 0;
    for (_, token) in &clicks {
        let response = client
            .get(format!("{}/c/{token}", serving.base()))
            .send()
            .await
            .unwrap();
        // The honeypot's `/c/` link leads elsewhere.
        let location = response
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok());
        if response.status() == 302 && location == Some("https://example.com/page?a=1&b=2") {
            redirected += 1;
        }
    }
    assert_eq!(redirected, 2, "one tracked link per letter redirects");

    // Each forwarded letter is delivered as stats count it: its row and
    // the mailing's delivered count (written after the MTA's answer).
    let delivered = wait::eventually(PATIENCE, "two delivered rows", || async {
        let delivered: (i64, Option<u64>) = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM deliveries WHERE mailing_id = 'spring-relay' \
             AND status = 'delivered'), \
             (SELECT delivered FROM stats_deliveries WHERE mailing_id = 'spring-relay')",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if delivered.0 == 2 {
            Ok(delivered)
        } else {
            Err(delivered)
        }
    })
    .await;
    assert_eq!(delivered, (2, Some(2)), "{}", relay.log());
}

/// The relay holds the suppression list in memory and follows its change
/// log: an address suppressed while it runs (by `suppressions add`, or by
/// an unsubscribe, which the replay writes with its own statement) is
/// refused at `RCPT TO` within the follow interval, and accepted again
/// once taken off the list.
#[tokio::test]
async fn a_suppression_added_while_the_relay_runs_is_refused_soon_after() {
    let db = TestDb::new().await;
    let sink = SmtpSink::start(&[]);
    let spool = tempfile::tempdir().unwrap();
    let relay = start_relay(&db, &sink.url(), spool.path(), &[]).await;
    let port = relay.addr.port();
    // One transaction's RCPT TO reply code for `to`.
    let rcpt = move |to: &'static str| async move {
        let script = format!(
            "s = smtplib.SMTP('127.0.0.1', PORT, source_address=('127.0.0.3', 0))\n\
             s.ehlo('client.example')\n\
             s.mail('news@example.com')\n\
             out(*s.rcpt({to:?}))\n\
             s.quit()\n"
        );
        smtplib(port, &script)[0][0].as_i64()
    };
    assert_eq!(rcpt("late@example.org").await, Some(250));
    assert_eq!(rcpt("Unsub@Example.org").await, Some(250));

    let added = linktrack(&db, &["suppressions", "add", "late@example.org"]);
    assert!(added.status.success(), "{added:?}");
    until("suppressions add, then RCPT TO", 550, || {
        rcpt("late@example.org")
    })
    .await;
    linktrack::store::events::suppress_unsubscribed(&db.pool, &["unsub@example.org"])
        .await
        .unwrap();
    until(
        "an unsubscribe, then RCPT TO (as spelt by the client)",
        550,
        || rcpt("Unsub@Example.org"),
    )
    .await;

    let removed = linktrack(&db, &["suppressions", "remove", "late@example.org"]);
    assert!(removed.status.success(), "{removed:?}");
    until("suppressions remove, then RCPT TO", 250, || {
        rcpt("late@example.org")
    })
    .await;
    assert_eq!(
        rcpt("Unsub@Example.org").await,
        Some(550),
        "{}",
        relay.log()
    );
}

#[tokio::test]
async fn only_the_open_networks_submit_without_auth() {
    let db = TestDb::new().await;
    let sink = SmtpSink::start(&[]);
    let spool = tempfile::tempdir().unwrap();
    let relay = start_relay(&db, &sink.url(), spool.path(), &[]).await;
    let script = "for source in ['127.0.0.2', '127.0.0.3']:\n    \
        s = smtplib.SMTP('127.0.0.1', PORT, source_address=(source, 0))\n    \
        s.ehlo('client.example')\n    \
        out(source, *s.mail('someone@example.com'))\n    \
        s.rset()\n    \
        try:\n        s.login('any', 'not-the-token')\n        out(source, 'login', 235)\n    \
        except smtplib.SMTPAuthenticationError as e:\n        out(source, 'login', e.smtp_code)\n    \
        s.quit()\n";
    let replies = smtplib(relay.addr.port(), script);
    assert_eq!(replies[0][1], 530, "{replies:?}");
    assert!(replies[0][2].as_str().unwrap().starts_with("5.7.0"));
    assert_eq!(
        replies[1][2], 535,
        "a wrong password is refused: {replies:?}"
    );
    assert_eq!(replies[2][1], 250, "127.0.0.3 is open: {replies:?}");
}

#[tokio::test]
async fn bad_input_gets_a_clear_reply_and_the_next_message_goes_through() {
    let db = TestDb::new().await;
    let sink = SmtpSink::start(&[]);
    let spool = tempfile::tempdir().unwrap();
    let relay = start_relay(
        &db,
        &sink.url(),
        spool.path(),
        &["--max-message-bytes", "100000", "--max-recipients", "100"],
    )
    .await;
    let script = "s = smtplib.SMTP('127.0.0.1', PORT, source_address=('127.0.0.3', 0))\n\
        s.ehlo('client.example')\n\
        def send(name, body):\n    \
            s.mail('news@example.com'); s.rcpt('a@example.com')\n    \
            s.putcmd('data'); s.getreply()\n    \
            s.send(body + b'\\r\\n.\\r\\n')\n    \
            out(name, *s.getreply())\n\
        send('bare-lf', b'Subject: x\\n\\nbody\\n')\n\
        send('nul', b'Subject: x\\r\\n\\r\\nbo\\x00dy')\n\
        send('no-headers', b'just text')\n\
        send('too-big', b'Subject: x\\r\\n\\r\\n' + b'0123456789' * 20000)\n\
        s.mail('news@example.com')\n\
        codes = [s.rcpt('r%d@example.com' % n)[0] for n in range(10000)]\n\
        out('rcpts', codes.count(250), codes.count(452))\n\
        s.rset()\n\
        s.mail('news@example.com'); s.rcpt('a@example.com')\n\
        out('good', *s.data(b'Subject: fine\\r\\n\\r\\nno html here\\r\\n'))\n\
        s.quit()\n";
    let replies = smtplib(relay.addr.port(), script);
    let reply = |n: usize| {
        (
            replies[n][1].as_i64().unwrap(),
            replies[n][2].as_str().unwrap().to_owned(),
        )
    };
    assert_eq!(reply(0).0, 554, "{replies:?}");
    assert!(reply(0).1.contains("Bare LF"));
    assert_eq!(reply(1).0, 554);
    assert!(reply(1).1.contains("NUL"));
    assert_eq!(reply(2).0, 554);
    assert!(reply(2).1.contains("no header fields"), "{replies:?}");
    assert_eq!(reply(3).0, 552);
    assert!(reply(3).1.starts_with("5.3.4"));
    assert_eq!(replies[4][1], 100, "{replies:?}");
    assert_eq!(replies[4][2], 9900);
    assert_eq!(replies[5][1], 250, "{replies:?}");
    let messages = sink.wait_for(1);
    assert_eq!(messages.len(), 1, "only the good message went on");
    assert!(messages[0].contains("Subject: fine"), "{}", messages[0]);
    assert!(messages[0].contains("no html here"), "{}", messages[0]);
}

#[tokio::test]
async fn a_message_accepted_before_a_kill_is_forwarded_once_after_the_restart() {
    let db = TestDb::new().await;
    let spool = tempfile::tempdir().unwrap();
    // The MTA is down: the message waits in the spool.
    let (_down, down) = down_socket();
    let mut relay = start_relay(&db, &format!("smtp://{down}"), spool.path(), &[]).await;
    let script = format!(
        "s = smtplib.SMTP('127.0.0.1', PORT, source_address=('127.0.0.3', 0))\n\
         s.ehlo('client.example')\n\
         s.mail('news@example.com'); s.rcpt('a@example.com')\n\
         out(*s.data({HTML_MESSAGE:?}.encode()))\n\
         s.quit()\n"
    );
    let replies = smtplib(relay.addr.port(), &script);
    assert_eq!(replies[0][0], 250, "{replies:?}");
    assert!(
        replies[0][1].as_str().unwrap().contains("queued as"),
        "the MTA is down: spooled before the 250: {replies:?}"
    );
    relay.child.kill().unwrap(); // SIGKILL
    relay.wait_exit().await;

    let sink = SmtpSink::start(&[]);
    let relay = start_relay(&db, &sink.url(), spool.path(), &[]).await;
    wait::eventually(PATIENCE, "the spool empties", || async {
        match queued(spool.path()) {
            0 => Ok(()),
            left => Err(format!("{left} queued: {}", relay.log())),
        }
    })
    .await;
    let messages = sink.wait_for(1);
    assert_eq!(messages.len(), 1, "{}", relay.log());
    assert!(tracked_link_in(&messages[0]), "{}", messages[0]);
}

/// `--forward now` (the default): with the MTA up, the message is in the
/// MTA's hands when the client hears 250, and never touched the spool;
/// `--forward queued` spools it first.
#[tokio::test]
async fn a_message_the_mta_takes_at_once_is_answered_without_the_spool() {
    let db = TestDb::new().await;
    let sink = SmtpSink::start(&[]);
    let script = format!(
        "s = smtplib.SMTP('127.0.0.1', PORT, source_address=('127.0.0.3', 0))\n\
         s.ehlo('client.example')\n\
         for n in range(3):\n    \
             s.mail('news@example.com'); s.rcpt('a%d@example.com' % n); s.rcpt('b%d@example.com' % n)\n    \
             out(*s.data({HTML_MESSAGE:?}.encode()))\n\
         s.quit()\n"
    );
    for (flags, said, letters) in [
        (&[][..], "delivered to the MTA", 6),
        (&["--forward", "queued"][..], "queued as", 12),
    ] {
        let spool = tempfile::tempdir().unwrap();
        let relay = start_relay(&db, &sink.url(), spool.path(), flags).await;
        let replies = smtplib(relay.addr.port(), &script);
        for reply in &replies {
            assert_eq!(reply[0], 250, "{flags:?}: {replies:?}");
            assert!(
                reply[1].as_str().unwrap().contains(said),
                "{flags:?}: {replies:?}"
            );
        }
        if flags.is_empty() {
            // Nothing was ever written: no message folder, queued or staged.
            for folder in ["queue", "tmp"] {
                let entries = std::fs::read_dir(spool.path().join(folder))
                    .unwrap()
                    .count();
                assert_eq!(entries, 0, "{folder}: {}", relay.log());
            }
        }
        let messages = sink.wait_for(letters);
        assert_eq!(messages.len(), letters, "{}", relay.log());
        assert!(messages.iter().all(|m| tracked_link_in(m)));
    }
}

/// `--metrics-listen`: the relay's counters at `/metrics`, counting what
/// it did (two recipients handed over, one refused as suppressed).
#[tokio::test]
async fn the_relays_counters_are_served_for_prometheus() {
    let db = TestDb::new().await;
    sqlx::query("INSERT INTO suppressions (email, reason) VALUES ('gone@example.com', 'test')")
        .execute(&db.pool)
        .await
        .unwrap();
    let sink = SmtpSink::start(&[]);
    let spool = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics = format!("127.0.0.1:{port}");
    let relay = start_relay(
        &db,
        &sink.url(),
        spool.path(),
        &["--metrics-listen", &metrics],
    )
    .await;
    let script = format!(
        "s = smtplib.SMTP('127.0.0.1', PORT, source_address=('127.0.0.3', 0))\n\
         s.ehlo('client.example')\n\
         s.mail('news@example.com'); s.rcpt('a@example.com'); s.rcpt('b@example.com')\n\
         out(*s.rcpt('gone@example.com'))\n\
         out(*s.data({HTML_MESSAGE:?}.encode()))\n\
         s.quit()\n"
    );
    let replies = smtplib(relay.addr.port(), &script);
    assert_eq!(replies[0][0], 550, "{replies:?}");
    assert_eq!(replies[1][0], 250, "{replies:?}");
    assert_eq!(sink.wait_for(2).len(), 2);
    let text = crate::common::client()
        .get(format!("http://{metrics}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |name: &str| -> f64 {
        text.lines()
            .find(|line| line.starts_with(name) && line[name.len()..].starts_with(' '))
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} not in {text}"))
    };
    assert_eq!(value("linktrack_relay_forwarded_total"), 2.0, "{text}");
    assert_eq!(value("linktrack_relay_accepted_total"), 1.0, "{text}");
}

/// Whether a forwarded message's HTML part holds a tracked link: its
/// quoted-printable soft line breaks (`=` CRLF) may fall inside the URL.
fn tracked_link_in(message: &str) -> bool {
    message
        .replace("=\r\n", "")
        .contains("https://t.example.test/c/")
}

/// Letters still in the spool's queue.
fn queued(spool: &Path) -> usize {
    std::fs::read_dir(spool.join("queue"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|message| {
            std::fs::read_dir(message.path())
                .map(|letters| letters.count())
                .unwrap_or(0)
        })
        .sum()
}

/// [`start_relay`] offering STARTTLS with a certificate for
/// `relay.example.test` (signed by a test CA of its own, its files in
/// `certs`); returns it and the CA's PEM file, for the client to trust.
async fn start_relay_with_tls(
    db: &TestDb,
    smtp: &str,
    spool: &Path,
    certs: &Path,
) -> (Serving, std::path::PathBuf) {
    let ca = crate::common::test_ca::write_signed_certificate(
        certs,
        "linktrack relay test CA",
        &["relay.example.test"],
    );
    let (cert, key) = (certs.join("cert.pem"), certs.join("key.pem"));
    let flags = [
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    (start_relay(db, smtp, spool, &flags).await, ca)
}

#[tokio::test]
async fn starttls_comes_before_auth_and_the_letter_goes_through_over_tls() {
    let db = TestDb::new().await;
    let sink = SmtpSink::start(&[]);
    let spool = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    let (relay, ca) = start_relay_with_tls(&db, &sink.url(), spool.path(), certs.path()).await;
    let script = format!(
        "import ssl\n\
         s = smtplib.SMTP('127.0.0.1', PORT, source_address=('127.0.0.2', 0))\n\
         code, ehlo = s.ehlo('client.example')\n\
         out('ehlo', code, ehlo.decode())\n\
         out('auth-in-clear', *s.docmd('AUTH', 'PLAIN AGFueQB4'))\n\
         context = ssl.create_default_context(cafile={ca:?})\n\
         s._host = 'relay.example.test'\n\
         out('starttls', *s.starttls(context=context))\n\
         out('version', s.sock.version())\n\
         code, ehlo = s.ehlo('client.example')\n\
         out('ehlo-tls', code, ehlo.decode())\n\
         out('starttls-again', *s.docmd('STARTTLS'))\n\
         out('login', *s.login('any', TOKEN))\n\
         out('send', s.sendmail('news@example.com', ['a@example.com'], {HTML_MESSAGE:?}.encode()))\n\
         s.quit()\n",
        ca = ca.to_str().unwrap(),
    );
    let replies = smtplib(relay.addr.port(), &script);
    let ehlo = replies[0][2].as_str().unwrap();
    assert!(ehlo.contains("STARTTLS"), "{ehlo}");
    assert!(!ehlo.contains("AUTH"), "no password in the clear: {ehlo}");
    assert_eq!(replies[1][1], 538, "AUTH before STARTTLS: {replies:?}");
    assert_eq!(replies[2][1], 220, "{replies:?}");
    assert!(
        replies[3][1].as_str().unwrap().starts_with("TLSv1."),
        "{replies:?}"
    );
    let ehlo = replies[4][2].as_str().unwrap();
    assert!(ehlo.contains("AUTH PLAIN LOGIN"), "{ehlo}");
    assert!(!ehlo.contains("STARTTLS"), "offered once: {ehlo}");
    assert_eq!(replies[5][1], 503, "{replies:?}");
    assert_eq!(replies[6][1], 235, "{replies:?}");
    assert_eq!(replies[7][1], serde_json::json!({}), "{replies:?}");
    let messages = sink.wait_for(1);
    assert_eq!(messages.len(), 1, "{}", relay.log());
    assert!(
        messages[0].contains("List-Unsubscribe: <https://t.example.test/u/"),
        "the letter is tracked: {}",
        messages[0]
    );
}

#[tokio::test]
async fn a_certificate_file_that_is_not_one_stops_the_start_naming_it() {
    let db = TestDb::new().await;
    let spool = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    let cert = certs.path().join("cert.pem");
    std::fs::write(&cert, "not a certificate").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_linktrack"))
        .args([
            "relay",
            "--listen",
            "127.0.0.1:0",
            "--smtp",
            "smtp://127.0.0.1:9",
        ])
        .args(["--base-url", BASE, "--spool"])
        .arg(spool.path())
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&cert)
        .env("DATABASE_URL", &db.url)
        .env_remove("LINKTRACK_SMTP_URL")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cert.pem") && stderr.contains("--tls-cert"),
        "{stderr}"
    );
}

/// The way a sending host uses the relay: swaks submits to a real Postfix
/// whose `relayhost` is the relay; Postfix goes over STARTTLS and AUTHs
/// with the token (SASL), the relay tracks the letter and hands it on.
#[tokio::test]
async fn postfix_with_the_relay_as_relayhost_hands_it_swaks_letter_over_tls() {
    use crate::common::postfix::{Postfix, PostfixConfig};
    let db = TestDb::new().await;
    let sink = SmtpSink::start(&[]);
    let spool = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    let (relay, _ca) = start_relay_with_tls(&db, &sink.url(), spool.path(), certs.path()).await;
    let postfix = Postfix::start(PostfixConfig {
        main_cf: vec![
            // Nothing is kept here: every domain goes to the relayhost.
            "virtual_mailbox_domains =".into(),
            format!("relayhost = [127.0.0.1]:{}", relay.addr.port()),
            "smtp_sasl_auth_enable = yes".into(),
            format!("smtp_sasl_password_maps = static:any:{TOKEN}"),
            "smtp_sasl_security_options = noanonymous".into(),
            "smtp_tls_security_level = encrypt".into(),
        ],
        ..PostfixConfig::default()
    });
    let message = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(message.path(), HTML_MESSAGE.replace("\r\n", "\n")).unwrap();
    let swaks = Command::new("swaks")
        .args(["--server", &format!("127.0.0.1:{}", postfix.port)])
        .args(["--from", "news@example.com", "--to", "reader@example.net"])
        .arg("--data")
        .arg(message.path())
        .output()
        .expect("swaks runs (Debian's swaks; scripts/test installs it)");
    assert!(
        swaks.status.success(),
        "{}",
        String::from_utf8_lossy(&swaks.stdout)
    );
    let messages = sink.wait_for(1);
    assert_eq!(
        messages.len(),
        1,
        "postfix: {}\nrelay: {}",
        postfix.log(),
        relay.log()
    );
    let letter = &messages[0];
    assert!(
        letter.contains("List-Unsubscribe: <https://t.example.test/u/"),
        "{letter}"
    );
    assert!(!letter.contains("X-Linktrack-Mailing"), "{letter}");
    // Postfix logs the hand-over once the relay's 250 is in, through its
    // log service: a moment after the letter may have gone on to the sink.
    let relayed = format!("127.0.0.1]:{}", relay.addr.port());
    wait::eventually(
        PATIENCE,
        "Postfix says it handed the letter to the relay",
        || async {
            let log = postfix.log();
            if log.contains("status=sent") && log.contains(&relayed) {
                Ok(())
            } else {
                Err(log)
            }
        },
    )
    .await;
    let stored: (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM links WHERE mailing_id = 'spring-relay' AND email = 'reader@example.net'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        stored.0 >= 2,
        "the letter's link and pixel rows: {stored:?}"
    );
}

/// `--pools`: a message goes out through the MTAs of the pool its
/// `X-Linktrack-Pool` names (the field removed), else `--pool`'s; a pool
/// the file does not have is refused at DATA naming the field.
#[tokio::test]
async fn each_message_goes_out_through_its_pools_mta() {
    let db = TestDb::new().await;
    let (news, receipts) = (SmtpSink::start(&[]), SmtpSink::start(&[]));
    let spool = tempfile::tempdir().unwrap();
    let pools = spool.path().join("pools.toml");
    std::fs::write(
        &pools,
        format!(
            "[pools.news]\nurls = [\"{}\"]\nconnections = 2\n\
             [pools.receipts]\nurls = [\"{}\"]\n",
            news.url(),
            receipts.url()
        ),
    )
    .unwrap();
    let queue = spool.path().join("queue");
    let mut command = Command::new(env!("CARGO_BIN_EXE_linktrack"));
    command
        .args(["relay", "--listen", "127.0.0.1:0", "--pools"])
        .arg(&pools)
        .args(["--pool", "news", "--relay-open-to", "127.0.0.0/8"])
        .args(["--base-url", BASE, "--smtp-backoff-ms", "50", "--spool"])
        .arg(&queue)
        .env("DATABASE_URL", &db.url)
        .env_remove("LINKTRACK_BOUNCE_DOMAIN")
        .env_remove("LINKTRACK_SMTP_URL")
        .env("RUST_LOG", "error,linktrack=info");
    let relay = Serving::spawn(command).await;
    let receipt = HTML_MESSAGE.replace(
        "Subject: Spring\r\n",
        "Subject: Receipt\r\nX-Linktrack-Pool: receipts\r\n",
    );
    let stray = HTML_MESSAGE.replace(
        "Subject: Spring\r\n",
        "Subject: Stray\r\nX-Linktrack-Pool: nowhere\r\n",
    );
    let script = format!(
        "s = smtplib.SMTP('127.0.0.1', PORT)\n\
         for n in range(6):\n    \
             out('news', s.sendmail('news@example.com', [f'r{{n}}@example.com'], {HTML_MESSAGE:?}.encode()))\n\
         out('receipt', s.sendmail('shop@example.com', ['buyer@example.com'], {receipt:?}.encode()))\n\
         try:\n    s.sendmail('shop@example.com', ['x@example.com'], {stray:?}.encode())\n    out('stray', 250, '')\n\
         except smtplib.SMTPDataError as e:\n    out('stray', e.smtp_code, e.smtp_error.decode())\n\
         s.quit()\n"
    );
    let replies = smtplib(relay.addr.port(), &script);
    assert_eq!(replies[7][1], 554, "{replies:?}");
    let refusal = replies[7][2].as_str().unwrap();
    assert!(
        refusal.contains("X-Linktrack-Pool") && refusal.contains("nowhere"),
        "{refusal}"
    );
    let newsletters = news.wait_for(6);
    let receipts_got = receipts.wait_for(1);
    assert_eq!(newsletters.len(), 6, "{}", relay.log());
    assert_eq!(receipts_got.len(), 1, "{}", relay.log());
    assert!(receipts_got[0].contains("Subject: Receipt"));
    assert!(!receipts_got[0].contains("X-Linktrack-Pool"));
    assert!(newsletters.iter().all(|m| m.contains("Subject: Spring")));
}
