//! `linktrack build --smtp`: every letter handed to a real MTA (Postfix's
//! `smtp-sink`, started by the test on a free port), each exactly once
//! across re-runs; refusals go to the rejects file; an unreachable MTA
//! fails the job naming the host.

use crate::common::build::build_command;
use crate::common::smtp_sink::SmtpSink;
use crate::common::{wait, TestDb};
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

fn build(db: &TestDb, dir: &Path, smtp: &str, extra: &[&str]) -> Output {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    build_command(&db.url)
        .args(["--smtp", smtp, "--mailing"])
        .arg(fixtures.join("mailing.json"))
        .arg("--recipients")
        .arg(fixtures.join("recipients.csv"))
        .arg("--out")
        .arg(dir.join("letters.jsonl"))
        .args(extra)
        .output()
        .unwrap()
}

fn message_id(message: &str) -> Option<String> {
    message
        .lines()
        .find_map(|line| line.strip_prefix("Message-ID: "))
        .map(|id| id.trim().to_owned())
}

async fn deliveries(db: &TestDb) -> Vec<(u64, String)> {
    sqlx::query_as("SELECT letter_id, CAST(status AS CHAR) FROM deliveries ORDER BY letter_id")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

/// The mailing's delivered count (`stats_deliveries`, kept by the ledger's
/// writes) agrees with the `deliveries` rows it summarises.
async fn assert_delivered_count_agrees(db: &TestDb) {
    let counted: Vec<(String, u64)> =
        sqlx::query_as("SELECT mailing_id, delivered FROM stats_deliveries ORDER BY mailing_id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT mailing_id, COUNT(*) FROM deliveries WHERE status = 'delivered' \
         GROUP BY mailing_id ORDER BY mailing_id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let rows: Vec<(String, u64)> = rows.into_iter().map(|(m, n)| (m, n as u64)).collect();
    assert_eq!(counted, rows, "stats_deliveries disagrees with deliveries");
}

#[tokio::test]
async fn every_letter_reaches_the_mta_once_across_re_runs() {
    let db = TestDb::new().await;
    let sink = SmtpSink::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let first = build(&db, dir.path(), &sink.url(), &[]);
    let stderr = String::from_utf8_lossy(&first.stderr);
    // 2: the fixtures reject two recipients and suppress one on purpose.
    assert_eq!(first.status.code(), Some(2), "{stderr}");
    let letters = std::fs::read_to_string(dir.path().join("letters.jsonl")).unwrap();
    let built: Vec<serde_json::Value> = letters
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // smtp-sink does not offer SMTPUTF8, so the fixtures' non-ASCII addresses
    // (zoë.müller@, lucía@) are refused for good; every other letter arrives.
    let ascii: Vec<&serde_json::Value> = built
        .iter()
        .filter(|l| l["email"].as_str().unwrap().is_ascii())
        .collect();
    // fixtures/recipients.csv, no suppressions imported: seven built, two
    // of them to non-ASCII addresses.
    assert_eq!((ascii.len(), built.len()), (5, 7), "{letters}");
    assert!(
        stderr.contains(&format!("delivered {} over SMTP", ascii.len())),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{} refused by the MTA", built.len() - ascii.len())),
        "{stderr}"
    );

    let received = sink.messages();
    assert_eq!(
        received.len(),
        ascii.len(),
        "one message per deliverable letter"
    );
    let mut ids: Vec<String> = received.iter().filter_map(|m| message_id(m)).collect();
    ids.sort();
    let mut expected: Vec<String> = ascii
        .iter()
        .map(|l| l["message_id"].as_str().unwrap().to_owned())
        .collect();
    expected.sort();
    assert_eq!(ids, expected, "each letter's own message arrived");
    assert!(received.iter().all(|m| m.contains("multipart/alternative")));
    let settled = deliveries(&db).await;
    assert_eq!(settled.len(), built.len());
    assert_eq!(
        settled.iter().filter(|(_, s)| s == "delivered").count(),
        ascii.len()
    );

    // The same command again: nothing is delivered twice.
    let again = build(&db, dir.path(), &sink.url(), &[]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{} settled by an earlier run", built.len())),
        "{stderr}"
    );
    assert_eq!(
        sink.messages().len(),
        ascii.len(),
        "a re-run delivered again"
    );
    assert_delivered_count_agrees(&db).await;
}

#[tokio::test]
async fn a_refusing_mta_puts_each_letter_in_the_rejects_file_with_its_reply() {
    let db = TestDb::new().await;
    let sink = SmtpSink::start(&["-f", "RCPT"]);
    let dir = tempfile::tempdir().unwrap();
    let output = build(&db, dir.path(), &sink.url(), &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(sink.messages().is_empty());
    let rejects = std::fs::read_to_string(dir.path().join("letters.jsonl.rejects.jsonl")).unwrap();
    let refused: Vec<&str> = rejects
        .lines()
        .filter(|l| l.contains("refused by the MTA"))
        .collect();
    let settled = deliveries(&db).await;
    assert!(!settled.is_empty());
    assert_eq!(refused.len(), settled.len(), "{rejects}");
    assert!(settled.iter().all(|(_, s)| s == "rejected"));
    // Each line names the address and why: the server's 5xx reply, or (for
    // an address that needs SMTPUTF8, which smtp-sink lacks) that reason.
    assert!(
        refused
            .iter()
            .all(|l| l.contains("permanent error (5") || l.contains("SMTPUTF8")),
        "{rejects}"
    );
    assert!(
        refused.iter().any(|l| l.contains("bob@example.org")),
        "{rejects}"
    );
}

#[tokio::test]
async fn an_unreachable_mta_fails_the_job_naming_it_and_leaves_everything_re_runnable() {
    let db = TestDb::new().await;
    // A port held by a socket that does not listen: connections to it are
    // refused for as long as the test runs.
    let (_unreachable, addr) = crate::common::down_socket();
    let port = addr.port();
    let dir = tempfile::tempdir().unwrap();
    let output = build(
        &db,
        dir.path(),
        &format!("smtp://127.0.0.1:{port}"),
        &["--smtp-retries", "1", "--smtp-backoff-ms", "10"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("the MTA at 127.0.0.1:{port} kept failing")),
        "{stderr}"
    );
    assert!(stderr.contains("left for a re-run"), "{stderr}");
    assert!(deliveries(&db).await.is_empty());

    // The MTA is back: the same command delivers every letter.
    let sink = SmtpSink::start(&[]);
    let output = build(&db, dir.path(), &sink.url(), &[]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!sink.messages().is_empty());
    let delivered = deliveries(&db)
        .await
        .into_iter()
        .filter(|(_, s)| s == "delivered")
        .count();
    assert_eq!(delivered, sink.messages().len());
}

/// The builder killed with SIGKILL in the middle of delivery, then the same
/// command again: every recipient receives its message, and only the few
/// the killed run had in flight (handed over, reply unrecorded) can arrive
/// twice, each named in the re-run's output.
#[tokio::test]
async fn a_kill_9_during_delivery_then_a_re_run_delivers_every_letter_and_names_each_that_may_arrive_twice(
) {
    let db = TestDb::new().await;
    let sink = SmtpSink::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let total = 1200;
    let recipients = dir.path().join("r.csv");
    let lines: String = std::iter::once("email,first_name\n".to_owned())
        .chain((0..total).map(|n| format!("reader{n}@example.com,R{n}\n")))
        .collect();
    std::fs::write(&recipients, lines).unwrap();
    let mailing = dir.path().join("m.json");
    std::fs::write(
        &mailing,
        r#"{"mailing_id":"kill9","subject":"Hi {{ first_name }}","from":"News <n@example.com>","html":"<p>Hi {{ first_name }}, <a href=\"https://example.com/a\">read</a></p>"}"#,
    )
    .unwrap();
    let command = || {
        let mut c = build_command(&db.url);
        c.args(["--batch-size", "100", "--smtp-connections", "4"])
            .args(["--smtp", &sink.url(), "--mailing"])
            .arg(&mailing)
            .arg("--recipients")
            .arg(&recipients)
            .arg("--out")
            .arg(dir.path().join("letters.jsonl"))
            .env("RUST_LOG", "error");
        c
    };
    let mut killed = command()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Not `eventually`: the kill must land in the middle of the run, so
    // the check comes every 5 ms, where `eventually`'s pauses grow to a
    // quarter second, time enough for the rest of the run to go out.
    let deadline = Instant::now() + wait::scaled(wait::PATIENCE);
    while sink.messages().len() < 300 {
        assert!(Instant::now() < deadline, "delivery did not start");
        assert!(
            killed.try_wait().unwrap().is_none(),
            "finished before the kill"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    killed.kill().unwrap(); // SIGKILL
    killed.wait().unwrap();
    let before = sink.messages().len();
    assert!(before < total, "the kill came too late to test anything");

    let rerun = command().output().unwrap();
    let stderr = String::from_utf8_lossy(&rerun.stderr);
    assert!(rerun.status.success(), "{stderr}");

    let mut per_recipient = std::collections::HashMap::<String, usize>::new();
    for message in sink.messages() {
        let to = message
            .lines()
            .find_map(|l| l.strip_prefix("To: "))
            .expect("a To header")
            .trim()
            .to_owned();
        *per_recipient.entry(to).or_default() += 1;
    }
    assert_eq!(per_recipient.len(), total, "every recipient got its letter");
    let twice: Vec<&String> = per_recipient
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(to, _)| to)
        .collect();
    assert!(per_recipient.values().all(|n| *n <= 2));
    assert!(
        twice.len() <= 4,
        "more duplicates than connections in flight: {twice:?}"
    );
    for to in &twice {
        assert!(
            stderr.contains(to.as_str()),
            "{to} arrived twice but is not named: {stderr}"
        );
    }
    assert!(
        !dir.path().join("letters.jsonl.deliveries.jsonl").exists(),
        "the re-run recorded and removed the killed run's delivery log"
    );
    assert_delivered_count_agrees(&db).await;
}

/// A killed run can leave lines in its delivery log (`--delivery-log`,
/// default beside `--out`) that never reached `deliveries`: the re-run
/// records them before it sends anything. A logged answer means the letter
/// is not sent again; a logged `sending` mark with no answer means it may
/// have arrived: it is sent again and named. A letter left `sending` in
/// the database with nothing in the log is sent again too; a torn last
/// line is skipped.
#[tokio::test]
async fn a_re_run_records_what_a_killed_run_left_in_its_delivery_log() {
    let db = TestDb::new().await;
    let sink = SmtpSink::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let first = build(&db, dir.path(), &sink.url(), &[]);
    assert_eq!(
        first.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let log = dir.path().join("letters.jsonl.deliveries.jsonl");
    assert!(!log.exists(), "a finished run removes its delivery log");
    let sent = sink.messages().len();
    let delivered: Vec<u64> = deliveries(&db)
        .await
        .into_iter()
        .filter(|(_, status)| status == "delivered")
        .map(|(id, _)| id)
        .collect();
    let [answered_a, answered_b, unlogged, marked_only, ..] = delivered[..] else {
        panic!("too few delivered letters: {delivered:?}");
    };
    // What a kill between handing over and committing leaves behind.
    sqlx::query(
        "UPDATE deliveries SET status = 'sending', reply = '' WHERE letter_id IN (?, ?, ?)",
    )
    .bind(answered_a)
    .bind(answered_b)
    .bind(unlogged)
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("DELETE FROM deliveries WHERE letter_id = ?")
        .bind(marked_only)
        .execute(&db.pool)
        .await
        .unwrap();
    // None of those four was recorded delivered when the run died.
    sqlx::query("UPDATE stats_deliveries SET delivered = delivered - 4")
        .execute(&db.pool)
        .await
        .unwrap();
    let line = |id: u64, status: &str, reply: &str| {
        serde_json::json!({"mailing_id": "weekly-2026-47", "letter_id": id,
            "status": status, "reply": reply})
        .to_string()
    };
    let log_text: String = [
        line(answered_a, "sending", ""),
        line(answered_b, "sending", ""),
        line(marked_only, "sending", ""),
        line(answered_a, "delivered", "250 2.0.0 from the log"),
        line(answered_b, "delivered", "250 2.0.0 from the log"),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect();
    std::fs::write(&log, format!("{log_text}{{\"mailing_id\":\"weekly")).unwrap();

    let again = build(&db, dir.path(), &sink.url(), &[]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(2), "{stderr}");
    assert_eq!(
        sink.messages().len(),
        sent + 2,
        "only the letters without a logged answer are sent again: {stderr}"
    );
    let letters = std::fs::read_to_string(dir.path().join("letters.jsonl")).unwrap();
    let address_of = |id: u64| -> String {
        letters
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|l| l["letter_id"].as_u64() == Some(id))
            .and_then(|l| l["email"].as_str().map(str::to_owned))
            .expect("the letter is in the output")
    };
    for id in [unlogged, marked_only] {
        let address = address_of(id);
        assert!(
            stderr.contains(&address),
            "{address} may arrive twice but is not named: {stderr}"
        );
    }
    let rows: Vec<(u64, String, String)> =
        sqlx::query_as("SELECT letter_id, CAST(status AS CHAR), reply FROM deliveries")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    for id in [answered_a, answered_b, unlogged, marked_only] {
        let (_, status, reply) = rows.iter().find(|(row, ..)| *row == id).unwrap();
        assert_eq!(status, "delivered", "letter {id}");
        let from_log = id == answered_a || id == answered_b;
        assert_eq!(
            reply == "250 2.0.0 from the log",
            from_log,
            "letter {id}: {reply}"
        );
    }
    assert!(!log.exists(), "the re-run removes the log once recorded");
    assert_delivered_count_agrees(&db).await;
}

fn build_with_pools(db: &TestDb, dir: &Path, pools: &Path) -> Output {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    build_command(&db.url)
        .arg("--pools")
        .arg(pools)
        .arg("--mailing")
        .arg(fixtures.join("mailing.json"))
        .arg("--recipients")
        .arg(fixtures.join("recipients.csv"))
        .arg("--out")
        .arg(dir.join("letters.jsonl"))
        .output()
        .unwrap()
}

/// The fixture mailing's pool is `newsletters`: its two MTAs share the
/// letters; a pools file without that pool is refused before any letter.
#[tokio::test]
async fn a_pools_file_spreads_the_mailing_over_its_pools_mtas() {
    let db = TestDb::new().await;
    let (a, b) = (SmtpSink::start(&[]), SmtpSink::start(&[]));
    let dir = tempfile::tempdir().unwrap();
    let pools = dir.path().join("pools.toml");
    std::fs::write(
        &pools,
        format!(
            "[pools.newsletters]\nurls = [\"{}\", \"{}\"]\nconnections = 2\n\n[pools.other]\nurls = [\"smtp://127.0.0.1:1\"]\n",
            a.url(),
            b.url()
        ),
    )
    .unwrap();
    let output = build_with_pools(&db, dir.path(), &pools);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let (to_a, to_b) = (a.messages().len(), b.messages().len());
    assert!(
        to_a > 0 && to_b > 0,
        "both MTAs get letters: {to_a} and {to_b}"
    );
    assert!(
        stderr.contains(&format!("delivered {} over SMTP", to_a + to_b)),
        "{stderr}"
    );

    let missing = dir.path().join("missing.toml");
    std::fs::write(&missing, "[pools.other]\nurls = [\"smtp://127.0.0.1:1\"]\n").unwrap();
    let db = TestDb::new().await;
    let output = build_with_pools(&db, dir.path(), &missing);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("missing.toml: the mailing's pool \"newsletters\" is not in the file"),
        "{stderr}"
    );
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "refused before any letter");
}

/// A TCP relay in front of `target` that counts the connections it accepts:
/// what an MTA would see as SMTP sessions.
fn counting_relay(target: u16) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sessions = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&sessions);
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            counted.fetch_add(1, Ordering::SeqCst);
            let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", target)) else {
                continue;
            };
            let (mut client_in, mut server_out) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || std::io::copy(&mut client_in, &mut server_out));
            let (mut server_in, mut client_out) = (server, client);
            std::thread::spawn(move || std::io::copy(&mut server_in, &mut client_out));
        }
    });
    (port, sessions)
}

/// `--smtp-messages-per-connection N`: a connection carries at most N
/// messages, then says QUIT and a new one is opened; without it, one
/// connection carries them all.
#[tokio::test]
async fn messages_per_connection_caps_each_smtp_session() {
    use std::sync::atomic::Ordering;
    let sink = SmtpSink::start(&[]);
    let mut sessions_by_limit = Vec::new();
    for limit in [None, Some("2")] {
        let db = TestDb::new().await;
        let (port, sessions) = counting_relay(sink.port);
        let dir = tempfile::tempdir().unwrap();
        let mut extra = vec!["--smtp-connections", "1"];
        if let Some(limit) = limit {
            extra.extend(["--smtp-messages-per-connection", limit]);
        }
        let output = build(&db, dir.path(), &format!("smtp://127.0.0.1:{port}"), &extra);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        let delivered = deliveries(&db)
            .await
            .into_iter()
            .filter(|(_, s)| s == "delivered")
            .count();
        assert_eq!(delivered, 5, "the fixtures' five ASCII addresses: {stderr}");
        sessions_by_limit.push((delivered, sessions.load(Ordering::SeqCst)));
    }
    let (_, unlimited) = sessions_by_limit[0];
    let (delivered, capped) = sessions_by_limit[1];
    assert_eq!(unlimited, 1, "one connection carries every message");
    // Each session carries at most 2 sends. The delivered messages alone
    // need ceil(5 / 2) = 3 sessions; the fixtures' 7 letters, if the 2
    // refused ones (SMTPUTF8, refused by lettre before or after it takes a
    // lane: its internals decide) took their turn on a lane too, 4.
    let letters: usize = 7;
    assert!(
        (delivered.div_ceil(2)..=letters.div_ceil(2)).contains(&capped),
        "{capped} sessions for {delivered} delivered of {letters} letters at 2 per session"
    );
}

#[tokio::test]
async fn the_delivered_count_counts_each_letter_once_whatever_writes_it_and_how_often() {
    use linktrack::store::deliveries::{
        delivered_count, mark_delivered_now, write_ledger, DeliveryStatus, LedgerWrites,
    };
    let db = TestDb::new().await;
    let mut conn = db.pool.acquire().await.unwrap();
    let answer = |id: u64, status| (id, status, format!("250 ok {id}"));
    // Marks only: nothing delivered yet.
    let marks = LedgerWrites {
        sending: (1..=6).collect(),
        ..LedgerWrites::default()
    };
    write_ledger(&mut conn, "m", &marks).await.unwrap();
    assert_eq!(
        delivered_count(&db.pool, &crate::common::mailing_id("m"))
            .await
            .unwrap(),
        0
    );
    // Answers, one of them a refusal, one mark dropped.
    let answers = LedgerWrites {
        outcomes: vec![
            answer(1, DeliveryStatus::Delivered),
            answer(2, DeliveryStatus::Delivered),
            answer(3, DeliveryStatus::Rejected),
        ],
        forgotten: vec![6],
        ..LedgerWrites::default()
    };
    write_ledger(&mut conn, "m", &answers).await.unwrap();
    assert_eq!(
        delivered_count(&db.pool, &crate::common::mailing_id("m"))
            .await
            .unwrap(),
        2
    );
    // The same answers again (a delivery log replayed after a kill), and a
    // different answer for a letter already answered: counted once, and the
    // first answer holds.
    write_ledger(&mut conn, "m", &answers).await.unwrap();
    let late = LedgerWrites {
        sending: vec![1, 3],
        outcomes: vec![
            answer(3, DeliveryStatus::Delivered),
            answer(4, DeliveryStatus::Delivered),
        ],
        ..LedgerWrites::default()
    };
    write_ledger(&mut conn, "m", &late).await.unwrap();
    assert_eq!(
        delivered_count(&db.pool, &crate::common::mailing_id("m"))
            .await
            .unwrap(),
        3
    );
    let (status,): (String,) =
        sqlx::query_as("SELECT CAST(status AS CHAR) FROM deliveries WHERE letter_id = 3")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(status, "rejected");
    // Delivered outside the SMTP delivery (the demo): new letters, letters
    // marked, letters already delivered, twice, and another mailing.
    mark_delivered_now(
        &db.pool,
        &crate::common::mailing_id("m"),
        &[2, 5, 7, 7, 8],
        "demo",
    )
    .await
    .unwrap();
    mark_delivered_now(&db.pool, &crate::common::mailing_id("m"), &[5, 8], "demo")
        .await
        .unwrap();
    mark_delivered_now(&db.pool, &crate::common::mailing_id("other"), &[1], "demo")
        .await
        .unwrap();
    assert_eq!(
        delivered_count(&db.pool, &crate::common::mailing_id("m"))
            .await
            .unwrap(),
        6
    );
    assert_eq!(
        delivered_count(&db.pool, &crate::common::mailing_id("other"))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        delivered_count(&db.pool, &crate::common::mailing_id("none"))
            .await
            .unwrap(),
        0
    );
    assert_delivered_count_agrees(&db).await;
}
