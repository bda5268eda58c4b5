//! Storage formats through the real binary: `migrate --row-format`, then the
//! builder, the redirect and the daily rotation on page-compressed tables.

use crate::common::{days_ago, TestDb, TestServer};
use std::path::Path;
use std::process::{Command, Output};

fn linktrack(db: &TestDb, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_linktrack"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("LINKTRACK_BASE_URL", "http://t.example.test")
        .env("RUST_LOG", "warn")
        .output()
        .expect("running linktrack");
    assert!(
        output.status.success(),
        "linktrack {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

async fn create_options(db: &TestDb, table: &str) -> String {
    sqlx::query_scalar::<_, String>(
        "SELECT CAST(CREATE_OPTIONS AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

async fn show_create(db: &TestDb, table: &str) -> String {
    let (_, ddl): (String, String) = sqlx::query_as(&format!("SHOW CREATE TABLE {table}"))
        .fetch_one(&db.pool)
        .await
        .unwrap();
    ddl
}

/// The partitions of `table`, from the server.
async fn partition_names(db: &TestDb, table: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT PARTITION_NAME FROM information_schema.PARTITIONS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY PARTITION_ORDINAL_POSITION",
    )
    .bind(table)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn page_compressed_tables_build_redirect_and_rotate() {
    let db = TestDb::with_days_since(days_ago(6)).await;
    let migrated = linktrack(
        &db,
        &[
            "migrate",
            "--row-format",
            "page-compressed",
            "--page-compression-level",
            "6",
        ],
    );
    let said = String::from_utf8_lossy(&migrated.stdout);
    assert!(said.contains("links: now page-compressed"), "{said}");
    for table in ["links", "events"] {
        let ddl = show_create(&db, table).await;
        assert!(ddl.contains("`PAGE_COMPRESSED`='1'"), "{ddl}");
        assert!(ddl.contains("ROW_FORMAT=DYNAMIC"), "{ddl}");
    }

    // Build the fixture mailing into the page-compressed tables.
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let out = dir.path().join("letters.jsonl");
    let built = crate::common::build::build_command(&db.url)
        .arg("--mailing")
        .arg(fixtures.join("mailing.json"))
        .arg("--recipients")
        .arg(fixtures.join("recipients.csv"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    // 2: the fixtures hold recipients that are rejected on purpose.
    assert_eq!(
        built.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let (token, url): (Vec<u8>, String) =
        sqlx::query_as("SELECT uuid, url FROM links WHERE kind = 'click' ORDER BY id LIMIT 1")
            .fetch_one(&db.pool)
            .await
            .unwrap();

    // Redirect from the page-compressed table.
    let app = TestServer::start(db.pool.clone(), |settings| settings).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = client
        .get(format!("{}/c/{}", app.base, hex::encode(&token)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::FOUND);
    assert_eq!(response.headers()["location"], url.as_str());
    app.stop().await;

    // Rotate: old days go, new days come, and the new partitions are of the
    // same page-compressed table.
    let before = partition_names(&db, "links").await;
    linktrack(
        &db,
        &[
            "partitions",
            "rotate",
            "--keep-days",
            "2",
            "--ahead-days",
            "9",
        ],
    );
    let after = partition_names(&db, "links").await;
    assert!(after.first() > before.first(), "{before:?} -> {after:?}");
    assert!(after.last() > before.last(), "{before:?} -> {after:?}");
    assert!(create_options(&db, "links")
        .await
        .contains("`PAGE_COMPRESSED`='1'"));
}

#[tokio::test]
async fn a_table_with_rows_is_rebuilt_only_when_asked() {
    let db = TestDb::with_days_since(days_ago(0)).await;
    linktrack(&db, &["migrate", "--row-format", "dynamic"]);
    let link = crate::common::click_link(crate::common::token_on(crate::common::today()), 1);
    linktrack::store::links::insert(&db.pool, &[link])
        .await
        .unwrap();

    let asked = linktrack(&db, &["migrate", "--row-format", "page-compressed"]);
    let said = String::from_utf8_lossy(&asked.stdout);
    assert!(said.contains("links: holds about"), "{said}");
    assert!(said.contains("--rebuild"), "{said}");
    assert!(!create_options(&db, "links")
        .await
        .contains("`PAGE_COMPRESSED`='1'"));
    // events is empty: it switches at once.
    assert!(create_options(&db, "events")
        .await
        .contains("`PAGE_COMPRESSED`='1'"));

    let rebuilt = linktrack(
        &db,
        &["migrate", "--row-format", "page-compressed", "--rebuild"],
    );
    let said = String::from_utf8_lossy(&rebuilt.stdout);
    assert!(said.contains("links: now page-compressed"), "{said}");
    assert!(create_options(&db, "links")
        .await
        .contains("`PAGE_COMPRESSED`='1'"));
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 1, "a rebuild keeps the rows");

    // And back: compressed, then a repeat is a no-op.
    linktrack(&db, &["migrate", "--row-format", "compressed", "--rebuild"]);
    let again = linktrack(&db, &["migrate", "--row-format", "compressed"]);
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(said.contains("links: already compressed"), "{said}");
    let row_format: String = sqlx::query_scalar(
        "SELECT CAST(ROW_FORMAT AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'links'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(row_format, "Compressed");
}

#[tokio::test]
async fn migrate_gives_new_tables_the_default_page_compression() {
    let db = TestDb::new().await;
    let migrated = linktrack(&db, &["migrate"]);
    let said = String::from_utf8_lossy(&migrated.stdout);
    assert!(said.contains("links: now page-compressed"), "{said}");
    assert!(create_options(&db, "links")
        .await
        .contains("`PAGE_COMPRESSED`='1'"));
    // A second run changes nothing.
    let again = linktrack(&db, &["migrate"]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("links: already page-compressed"));
}
