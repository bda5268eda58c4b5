use crate::common::{linktrack, TestDb};
use linktrack::store::links;
use linktrack::token::Token;

#[tokio::test]
async fn the_demo_builds_the_fixtures_and_its_sample_urls_resolve() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let outcome = linktrack::demo::prepare(&db.url, "http://127.0.0.1:9", dir.path(), None)
        .await
        .unwrap();
    assert_eq!(
        (
            outcome.summary.letters_built,
            outcome.summary.suppressed,
            outcome.summary.rejected
        ),
        (6, 1, 2)
    );
    assert_eq!(outcome.sample_urls.len(), 4, "{:?}", outcome.sample_urls);
    for (label, url) in &outcome.sample_urls {
        let hex = url.rsplit('/').next().unwrap().trim_end_matches(".gif");
        let token = Token::parse(hex).unwrap();
        assert!(
            links::lookup(&db.pool, &token).await.unwrap().is_some(),
            "{label}: {url}"
        );
    }
    // Running it again is safe: same letters, nothing stored twice.
    let again = linktrack::demo::prepare(&db.url, "http://127.0.0.1:9", dir.path(), None)
        .await
        .unwrap();
    assert_eq!(
        (again.summary.letters_built, again.summary.links_stored),
        (6, 0)
    );
}

#[tokio::test]
async fn the_demo_command_prints_urls_and_exits_with_no_serve() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().expect("a UTF-8 temporary path");
    let out = linktrack(
        &db,
        &[
            "demo",
            "--no-serve",
            "--listen",
            "127.0.0.1:9",
            "--dir",
            dir_arg,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("built 6 letters"), "{stdout}");
    assert!(
        stdout.contains("a click in ann.lee@example.com's letter: http://127.0.0.1:9/c/"),
        "{stdout}"
    );
    assert!(dir.path().join("letters.jsonl").exists());
}
