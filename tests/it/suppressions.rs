use crate::common::{linktrack, TestDb};
use linktrack::store::suppressions;

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
    let refused = linktrack(&db, &["suppressions", "import", file.to_str().unwrap()]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("blocked.txt: line 5"), "{stderr}");
    assert_eq!(
        suppressions::list(&db.pool, None, 10).await.unwrap().len(),
        2,
        "a refused import changes nothing"
    );

    std::fs::write(&file, "# header\nann@example.com\n\njose@example.es\n").unwrap();
    let imported = linktrack(&db, &["suppressions", "import", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&imported.stdout);
    assert!(stdout.contains("1 new, 1 already listed"), "{stdout}");

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
    assert!(String::from_utf8_lossy(&removed.stdout).contains("removed 1 (1 were not listed)"));
    let found = suppressions::suppressed_among(&db.pool, &["ann@example.com", "josé@example.es"])
        .await
        .unwrap();
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["josé@example.es"]);
}
