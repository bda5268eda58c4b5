//! Issue 29, item 4: a webhook URL's credentials never leave the process.
//! A password, a query key and a fragment are planted in the URL; every
//! output path is grepped for them: `webhooks list`, `webhooks test`,
//! `serve --help`, the server's log (the endpoint-drift warning) and the
//! description stored in `outbound_endpoints`.

use crate::common::wait::{eventually, PATIENCE};
use crate::common::TestDb;
use linktrack::store::outbox::{self, Registered};
use std::process::{Command, Output};

const PASSWORD: &str = "planted-password-7f3a";
const QUERY_KEY: &str = "planted-query-key-91c2";

/// Nothing listens on port 9: nothing is ever delivered.
fn hook_url() -> String {
    format!("http://hookuser:{PASSWORD}@127.0.0.1:9/hook?key={QUERY_KEY}")
}

fn linktrack(db: &TestDb, secret: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_linktrack"));
    command
        .env("DATABASE_URL", &db.url)
        .env("LINKTRACK_WEBHOOK_URL", hook_url())
        .env("LINKTRACK_WEBHOOK_SECRET", secret)
        // A loopback URL: allowed explicitly (issue 43).
        .env("LINKTRACK_OUTBOUND_ALLOW_PRIVATE", "127.0.0.1")
        .env("RUST_LOG", "info");
    command
}

fn text_of(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn assert_no_credential(what: &str, text: &str) {
    for planted in [PASSWORD, QUERY_KEY] {
        assert!(!text.contains(planted), "{what} shows {planted:?}:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_urls_credentials_appear_in_no_output() {
    let db = TestDb::new().await;
    let secret = linktrack::outbound::signature::Secret::generate();
    // Another server has the endpoint differently: this one warns at start.
    let elsewhere = Registered {
        server: "elsewhere:/journal".to_owned(),
        name: "default".to_owned(),
        fingerprint: "0".repeat(64),
        description: "http://127.0.0.1:9/other all".to_owned(),
    };
    outbox::register_endpoints(
        &db.pool,
        &elsewhere.server,
        std::slice::from_ref(&elsewhere),
    )
    .await
    .unwrap();

    let journal = tempfile::tempdir().unwrap();
    // Both listeners on port 0; the child logs the addresses it bound.
    let mut command = linktrack(&db, &secret);
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--admin-listen", "127.0.0.1:0"])
        .arg("--journal")
        .arg(journal.path());
    let mut server = crate::common::Serving::spawn(command).await;
    let admin = server
        .admin
        .expect("the admin listener's address is logged");
    let stored = eventually(PATIENCE, "the server registers its endpoint", || async {
        let stored: Option<String> = sqlx::query_scalar(
            "SELECT description FROM outbound_endpoints WHERE server <> ? AND name = 'default'",
        )
        .bind(&elsewhere.server)
        .fetch_optional(&db.pool)
        .await
        .unwrap();
        stored.ok_or("nothing registered")
    })
    .await;
    assert_eq!(stored, "http://hookuser:***@127.0.0.1:9/hook?key=*** all");
    // The warning is logged as its gauge is set: wait for the gauge.
    let admin = crate::common::loopback_url(admin);
    eventually(PATIENCE, "the difference counted", || async {
        let text = match reqwest::get(format!("{admin}/metrics")).await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let warned = text
            .lines()
            .filter(|l| l.starts_with("linktrack_outbound_endpoint_differences{"))
            .any(|l| l.ends_with(" 1"));
        match warned {
            true => Ok(()),
            false => Err(text),
        }
    })
    .await;
    server.terminate().await;
    let log = server.log();
    assert!(
        log.contains("differs from server"),
        "no drift warning:\n{log}"
    );
    assert!(log.contains("hookuser:***@"), "{log}");
    assert_no_credential("the server's log", &log);

    let listed = tokio::task::block_in_place(|| {
        linktrack(&db, &secret)
            .args(["webhooks", "list"])
            .output()
            .unwrap()
    });
    assert!(listed.status.success(), "{listed:?}");
    let listed = text_of(&listed);
    assert!(
        listed.contains("http://hookuser:***@127.0.0.1:9/hook?key=***"),
        "{listed}"
    );
    assert_no_credential("webhooks list", &listed);

    let tested = tokio::task::block_in_place(|| {
        linktrack(&db, &secret)
            .args(["webhooks", "test", "--endpoint", "default"])
            .output()
            .unwrap()
    });
    assert!(!tested.status.success(), "nothing listens on port 9");
    assert_no_credential("webhooks test", &text_of(&tested));

    let help = tokio::task::block_in_place(|| {
        linktrack(&db, &secret)
            .args(["serve", "--help"])
            .output()
            .unwrap()
    });
    assert!(help.status.success());
    assert_no_credential("serve --help", &text_of(&help));
}
