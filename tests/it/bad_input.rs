//! Bad recipients files (issue 23): every row accounted for, nothing
//! swallowed or leaked, no panic. Each case runs the real `build::run`
//! against its own database; docs/build.md's "What happens to bad input"
//! table is these tests.

use crate::common::TestDb;
use linktrack::builder::{self, BuildError, BuildOptions, Summary};
use proptest::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A small tracked mailing: the subject and body carry `first_name`, the
/// To header carries `name` when the file has one.
const MAILING: &str = r#"{"mailing_id":"bad-input","subject":"Hi {{ first_name }}","from":"News <news@example.com>",
 "html":"<html><body><p>Hello {{ first_name }}, <a href=\"https://example.com/a\">read</a></p></body></html>"}"#;

fn options(dir: &Path, recipients: PathBuf) -> BuildOptions {
    let mailing = dir.join("mailing.json");
    if !mailing.exists() {
        std::fs::write(&mailing, MAILING).unwrap();
    }
    BuildOptions {
        batch_size: 500,
        id_block: 1000,
        summary: Some(dir.join("summary.json")),
        ..crate::common::build::options(dir, mailing, recipients)
    }
}

/// Write `contents` as `name` in `dir` and build it.
async fn build_file(
    db: &TestDb,
    dir: &Path,
    name: &str,
    contents: &[u8],
) -> Result<Summary, BuildError> {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    builder::run(&db.pool, &options(dir, path)).await
}

fn letters(dir: &Path) -> Vec<Value> {
    match std::fs::read_to_string(dir.join("letters.jsonl")) {
        Ok(text) => text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn rejects(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("rejects.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The conservation law, from the summary and from the files on disk.
fn assert_conserved(dir: &Path, summary: &Summary) {
    assert!(summary.is_conserved(), "{summary}");
    assert_eq!(
        letters(dir).len() as u64,
        summary.letters_built,
        "{summary}"
    );
    assert_eq!(
        rejects(dir).len() as u64,
        summary.suppressed + summary.rejected,
        "{summary}"
    );
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(written["rows_read"], summary.rows_read);
    assert_eq!(written["conserved"], true);
    let text = summary.to_string();
    let sum = format!(
        "read {} {} = {} built + {} suppressed + {} rejected",
        summary.rows_read,
        if summary.rows_read == 1 {
            "row"
        } else {
            "rows"
        },
        summary.letters_built,
        summary.suppressed,
        summary.rejected
    );
    assert!(text.starts_with(&sum), "{text}");
}

/// A refused file: one line of error naming the file, nothing built, no
/// row stored.
async fn assert_refused(db: &TestDb, dir: &Path, result: Result<Summary, BuildError>) -> String {
    let error = result.expect_err("the file is refused").to_string();
    assert!(!error.contains('\n'), "one line: {error}");
    assert!(
        error.contains(&dir.display().to_string()),
        "names the file: {error}"
    );
    assert!(letters(dir).is_empty(), "{error}");
    assert!(!dir.join("letters.jsonl.partial").exists() || letters_partial_is_empty(dir));
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "nothing stored: {error}");
    error
}

fn letters_partial_is_empty(dir: &Path) -> bool {
    std::fs::read(dir.join("letters.jsonl.partial")).map_or(true, |b| b.is_empty())
}

/// The issue's file: 20,000 rows, `user10001@example.com,"Stray` on line 10,002.
fn stray_quote_file(columns: usize) -> String {
    let header = if columns == 2 {
        "email,first_name\n"
    } else {
        "email,first_name,city\n"
    };
    let mut text = String::from(header);
    for i in 1..=20_000 {
        let city = if columns == 2 { "" } else { ",Oslo" };
        if i == 10_001 {
            text.push_str(&format!("user{i}@example.com,\"Stray{city}\n"));
        } else {
            text.push_str(&format!("user{i}@example.com,N{i}{city}\n"));
        }
    }
    text
}

#[tokio::test]
async fn a_stray_quote_refuses_the_file_naming_its_line_and_builds_nothing() {
    let db = TestDb::new().await;
    for columns in [2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let file = stray_quote_file(columns);
        let result = build_file(&db, dir.path(), "stray.csv", file.as_bytes()).await;
        let error = assert_refused(&db, dir.path(), result).await;
        assert!(
            error.contains("line 10002: a quoted field opens here and never closes"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_closed_quote_that_swallows_rows_refuses_the_file() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let file = "email,first_name\na@example.com,\"A\nb@example.com,B\nc\"\nd@example.com,D\n";
    let result = build_file(&db, dir.path(), "swallow.csv", file.as_bytes()).await;
    let error = assert_refused(&db, dir.path(), result).await;
    assert!(
        error.contains("line 2: a quoted field opens here and runs over a line break into line 3"),
        "{error}"
    );
}

#[tokio::test]
async fn line_breaks_in_header_fields_are_row_rejects_and_the_rest_is_built() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    // The issue's name, in a CRLF file; a two-line street address is kept.
    let file = "email,name,first_name,street\r\n\
                ann@example.com,\"Ann\r\nBcc: x\",Ann,Main St\r\n\
                bob@example.com,Bob,Bob,\"12 Main St\r\nApt 4\"\r\n\
                cy@example.com,Cy,\"C\ry\",Elm St\r\n";
    let summary = build_file(&db, dir.path(), "names.csv", file.as_bytes())
        .await
        .unwrap();
    assert_conserved(dir.path(), &summary);
    assert_eq!(
        (summary.rows_read, summary.letters_built),
        (3, 1),
        "{summary}"
    );
    let rejects = rejects(dir.path());
    assert_eq!(rejects[0]["line"], 2);
    assert!(
        rejects[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("control character U+000A in field `name`"),
        "{rejects:?}"
    );
    assert_eq!(rejects[1]["line"], 6, "each CRLF counts one line");
    assert!(
        rejects[1]["reason"]
            .as_str()
            .unwrap()
            .contains("field `subject (after personalising)`"),
        "{rejects:?}"
    );
    let letters = letters(dir.path());
    assert_eq!(letters[0]["email"], "bob@example.com");
    assert!(letters[0]["message"]
        .as_str()
        .unwrap()
        .contains("To: Bob <bob@example.com>"));
}

/// Every control character in each field a header carries (`email`,
/// `name`, and `first_name` through the subject): a per-row reject naming
/// the field, never a panic; the clean row beside them is built.
#[tokio::test]
async fn every_control_character_in_every_header_field_is_a_row_reject() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let controls: Vec<char> = (0u32..0x20)
        .chain(0x7f..0xa0)
        .filter_map(char::from_u32)
        .collect();
    let mut lines = vec![
        serde_json::json!({"email": "clean@example.com", "name": "Clean", "first_name": "C"})
            .to_string(),
    ];
    let mut expected_fields = Vec::new();
    for (i, c) in controls.iter().enumerate() {
        let cases = [
            (
                "email",
                serde_json::json!({"email": format!("a{c}{i}@example.com"), "first_name": "X"}),
            ),
            (
                "name",
                serde_json::json!({"email": format!("n{i}@example.com"), "name": format!("Ann{c}Bcc: x"), "first_name": "X"}),
            ),
            (
                "subject",
                serde_json::json!({"email": format!("s{i}@example.com"), "first_name": format!("X{c}Y")}),
            ),
        ];
        for (field, row) in cases {
            lines.push(row.to_string());
            expected_fields.push((field, *c));
        }
    }
    let file = lines.join("\n") + "\n";
    let summary = build_file(&db, dir.path(), "controls.jsonl", file.as_bytes())
        .await
        .unwrap();
    assert_conserved(dir.path(), &summary);
    assert_eq!(summary.letters_built, 1, "{summary}");
    assert_eq!(
        summary.rejected as usize,
        expected_fields.len(),
        "{summary}"
    );
    let by_line: std::collections::HashMap<u64, String> = rejects(dir.path())
        .iter()
        .map(|r| {
            (
                r["line"].as_u64().unwrap(),
                r["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for (index, (field, c)) in expected_fields.iter().enumerate() {
        // Line 1 is the clean row.
        let reason = &by_line[&(index as u64 + 2)];
        let code = format!("U+{:04X}", u32::from(*c));
        // NUL is refused in any field, so in `first_name` before the subject.
        let named = match (*field, *c) {
            ("subject", '\0') => "`first_name`".to_owned(),
            ("subject", _) => "`subject (after personalising)`".to_owned(),
            (field, _) => format!("`{field}`"),
        };
        assert!(
            reason.starts_with(&format!("control character {code} in field {named}")),
            "{field} {code}: {reason}"
        );
    }
}

#[tokio::test]
async fn header_names_ignore_case_and_padding_and_crlf_lines_count_right() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let file = " Email ,first_name\r\na@example.com,A\r\n\r\nnot-an-address,B\r\nc@example.com\r\n";
    let summary = build_file(&db, dir.path(), "h.csv", file.as_bytes())
        .await
        .unwrap();
    assert_conserved(dir.path(), &summary);
    assert_eq!(
        (summary.rows_read, summary.letters_built, summary.rejected),
        (3, 1, 2),
        "the empty line 3 is not a row: {summary}"
    );
    let lines: Vec<u64> = rejects(dir.path())
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [4, 5]);
}

#[tokio::test]
async fn binary_and_compressed_files_are_refused_in_one_line() {
    let db = TestDb::new().await;
    let cases: [(&str, &[u8], &str); 5] = [
        (
            "list.csv.gz",
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03email",
            "gzip",
        ),
        ("list.xlsx", b"PK\x03\x04\x14\x00\x06\x00", "ZIP archive"),
        (
            "list.csv",
            b"email\x00\x01\x02\x00\x00\xff\xfe\x00",
            "NUL bytes",
        ),
        ("list.txt", b"\xff\xfee\x00m\x00a\x00i\x00l\x00", "UTF-16"),
        (
            "list.xls",
            b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",
            "Excel 97-2003",
        ),
    ];
    for (name, bytes, kind) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut contents = bytes.to_vec();
        contents.extend(std::iter::repeat_n(0xAB_u8, 10_000));
        let result = build_file(&db, dir.path(), name, &contents).await;
        let error = assert_refused(&db, dir.path(), result).await;
        assert!(error.contains(kind) && error.contains(name), "{error}");
        assert!(error.len() < 400, "no escaped bytes: {error}");
    }
}

#[tokio::test]
async fn a_creative_over_the_limit_is_refused_before_any_insert() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let html = format!(
        "<html><body><p>{}</p><a href=\"https://example.com/a\">a</a></body></html>",
        "x".repeat(2_000)
    );
    std::fs::write(dir.path().join("letter.html"), &html).unwrap();
    std::fs::write(
        dir.path().join("mailing.json"),
        r#"{"mailing_id":"big","subject":"Hi","from":"n@example.com","html_file":"letter.html"}"#,
    )
    .unwrap();
    let recipients = dir.path().join("r.csv");
    std::fs::write(&recipients, "email\na@example.com\n").unwrap();
    let mut opts = options(dir.path(), recipients);
    opts.max_letter_bytes = 1_000;
    let error = builder::run(&db.pool, &opts).await.unwrap_err().to_string();
    assert!(
        error.contains("letter.html")
            && error.contains(&format!("{} bytes", html.len()))
            && error.contains("limit of 1000")
            && error.contains("--max-letter-bytes"),
        "{error}"
    );
    let saved: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM mailings")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(saved, 0, "refused before any insert");
    // Raised, the same mailing builds.
    opts.max_letter_bytes = 10_000;
    let summary = builder::run(&db.pool, &opts).await.unwrap();
    assert_eq!(summary.letters_built, 1, "{summary}");
}

/// A creative of 9 MB: bound twice in one statement it was 18 MB, over the
/// server's 16 MB max_allowed_packet.
#[tokio::test]
async fn a_big_but_allowed_creative_is_stored() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let html = format!(
        "<html><body><!--{}--><p><a href=\"https://example.com/a\">a</a></p></body></html>",
        "x".repeat(9 << 20)
    );
    std::fs::write(dir.path().join("letter.html"), &html).unwrap();
    std::fs::write(
        dir.path().join("mailing.json"),
        r#"{"mailing_id":"big","subject":"Hi","from":"n@example.com","html_file":"letter.html","personalize":false}"#,
    )
    .unwrap();
    let recipients = dir.path().join("r.csv");
    std::fs::write(&recipients, "email\na@example.com\n").unwrap();
    let mut opts = options(dir.path(), recipients);
    opts.max_letter_bytes = 12 << 20;
    let summary = builder::run(&db.pool, &opts).await.unwrap();
    assert_eq!(summary.letters_built, 1, "{summary}");
    let stored: i64 =
        sqlx::query_scalar("SELECT LENGTH(html) FROM mailings WHERE mailing_id = 'big'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(stored as usize, html.len());
}

/// Every other bad file of the issue: read = built + suppressed + rejected.
#[tokio::test]
async fn every_bad_file_adds_up() {
    let db = TestDb::new().await;
    linktrack::store::suppressions::add(&db.pool, &["blocked@example.com".into()], "test")
        .await
        .unwrap();
    let files: [(&str, &[u8], u64); 7] = [
        ("ragged.csv", b"email,first_name\na@example.com,A\nb@example.com\nc@example.com,C,extra\n", 3),
        ("dupes.csv", b"email,first_name\na@example.com,A\nA@EXAMPLE.COM,A\nblocked@example.com,B\n", 3),
        ("bom.csv", b"\xef\xbb\xbfemail,first_name\r\na@example.com,A\r\n", 1),
        ("nul.csv", b"email,first_name\na@example.com,A\x00B\nb@example.com,B\n", 2),
        ("latin1.csv", b"email,first_name\na@example.com,Zo\xeb\nb@example.com,B\n", 2),
        ("quote.csv", b"email,first_name\na@example.com,\"A\"x\nb@example.com,O\"Brien\n", 2),
        ("bad.jsonl", b"{\"email\":\"a@example.com\",\"first_name\":\"A\"}\n{oops\n[1]\n\n{\"first_name\":\"x\"}\n", 4),
    ];
    for (name, contents, rows) in files {
        let dir = tempfile::tempdir().unwrap();
        let summary = build_file(&db, dir.path(), name, contents)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_conserved(dir.path(), &summary);
        assert_eq!(summary.rows_read, rows, "{name}: {summary}");
    }
}

/// Random damage to a good file: quotes, CR, LF, NUL, BOM, delimiters.
#[derive(Debug, Clone)]
enum Damage {
    Insert(usize, &'static [u8]),
    Delete(usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    let bytes: &[&'static [u8]] = &[
        b"\"",
        b"\r",
        b"\n",
        b"\r\n",
        b"\0",
        b"\xef\xbb\xbf",
        b",",
        b",,",
        b"\"\"",
        b"\xff",
    ];
    prop_oneof![
        (any::<usize>(), proptest::sample::select(bytes.to_vec()))
            .prop_map(|(at, b)| Damage::Insert(at, b)),
        any::<usize>().prop_map(Damage::Delete),
    ]
}

fn damaged(rows: usize, damages: &[Damage]) -> Vec<u8> {
    let mut text = b"email,first_name,name\n".to_vec();
    for i in 0..rows {
        text.extend(format!("row{i}@example.com,F{i},N{i}\n").bytes());
    }
    let header_len = "email,first_name,name\n".len();
    for d in damages {
        let body = text.len() - header_len;
        match d {
            Damage::Insert(at, bytes) => {
                let at = header_len + at % (body + 1);
                text.splice(at..at, bytes.iter().copied());
            }
            // A deleted line end would merge two rows into one, which is
            // then one row of the file (its fields are its own): not damage
            // a reader could tell from data.
            Damage::Delete(at) if body > 0 && text[header_len + at % body] != b'\n' => {
                text.remove(header_len + at % body);
            }
            Damage::Delete(_) => {}
        }
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever the damage: the file is refused with nothing built, or
    /// every row adds up and no letter carries another row's address.
    #[test]
    fn damaged_csv_is_conserved_and_never_leaks(
        rows in 1usize..12,
        damages in proptest::collection::vec(damage(), 1..6),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let db = TestDb::new().await;
            let dir = tempfile::tempdir().unwrap();
            let contents = damaged(rows, &damages);
            let result = build_file(&db, dir.path(), "damaged.csv", &contents).await;
            let summary = match result {
                Ok(summary) => summary,
                Err(BuildError::Recipients { .. }) => {
                    assert_refused(&db, dir.path(), result).await;
                    return;
                }
                Err(e) => panic!("{e}"),
            };
            assert_conserved(dir.path(), &summary);
            for letter in letters(dir.path()) {
                let own = letter["email"].as_str().unwrap().to_lowercase();
                // The letter's own address taken out first: damage can make
                // another row's address part of it (`row0@example.comF0`).
                let whole = letter.to_string().to_lowercase().replace(&own, "");
                for i in 0..rows {
                    let other = format!("row{i}@example.com");
                    if other != own {
                        assert!(!whole.contains(&other), "{own}'s letter carries {other}: {contents:?}");
                    }
                }
            }
        });
    }
}
