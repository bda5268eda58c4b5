//! Recipients from any platform's export (issue 39, docs/build.md
//! "Recipients"): the headers of fixtures/exports/ as each platform ships
//! them build without editing the file, and a header that cannot give a
//! field the creative reads is one error before anything is stored.

use crate::common::build::options;
use crate::common::TestDb;
use linktrack::builder::{self, BuildError, ColumnMapping};
use std::path::{Path, PathBuf};

const MAILING: &str = r#"{"mailing_id":"exports","subject":"{{ first_name }}, this week","from":"News <news@example.com>",
 "html":"<html><body><p>Hello {{ first_name }}, <a href=\"https://example.com/read\">read</a></p></body></html>"}"#;

fn export(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/exports")
        .join(name)
}

fn mailing(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("mailing.json");
    std::fs::write(&path, text).unwrap();
    path
}

fn columns(mappings: &[&str]) -> Vec<ColumnMapping> {
    mappings.iter().map(|m| m.parse().unwrap()).collect()
}

/// Each platform's export builds its three letters, the address from its
/// own address column and `{{ first_name }}` from its first-name column.
#[tokio::test]
async fn every_platforms_export_builds_as_it_ships() {
    let db = TestDb::new().await;
    for (file, mappings) in [
        ("mailchimp.csv", &[][..]),
        ("brevo.csv", &[][..]),
        ("substack.csv", &["first_name=name"][..]),
        ("mailerlite.csv", &["first_name=Name"][..]),
        ("hubspot.csv", &[][..]),
        ("klaviyo.csv", &[][..]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let text = MAILING.replace("\"exports\"", &format!("\"{file}\""));
        let options = builder::BuildOptions {
            columns: columns(mappings),
            ..options(dir.path(), mailing(dir.path(), &text), export(file))
        };
        let summary = builder::run(&db.pool, &options)
            .await
            .unwrap_or_else(|err| panic!("{file}: {err}"));
        assert_eq!(
            (summary.rows_read, summary.letters_built, summary.rejected),
            (3, 3, 0),
            "{file}: {summary}"
        );
        let letters = std::fs::read_to_string(dir.path().join("letters.jsonl")).unwrap();
        let built: Vec<(String, String)> = letters
            .lines()
            .map(|line| {
                let letter: serde_json::Value = serde_json::from_str(line).unwrap();
                (
                    letter["email"].as_str().unwrap().to_owned(),
                    letter["subject"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            built,
            [
                ("ann.lee@example.com", "Ann, this week"),
                ("bob.stone@example.org", "Bob, this week"),
                ("zoe.muller@example.de", "Zoë, this week"),
            ]
            .map(|(a, s)| (a.to_owned(), s.to_owned())),
            "{file}"
        );
    }
}

/// The issue's cases: `Email,First_Name` with `{{ first_name }}` builds;
/// a Mailchimp export whose creative reads a field no column gives is one
/// error naming the field and the columns, exit 1, nothing stored; and
/// `--column` fixes it.
#[tokio::test]
async fn a_field_no_column_gives_is_one_error_before_anything_is_stored() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let recipients = dir.path().join("r.csv");
    std::fs::write(&recipients, "Email,First_Name\nann@example.com,Ann\n").unwrap();
    let summary = builder::run(
        &db.pool,
        &options(dir.path(), mailing(dir.path(), MAILING), recipients),
    )
    .await
    .unwrap();
    assert_eq!((summary.letters_built, summary.rejected), (1, 0));

    let dir = tempfile::tempdir().unwrap();
    let reads_city = MAILING.replace("\"exports\"", "\"city\"").replace(
        "Hello {{ first_name }}",
        "Hello {{ first_name }} in {{ CITY }}",
    );
    let path = mailing(dir.path(), &reads_city);
    let err = builder::run(
        &db.pool,
        &options(dir.path(), path.clone(), export("mailchimp.csv")),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, BuildError::Recipients { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("line 1"), "{text}");
    assert!(text.contains("`{{ CITY }}` (in its html)"), "{text}");
    assert!(text.contains("\"Email Address\", \"First Name\""), "{text}");
    assert!(text.contains("--column CITY=HEADER"), "{text}");
    let (stored,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM mailings WHERE mailing_id = 'city'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(stored, 0, "the mailing was stored");
    assert!(!dir.path().join("letters.jsonl").exists());
    // Mailchimp's REGION column as the city: --column reaches any column.
    let options = builder::BuildOptions {
        columns: columns(&["CITY=REGION"]),
        ..options(dir.path(), path, export("mailchimp.csv"))
    };
    let summary = builder::run(&db.pool, &options).await.unwrap();
    assert_eq!(summary.letters_built, 3);
}

/// The binary: `--column` on the command line, and the refusal's exit 1.
#[tokio::test]
async fn the_command_line_maps_columns_and_refuses_with_exit_1() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let path = mailing(dir.path(), MAILING);
    let run = |extra: &[&str]| {
        crate::common::build::build_command(&db.url)
            .env_remove("LINKTRACK_SECRET")
            .arg("--mailing")
            .arg(&path)
            .arg("--recipients")
            .arg(export("substack.csv"))
            .arg("--out")
            .arg(dir.path().join("letters.jsonl"))
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = run(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--column first_name=HEADER"), "{stderr}");
    let built = run(&["--column", "first_name=name"]);
    assert_eq!(
        built.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
}
