use crate::common::{linktrack, TestDb};
use linktrack::store::suppressions;
use std::path::Path;

#[tokio::test]
async fn the_cli_adds_imports_lists_and_removes_normalised_addresses() {
    let db = TestDb::new().await;
    let added = linktrack(
        &db,
        &[
            "suppressions",
            "add",
            "  Ann@Example.COM ",
            "josé@example.es",
            "--reason",
            "complaint",
        ],
    );
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("blocked.txt");
    std::fs::write(
        &file,
        "# header\nann@example.com\n\njose@example.es\nnot an address\n",
    )
    .unwrap();
    let imported = linktrack(&db, &["suppressions", "import", file.to_str().unwrap()]);
    assert_eq!(
        imported.status.code(),
        Some(2),
        "a refused line fails the import"
    );
    let stderr = String::from_utf8_lossy(&imported.stderr);
    assert!(stderr.contains("blocked.txt: line 5"), "{stderr}");
    let stdout = String::from_utf8_lossy(&imported.stdout);
    assert!(
        stdout.contains("imported 2 addresses from")
            && stdout.contains("1 new, 1 already listed; 1 line refused"),
        "{stdout}"
    );

    let listed =
        String::from_utf8_lossy(&linktrack(&db, &["suppressions", "list"]).stdout).to_string();
    let emails: Vec<&str> = listed
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(
        emails,
        ["ann@example.com", "jose@example.es", "josé@example.es"],
        "jose@ and josé@ are different addresses"
    );
    assert!(listed.contains("ann@example.com\tcomplaint\t"));

    let removed = linktrack(
        &db,
        &[
            "suppressions",
            "remove",
            "ANN@example.com",
            "nobody@example.com",
        ],
    );
    assert!(String::from_utf8_lossy(&removed.stdout).contains("removed 1 (1 was not listed)"));
    let found = suppressions::suppressed_among(&db.pool, &["ann@example.com", "josé@example.es"])
        .await
        .unwrap();
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["josé@example.es"]);
}

fn listed(db: &TestDb) -> Vec<String> {
    let output = linktrack(db, &["suppressions", "list"]);
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
        .collect()
}

/// A list file saved by Excel or Notepad starts with a byte-order mark;
/// addresses copied from a web page carry zero-width or non-breaking
/// spaces. Each is the same address as without, on the list and in the
/// recipients, so none of them lets a suppressed address be mailed.
#[tokio::test]
async fn a_bom_a_zero_width_space_or_a_nbsp_never_makes_a_suppressed_address_mailable() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("excel.txt");
    std::fs::write(
        &file,
        "\u{feff}bom1@example.com\r\nZW@example.com\u{200b}\r\n\u{feff}# not a comment for the BOM's sake\r\n",
    )
    .unwrap();
    let imported = linktrack(&db, &["suppressions", "import", file.to_str().unwrap()]);
    assert!(imported.status.success(), "{imported:?}");
    let added = linktrack(
        &db,
        &[
            "suppressions",
            "add",
            "\u{feff}x@y.com",
            "nbsp@example.com\u{a0}",
        ],
    );
    assert!(added.status.success(), "{added:?}");
    assert_eq!(
        listed(&db),
        [
            "bom1@example.com",
            "nbsp@example.com",
            "x@y.com",
            "zw@example.com"
        ]
    );

    // The recipients carry the same characters the other way round.
    let recipients = dir.path().join("people.csv");
    std::fs::write(
        &recipients,
        "email,first_name\n\
         bom1@example.com,A\n\
         \u{200b}zw@example.com,B\n\
         nbsp@example.com,C\n\
         x@y.com\u{a0},D\n\
         \u{2060}keep@example.com\u{feff},E\n",
    )
    .unwrap();
    let letters = build_letters(&db, dir.path(), &recipients);
    assert_eq!(letters, ["keep@example.com"]);
}

/// Build the fixture-like mailing for `recipients` with the binary; the
/// addresses of the letters written.
fn build_letters(db: &TestDb, dir: &Path, recipients: &Path) -> Vec<String> {
    let mailing = dir.join("m.json");
    std::fs::write(
        &mailing,
        r#"{"mailing_id":"m1","subject":"Hi {{ first_name }}","from":"news@example.com","html":"<p><a href=\"https://example.com/\">x</a></p>"}"#,
    )
    .unwrap();
    let out = dir.join("letters.jsonl");
    let built = crate::common::build::build_command(&db.url)
        .arg("--mailing")
        .arg(&mailing)
        .arg("--recipients")
        .arg(recipients)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|line| {
            let letter: serde_json::Value = serde_json::from_str(line).unwrap();
            letter["email"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// What is not an address is refused by place and reason; the rest is
/// still added, and the exit status says something was refused.
#[tokio::test]
async fn add_and_import_refuse_each_non_address_by_place_and_reason_and_keep_the_rest() {
    let db = TestDb::new().await;
    let added = linktrack(
        &db,
        &[
            "suppressions",
            "add",
            "ok@example.com",
            "no-at.example.com",
            "two@at@example.com",
            "a space@example.com",
        ],
    );
    assert_eq!(added.status.code(), Some(2), "{added:?}");
    let stderr = String::from_utf8_lossy(&added.stderr);
    for expected in [
        "argument 2: \"no-at.example.com\": address has no @",
        "argument 3: \"two@at@example.com\": address has more than one @",
        "argument 4: \"a space@example.com\": address contains whitespace",
    ] {
        assert!(stderr.contains(expected), "{expected} in {stderr}");
    }
    let stdout = String::from_utf8_lossy(&added.stdout);
    assert!(
        stdout.contains("added 1 (0 already listed); 3 arguments refused"),
        "{stdout}"
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("list.txt");
    std::fs::write(
        &file,
        "ok@example.com\nnew@example.com\nnew@example.com\nbroken\nzw\u{200b}inside@example.com\n",
    )
    .unwrap();
    let imported = linktrack(&db, &["suppressions", "import", file.to_str().unwrap()]);
    assert_eq!(imported.status.code(), Some(2), "{imported:?}");
    let stderr = String::from_utf8_lossy(&imported.stderr);
    assert!(
        stderr.contains("list.txt: line 4: \"broken\": address has no @"),
        "{stderr}"
    );
    assert!(
        stderr.contains("list.txt: line 5") && stderr.contains("U+200B"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&imported.stdout);
    assert!(
        stdout.contains("imported 2 addresses")
            && stdout.contains("1 new, 1 already listed; 2 lines refused"),
        "{stdout}"
    );
    assert_eq!(listed(&db), ["new@example.com", "ok@example.com"]);

    // One refused line: the nouns are singular.
    std::fs::write(&file, "solo@example.com\nnope\n").unwrap();
    let imported = linktrack(&db, &["suppressions", "import", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&imported.stdout);
    assert!(
        stdout.contains("imported 1 address from") && stdout.contains("; 1 line refused"),
        "{stdout}"
    );
}

/// The unsubscribe handler and the journal replay suppress through the same
/// normalisation as the build looks addresses up with.
#[tokio::test]
async fn an_unsubscribe_suppresses_the_normalised_address() {
    let db = TestDb::new().await;
    linktrack::store::events::suppress_unsubscribed(&db.pool, &["\u{feff}Ann@Example.COM\u{a0}"])
        .await
        .unwrap();
    assert_eq!(listed(&db), ["ann@example.com"]);
}

/// Issue 43: a formula-like address is refused as an address, and one
/// stored before (a row of an older release) is listed neutralised, never
/// at the start of a line where a spreadsheet would run it.
#[tokio::test]
async fn formula_like_addresses_are_refused_and_listed_neutralised() {
    let db = TestDb::new().await;
    let formula = "=cmd|'/ccalc'!a0@example.com";
    let added = linktrack(
        &db,
        &[
            "suppressions",
            "add",
            formula,
            "+1@example.com",
            "ok@example.com",
        ],
    );
    assert_eq!(added.status.code(), Some(2), "{added:?}");
    let stderr = String::from_utf8_lossy(&added.stderr);
    assert!(
        stderr.contains("address starts with '=', which a spreadsheet would run as a formula"),
        "{stderr}"
    );
    assert!(stderr.contains("address starts with '+'"), "{stderr}");

    sqlx::query("INSERT INTO suppressions (email, reason) VALUES (?, '@SUM(1)')")
        .bind(formula)
        .execute(&db.pool)
        .await
        .unwrap();
    let output = linktrack(&db, &["suppressions", "list"]);
    let listed = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        listed.contains(&format!("'{formula}\t'@SUM(1)\t")),
        "{listed}"
    );
    for line in listed.lines() {
        for field in line.split('\t') {
            assert!(!field.starts_with(['=', '+', '@']), "{line}");
        }
    }
}
