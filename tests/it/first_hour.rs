//! What a new user meets in the first hour, through the real binary: errors
//! that say what to do, numeric ids, CSV files from spreadsheets, plain logs.

use crate::common::build::build_command;
use crate::common::TestDb;
use std::process::{Command, Output};

fn linktrack_with(url: &str, args: &[&str], rust_log: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linktrack"))
        .args(args)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", rust_log)
        .env_remove("NO_COLOR")
        .output()
        .expect("running linktrack")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A port nothing listens on: bound, then released.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn a_refused_connection_is_said_once_with_the_target_and_a_hint() {
    let port = closed_port();
    let url = format!("mysql://app:pw-s3cret@127.0.0.1:{port}/shop");
    let output = linktrack_with(&url, &["partitions", "list"], "warn");
    let text = stderr(&output);
    assert!(!output.status.success());
    assert!(
        text.contains(&format!(
            "cannot connect to MySQL at 127.0.0.1:{port} as user `app`, database `shop`"
        )),
        "{text}"
    );
    assert_eq!(text.to_lowercase().matches("refused").count(), 1, "{text}");
    assert!(text.contains("hint: is MariaDB or MySQL running"), "{text}");
    assert!(!text.contains("pw-s3cret"), "the password leaked: {text}");
}

#[tokio::test]
async fn a_wrong_password_is_said_as_such_without_the_password() {
    let db = TestDb::new().await;
    let url = db
        .url
        .replacen("mysql://root@", "mysql://root:pw-s3cret@", 1);
    assert_ne!(
        url, db.url,
        "the test database URL changed shape: {}",
        db.url
    );
    let output = linktrack_with(&url, &["partitions", "list"], "warn");
    let text = stderr(&output);
    assert!(!output.status.success());
    assert!(text.contains("access denied"), "{text}");
    assert!(
        text.contains("check the user and password in DATABASE_URL"),
        "{text}"
    );
    assert!(!text.contains("pw-s3cret"), "the password leaked: {text}");
}

#[tokio::test]
async fn logs_written_to_a_pipe_have_no_colour_codes() {
    let db = TestDb::new().await;
    // A database that does not exist yet: migrate logs that it creates it.
    let url = format!("{}_fresh", db.url);
    let output = linktrack_with(&url, &["migrate"], "info");
    let text = stderr(&output);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("creating the database"), "{text}");
    assert!(!text.contains('\u{1b}'), "escape codes in a pipe: {text:?}");
    let name = url.rsplit('/').next().unwrap().to_owned();
    sqlx::query(&format!("DROP DATABASE IF EXISTS `{name}`"))
        .execute(&db.pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_numeric_mailing_id_and_a_semicolon_csv_build() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let mailing = dir.path().join("m.json");
    std::fs::write(
        &mailing,
        r#"{"mailing_id":4242,"subject":"Hi {{ first_name }}","from":"n@example.com","tags":[7],"html":"<a href=\"https://example.com/a\">a</a>"}"#,
    )
    .unwrap();
    let recipients = dir.path().join("r.csv");
    std::fs::write(
        &recipients,
        "\u{feff}email;first_name;balance\r\nana@example.com;Ana;1,50\r\nbo@example.com;Bo;2,00\r\n",
    )
    .unwrap();
    let out = dir.path().join("letters.jsonl");
    let output = build_command(&db.url)
        .arg("--mailing")
        .arg(&mailing)
        .arg("--recipients")
        .arg(&recipients)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let letters = std::fs::read_to_string(&out).unwrap();
    let letters: Vec<serde_json::Value> = letters
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(letters.len(), 2);
    assert_eq!(letters[0]["mailing_id"], "4242");
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT mailing_id FROM links ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(stored, ["4242"]);
}

#[tokio::test]
async fn a_csv_without_an_email_column_is_refused_before_any_letter() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let mailing = dir.path().join("m.json");
    std::fs::write(
        &mailing,
        r#"{"mailing_id":"m1","subject":"s","from":"n@example.com","html":"<p>x</p>"}"#,
    )
    .unwrap();
    let recipients = dir.path().join("people.csv");
    std::fs::write(&recipients, "mail|name\na@example.com|Ana\n").unwrap();
    let output = build_command(&db.url)
        .args(["--out", "-", "--mailing"])
        .arg(&mailing)
        .arg("--recipients")
        .arg(&recipients)
        .output()
        .unwrap();
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.contains("people.csv") && text.contains("no address column"),
        "{text}"
    );
    assert!(output.stdout.is_empty(), "letters were written");
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

/// Only MySQL and MariaDB URLs: sqlx's MySQL driver reads any URL, so a
/// `postgres://` one pointing at a MariaDB port used to create its database
/// there. Another scheme is named and refused before any connection;
/// `mariadb://` is the same as `mysql://`.
#[tokio::test]
async fn only_mysql_and_mariadb_urls_are_accepted() {
    let db = TestDb::new().await;
    let unused = format!("{}_not_created", db.name);
    for scheme in ["postgres", "postgresql", "http", "sqlite"] {
        let url = db
            .url
            .replacen("mysql://", &format!("{scheme}://"), 1)
            .replace(&db.name, &unused);
        let output = linktrack_with(&url, &["migrate"], "warn");
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{scheme}: {text}");
        assert!(
            text.contains(&format!("the scheme \"{scheme}\" is not supported"))
                && text.contains("mysql://"),
            "{text}"
        );
    }
    let created: Option<String> = sqlx::query_scalar(
        "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
    )
    .bind(&unused)
    .fetch_optional(&db.pool)
    .await
    .unwrap();
    assert_eq!(created, None, "a refused URL reached the server");

    let mariadb = db.url.replacen("mysql://", "mariadb://", 1);
    for args in [&["migrate"][..], &["partitions", "list"]] {
        let output = linktrack_with(&mariadb, args, "warn");
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    }
}

/// `linktrack suppressions list | head -1`: the reader has what it wanted
/// and closes the pipe. The listing ends quietly with exit 0 (it panicked
/// on `println!`, exit 101). The pipe here is closed before the command
/// writes anything, so every write meets the closed pipe, as the lines
/// after the first do under `head -1`.
#[tokio::test]
async fn listings_end_quietly_when_their_reader_closes_the_pipe() {
    let db = TestDb::new().await;
    let added = linktrack_with(
        &db.url,
        &["suppressions", "add", "a@example.com", "b@example.com"],
        "warn",
    );
    assert!(added.status.success(), "{}", stderr(&added));
    let listings: [&[&str]; 4] = [
        &["suppressions", "list"],
        &["partitions", "list"],
        &["webhooks", "list"],
        &["webhooks", "new-secret"],
    ];
    for args in listings {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let output = Command::new(env!("CARGO_BIN_EXE_linktrack"))
            .args(args)
            .env("DATABASE_URL", &db.url)
            .env("RUST_LOG", "warn")
            .stdout(writer)
            .output()
            .expect("running linktrack");
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {text}");
        assert!(text.is_empty(), "{args:?}: {text}");
    }
}
