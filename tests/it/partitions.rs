use crate::common::{click_link, days_ago, linktrack, today, token_on, TestDb};
use linktrack::store::links;
use linktrack::store::partitions::{self, partition_name, Policy, RunOptions};
use linktrack::store::{self, StoreError};

async fn days(db: &TestDb, table: &'static str) -> Vec<String> {
    partitions::list(&db.pool, table)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect()
}

fn rotate_policy(keep_days: u32) -> Policy {
    Policy {
        today: today(),
        ahead_days: 1,
        keep_days: Some(keep_days),
    }
}

#[tokio::test]
async fn migrate_twice_then_ensure_creates_today_through_ahead_for_both_tables() {
    let db = TestDb::new().await;
    store::migrate(&db.url)
        .await
        .expect("second migrate is a no-op");
    let policy = Policy {
        today: today(),
        ahead_days: 7,
        keep_days: None,
    };
    partitions::run(&db.pool, &policy, &RunOptions::default())
        .await
        .unwrap();
    let expected: Vec<String> = std::iter::once("p19700101".to_owned())
        .chain((0..=7).map(|n| partition_name(today() + chrono::Days::new(n))))
        .collect();
    for table in partitions::PARTITIONED_TABLES {
        assert_eq!(days(&db, table).await, expected, "{table}");
    }
    // A second ensure changes nothing.
    let reports = partitions::run(&db.pool, &policy, &RunOptions::default())
        .await
        .unwrap();
    assert!(reports.iter().all(|r| r.plan.is_empty()));
}

#[tokio::test]
async fn rotate_drops_exactly_the_expired_days_and_is_idempotent() {
    let db = TestDb::with_days_since(days_ago(12)).await;
    for n in 0..=12u64 {
        links::insert(&db.pool, &[click_link(token_on(days_ago(n)), n as u32)])
            .await
            .unwrap();
    }
    let options = RunOptions {
        max_drop: 100,
        ..RunOptions::default()
    };
    let reports = partitions::run(&db.pool, &rotate_policy(5), &options)
        .await
        .unwrap();
    let dropped: Vec<String> = reports[0]
        .plan
        .drop
        .iter()
        .map(|p| p.name.clone())
        .collect();
    let mut expected = vec!["p19700101".to_owned()];
    expected.extend((6..=12).rev().map(|n| partition_name(days_ago(n))));
    assert_eq!(dropped, expected);

    let left = days(&db, "links").await;
    assert_eq!(left.first(), Some(&partition_name(days_ago(5))));
    assert_eq!(
        left.last(),
        Some(&partition_name(today() + chrono::Days::new(1)))
    );
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 6, "rows of days 0..=5 survive");

    let again = partitions::run(&db.pool, &rotate_policy(5), &options)
        .await
        .unwrap();
    assert!(
        again.iter().all(|r| r.plan.is_empty()),
        "second run changes nothing"
    );
}

#[tokio::test]
async fn concurrent_rotations_take_turns_and_drop_once() {
    let db = TestDb::with_days_since(days_ago(10)).await;
    let options = RunOptions {
        max_drop: 100,
        ..RunOptions::default()
    };
    let policy = rotate_policy(3);
    let before = days(&db, "links").await;
    // The partition lock (GET_LOCK, named for the database) held by a third
    // connection, so the two runs cannot miss each other: both must wait.
    use sqlx::Connection;
    let mut holder = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
    let mut lock = format!("linktrack.partitions.{}", db.name);
    lock.truncate(64);
    let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
        .bind(&lock)
        .fetch_one(&mut holder)
        .await
        .unwrap();
    assert_eq!(got, Some(1));
    let runs = [(); 2].map(|()| {
        let (pool, policy, options) = (db.pool.clone(), policy, options.clone());
        tokio::spawn(async move { partitions::run(&pool, &policy, &options).await })
    });
    // Both are waiting for the lock (MariaDB's "User lock" state).
    crate::common::wait_for_sessions(&db, "STATE = 'User lock'", 2).await;
    assert_eq!(
        days(&db, "links").await,
        before,
        "nothing ran while it was held"
    );
    let released: Option<i64> = sqlx::query_scalar("SELECT RELEASE_LOCK(?)")
        .bind(&lock)
        .fetch_one(&mut holder)
        .await
        .unwrap();
    assert_eq!(released, Some(1));
    let [a, b] = runs;
    let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
    let changed = |r: &Vec<partitions::TableReport>| r.iter().any(|t| !t.plan.is_empty());
    assert!(
        changed(&a) ^ changed(&b),
        "exactly one runner altered the tables"
    );
    assert_eq!(
        days(&db, "links").await.first(),
        Some(&partition_name(days_ago(3)))
    );
}

#[tokio::test]
async fn rotate_refuses_to_drop_more_than_the_maximum_and_drops_nothing() {
    let db = TestDb::with_days_since(days_ago(10)).await;
    let before = days(&db, "links").await;
    let options = RunOptions {
        max_drop: 3,
        ..RunOptions::default()
    };
    let reports = partitions::run(&db.pool, &rotate_policy(1), &options)
        .await
        .unwrap();
    assert!(reports.iter().all(|r| r.refused.is_some()), "{reports:?}");
    let err = partitions::refusals(&reports).expect("the refusal is an error");
    assert!(matches!(err, StoreError::Refused(_)), "{err}");
    assert!(err.to_string().contains("links, events"), "{err}");
    assert!(reports[0].to_string().contains("--force"), "{}", reports[0]);
    assert_eq!(days(&db, "links").await, before);

    let forced = RunOptions {
        force: true,
        ..options
    };
    let reports = partitions::run(&db.pool, &rotate_policy(1), &forced)
        .await
        .unwrap();
    assert!(partitions::refusals(&reports).is_none());
    assert_eq!(
        days(&db, "links").await.first(),
        Some(&partition_name(days_ago(1)))
    );
}

/// A daily cron stuck on a refusal to drop must not run out of partitions:
/// the refusal fails the run (exit 1, naming --force), and the days ahead
/// are created all the same.
#[tokio::test]
async fn rotate_that_refuses_to_drop_still_creates_the_days_ahead() {
    let db = TestDb::with_days_since(days_ago(10)).await;
    let before = days(&db, "links").await;
    let output = linktrack(
        &db,
        &[
            "partitions",
            "rotate",
            "--keep-days",
            "1",
            "--max-drop",
            "3",
            "--ahead-days",
            "5",
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    assert!(
        stdout.contains("links: refused to drop 10 partitions (p19700101 .."),
        "{stdout}"
    );
    let last_day = partition_name(today() + chrono::Days::new(5));
    assert!(
        stdout.contains(&format!("links: added partition {last_day}")),
        "{stdout}"
    );
    for table in partitions::PARTITIONED_TABLES {
        let now = days(&db, table).await;
        assert_eq!(now[..before.len()], before[..], "{table}: nothing dropped");
        assert_eq!(now.last(), Some(&last_day), "{table}: days ahead created");
    }
}

#[tokio::test]
async fn dry_run_reports_the_ddl_and_changes_nothing() {
    let db = TestDb::with_days_since(days_ago(4)).await;
    let before = (days(&db, "links").await, days(&db, "events").await);
    let options = RunOptions {
        dry_run: true,
        max_drop: 100,
        ..RunOptions::default()
    };
    let policy = Policy {
        today: today(),
        ahead_days: 5,
        keep_days: Some(1),
    };
    let reports = partitions::run(&db.pool, &policy, &options).await.unwrap();
    let text: String = reports
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(text.contains("would drop partition"), "{text}");
    assert!(text.contains("would add partition"), "{text}");
    assert!(text.contains("ALTER TABLE links DROP PARTITION"), "{text}");
    assert_eq!(
        (days(&db, "links").await, days(&db, "events").await),
        before
    );
}

#[tokio::test]
async fn an_insert_for_a_day_without_a_partition_fails_clearly() {
    let db = TestDb::with_days_since(today()).await;
    let future = today() + chrono::Days::new(30);
    let err = links::insert(&db.pool, &[click_link(token_on(future), 1)])
        .await
        .unwrap_err();
    match &err {
        StoreError::NoPartition { table, date } => assert_eq!((*table, *date), ("links", future)),
        other => panic!("expected NoPartition, got {other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(&future.to_string()) && message.contains("partitions ensure"),
        "{message}"
    );
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "nothing was silently stored elsewhere");
}

#[tokio::test]
async fn the_cli_migrates_ensures_and_lists() {
    let db = TestDb::new().await;
    let run = |args: &[&str]| linktrack(&db, args);
    assert!(run(&["migrate"]).status.success());
    let ensure = run(&["partitions", "ensure", "--ahead-days", "2"]);
    assert!(ensure.status.success());
    let stdout = String::from_utf8_lossy(&ensure.stdout);
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.contains("added partition"))
            .count(),
        6,
        "{stdout}"
    );
    let list = run(&["partitions", "list"]);
    let stdout = String::from_utf8_lossy(&list.stdout);
    for table in ["links", "events"] {
        for n in 0..=2 {
            let day = today() + chrono::Days::new(n);
            let line = format!("{table}\t{}\t{day}\t", partition_name(day));
            assert!(stdout.contains(&line), "missing {line:?} in\n{stdout}");
        }
    }
    // A failure is a non-zero exit and a message on stderr.
    let refused = run(&[
        "partitions",
        "rotate",
        "--keep-days",
        "0",
        "--max-drop",
        "0",
    ]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("refused to drop"));
}

#[tokio::test]
async fn the_cli_names_an_unreachable_database() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_linktrack"))
        .args(["partitions", "list"])
        .env("DATABASE_URL", "mysql://root@127.0.0.1:1/nowhere")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("DATABASE_URL"), "{stderr}");
}
