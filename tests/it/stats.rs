//! The rollup (exactly once, set-wise uniques) and erase, on real MariaDB.
//! Also home of the small fixture the other stats tests share: a mailing of
//! a few letters with tagged links, and events inserted by hand the way the
//! tracking server writes them (`INSERT IGNORE`, one `event_id` each).

use crate::common::stats::{
    at, letters, record, record_on, traffic, FixtureLetter, Hit, LINKS, MAILING,
};
use crate::common::wait::{self, PATIENCE};
use crate::common::{days_ago, TestDb};
use chrono::NaiveDate;
use linktrack::store::erase;
use linktrack::store::links::{self};
use linktrack::store::{rollup, stats};
use sqlx::MySqlPool;
use std::time::Duration;

/// What the naive query over `events` says: (kind, bot) → (total, unique letters).
async fn naive(pool: &MySqlPool) -> Vec<(String, i8, i64, i64)> {
    sqlx::query_as(
        "SELECT CAST(kind AS CHAR), bot, COUNT(*), COUNT(DISTINCT letter_id) FROM events \
         WHERE mailing_id = ? GROUP BY kind, bot ORDER BY 1, 2",
    )
    .bind(MAILING)
    .fetch_all(pool)
    .await
    .unwrap()
}

fn as_naive(s: &stats::MailingSummary) -> Vec<(String, i8, i64, i64)> {
    let mut out = Vec::new();
    for (kind, split) in [("click", s.clicks), ("open", s.opens)] {
        for (bot, c) in [(0, split.human), (1, split.bot)] {
            if c.total > 0 {
                out.push((kind.to_owned(), bot, c.total as i64, c.unique as i64));
            }
        }
    }
    out
}

async fn watermark_total(pool: &MySqlPool) -> u64 {
    sqlx::query_scalar("SELECT CAST(COALESCE(SUM(last_id), 0) AS UNSIGNED) FROM rollup_state")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn rollup_counts_every_event_exactly_once_across_batches_and_replays() {
    let (d1, d2) = (days_ago(1), days_ago(0));
    let db = TestDb::with_days_since(d1).await;
    let letters = letters(&db.pool, d1, 3).await;
    let hits = traffic(&letters, d1, d2);
    assert_eq!(record(&db.pool, &hits[..6]).await, 6);

    // Batches of 2 split letter 1's repeated clicks across transactions, so
    // the unique counters must come from first-seen rows, not batch DISTINCTs.
    let first = rollup::rollup(&db.pool, 2).await.unwrap();
    assert_eq!(first.events(), 6);
    assert_eq!(first.batches.len(), 3);
    assert_eq!(
        rollup::rollup(&db.pool, 2).await.unwrap().events(),
        0,
        "nothing rolls twice"
    );

    // The journal is replayed (same event ids) and the rest arrives.
    assert_eq!(
        record(&db.pool, &hits).await,
        4,
        "replayed events add no rows"
    );
    assert_eq!(rollup::rollup(&db.pool, 1000).await.unwrap().events(), 4);

    let s = stats::summary(&db.pool, &crate::common::mailing_id(MAILING))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        as_naive(&s),
        naive(&db.pool).await,
        "rollups agree with COUNT(*) over events"
    );
    assert_eq!((s.opens.human.total, s.opens.human.unique), (3, 2));
    assert_eq!((s.clicks.human.total, s.clicks.human.unique), (5, 2));
    assert_eq!((s.clicks.bot.total, s.clicks.bot.unique), (1, 1));
    assert_eq!(s.letters_built, 3);
    assert_eq!(s.bot_reasons["open"]["prefetch"], 1);
    assert_eq!(s.bot_reasons["click"]["scanner"], 1);

    let link = |p: u32| s.links.iter().find(|l| l.position == p).unwrap();
    assert_eq!((link(1).human.total, link(1).human.unique), (3, 2));
    assert_eq!(link(1).url.as_deref(), Some(LINKS[0].1));
    assert_eq!((link(2).human.total, link(2).bot.total), (1, 1));
    assert_eq!(link(3).human.unique, 1);

    let hours: Vec<(u32, u64, u64)> = s
        .hours
        .iter()
        .map(|h| (chrono::Timelike::hour(&h.hour), h.opens, h.clicks))
        .collect();
    assert_eq!(
        hours,
        [(9, 1, 1), (10, 1, 3), (11, 0, 0), (8, 1, 1)],
        "hour 11 was bots only"
    );
    assert_eq!(s.hours[0].hour.date(), d1);
    assert!(s
        .hours
        .iter()
        .any(|h| h.bot_opens == 1 && h.bot_clicks == 1));
}

#[tokio::test]
async fn concurrent_rollups_count_each_event_once() {
    let (d1, d2) = (days_ago(1), days_ago(0));
    let db = TestDb::with_days_since(d1).await;
    let letters = letters(&db.pool, d1, 3).await;
    record(&db.pool, &traffic(&letters, d1, d2)).await;
    // The row lock that serialises rollups (d1's watermark row, FOR UPDATE)
    // held by a third connection, so the two runs cannot miss each other:
    // both must wait for it.
    sqlx::query("INSERT IGNORE INTO rollup_state (day, last_id) VALUES (?, 0)")
        .bind(d1)
        .execute(&db.pool)
        .await
        .unwrap();
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("SELECT last_id FROM rollup_state WHERE day = ? FOR UPDATE")
        .bind(d1)
        .fetch_one(&mut *holder)
        .await
        .unwrap();
    let runs = [(); 2].map(|()| {
        let pool = db.pool.clone();
        tokio::spawn(async move { rollup::rollup(&pool, 1).await })
    });
    // Both runs are inside their statement on d1's watermark row (the
    // INSERT IGNORE that makes sure it exists, or the FOR UPDATE), which
    // cannot finish while the row is locked: they wait. (InnoDB's
    // INNODB_TRX did not show these waits as LOCK WAIT here.)
    crate::common::wait_for_sessions(
        &db,
        "INFO LIKE 'INSERT IGNORE INTO rollup_state%' \
         OR INFO LIKE 'SELECT last_id FROM rollup_state%FOR UPDATE'",
        2,
    )
    .await;
    assert_eq!(watermark_total(&db.pool).await, 0, "nothing rolled yet");
    holder.rollback().await.unwrap();
    let [a, b] = runs;
    let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
    assert_eq!(a.events() + b.events(), 10);
    let s = stats::summary(&db.pool, &crate::common::mailing_id(MAILING))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(as_naive(&s), naive(&db.pool).await);
    let max_id: u64 = sqlx::query_scalar("SELECT MAX(id) FROM events")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    // The partition holding the newest event is rolled up to it, exactly.
    let newest_watermark: u64 =
        sqlx::query_scalar("SELECT CAST(MAX(last_id) AS UNSIGNED) FROM rollup_state")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(newest_watermark, max_id);
}

#[tokio::test]
async fn a_failed_batch_leaves_counts_and_watermark_untouched() {
    let d1 = days_ago(0);
    let db = TestDb::with_days_since(d1).await;
    let letters = letters(&db.pool, d1, 3).await;
    record(&db.pool, &traffic(&letters, d1, d1)[..3]).await;
    // Break the last statement of the batch: the whole transaction must roll back.
    sqlx::query("ALTER TABLE stats_links RENAME TO stats_links_away")
        .execute(&db.pool)
        .await
        .unwrap();
    let failed = rollup::rollup(&db.pool, 1000).await;
    // The renamed table is what failed (MySQL/MariaDB: no such table).
    assert!(
        matches!(
            &failed,
            Err(linktrack::store::StoreError::Sqlx(sqlx::Error::Database(e)))
                if e.code().as_deref() == Some("42S02")
        ),
        "{failed:?}"
    );
    let rolled: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM stats_totals")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rolled, 0, "no partial batch");
    assert_eq!(watermark_total(&db.pool).await, 0);
    sqlx::query("ALTER TABLE stats_links_away RENAME TO stats_links")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(rollup::rollup(&db.pool, 1000).await.unwrap().events(), 3);
    let s = stats::summary(&db.pool, &crate::common::mailing_id(MAILING))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(as_naive(&s), naive(&db.pool).await);
}

/// Two writers: the first takes an id and commits late, after the second
/// committed a higher id. Returns the database with both events committed
/// and the report of a rollup run in between (while the first was open).
async fn out_of_order_commit(settle: Duration) -> (TestDb, u64, u64) {
    let d1 = days_ago(0);
    let db = TestDb::with_days_since(d1).await;
    let letters = letters(&db.pool, d1, 3).await;
    let hits = traffic(&letters, d1, d1);
    let options = rollup::RollupOptions {
        limit: 1000,
        settle,
        ..Default::default()
    };
    let mut slow = db.pool.begin().await.unwrap();
    record_on(&mut slow, &hits[0]).await;
    record(&db.pool, &hits[1..2]).await;
    let during = rollup::rollup_with(&db.pool, &options)
        .await
        .unwrap()
        .events();
    slow.commit().await.unwrap();
    if !settle.is_zero() {
        // The run in between observed the partition's largest visible id;
        // it becomes safe to roll once that observation is `settle` old by
        // the database's clock (the clock the rollup reads): polled.
        let micros = u64::try_from(settle.as_micros()).unwrap();
        wait::eventually_eq(PATIENCE, "the observation settled", 1, || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT COALESCE(seen_at <= NOW(3) - INTERVAL ? MICROSECOND, 0) \
                 FROM rollup_state WHERE day = ?",
            )
            .bind(micros)
            .bind(d1)
            .fetch_one(&db.pool)
            .await
            .unwrap()
        })
        .await;
    }
    let after = rollup::rollup_with(&db.pool, &options)
        .await
        .unwrap()
        .events();
    (db, during, after)
}

#[tokio::test]
async fn without_a_settle_time_an_out_of_order_commit_is_missed() {
    // This is the single-writer assumption: documented, and shown here.
    let (db, during, after) = out_of_order_commit(Duration::ZERO).await;
    assert_eq!((during, after), (1, 0));
    let s = stats::summary(&db.pool, &crate::common::mailing_id(MAILING))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(as_naive(&s), naive(&db.pool).await);
}

#[tokio::test]
async fn a_settle_time_counts_an_out_of_order_commit() {
    let (db, during, after) = out_of_order_commit(Duration::from_millis(400)).await;
    assert_eq!(during, 0, "nothing rolls before it has settled");
    assert_eq!(after, 2);
    let s = stats::summary(&db.pool, &crate::common::mailing_id(MAILING))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(as_naive(&s), naive(&db.pool).await);
}

#[tokio::test]
async fn unknown_mailings_have_no_summary() {
    let db = TestDb::with_days_since(days_ago(0)).await;
    assert!(stats::summary(&db.pool, &crate::common::mailing_id("nope"))
        .await
        .unwrap()
        .is_none());
    stats::save_mailing(
        &db.pool,
        &crate::common::mailing_id("saved"),
        "Hello",
        "<p>hi</p>",
    )
    .await
    .unwrap();
    let s = stats::summary(&db.pool, &crate::common::mailing_id("saved"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.subject.as_deref(), Some("Hello"));
    assert_eq!(s.letters_built, 0);
}

#[tokio::test]
async fn letters_built_is_the_builders_count_once_it_keeps_one() {
    let d1 = days_ago(0);
    let db = TestDb::with_days_since(d1).await;
    letters(&db.pool, d1, 3).await;
    assert_eq!(
        stats::letters_built(&db.pool, &crate::common::mailing_id(MAILING))
            .await
            .unwrap(),
        3,
        "index fallback"
    );
    // A batch whose transaction rolls back adds nothing.
    let mut tx = db.pool.begin().await.unwrap();
    stats::add_letters_built(&mut tx, MAILING, 1000)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        stats::letters_built(&db.pool, &crate::common::mailing_id(MAILING))
            .await
            .unwrap(),
        3
    );
    for n in [2, 5] {
        let mut tx = db.pool.begin().await.unwrap();
        stats::add_letters_built(&mut tx, MAILING, n).await.unwrap();
        tx.commit().await.unwrap();
    }
    assert_eq!(
        stats::letters_built(&db.pool, &crate::common::mailing_id(MAILING))
            .await
            .unwrap(),
        7,
        "the kept count wins"
    );
}

#[tokio::test]
async fn erase_leaves_no_row_naming_the_address_and_keeps_the_suppression() {
    let (d1, d2) = (days_ago(1), days_ago(0));
    let db = TestDb::with_days_since(d1).await;
    let letters = letters(&db.pool, d1, 3).await;
    record(&db.pool, &traffic(&letters, d1, d2)).await;
    rollup::rollup(&db.pool, 1000).await.unwrap();
    let before = stats::summary(&db.pool, &crate::common::mailing_id(MAILING))
        .await
        .unwrap()
        .unwrap();
    let target = letters[0].email.clone();
    linktrack::store::suppressions::add(&db.pool, std::slice::from_ref(&target), "unsubscribed")
        .await
        .unwrap();
    // An address equal under the accent-insensitive collation but not the same.
    sqlx::query("UPDATE links SET email = 'usér1@example.com' WHERE letter_id = 3")
        .execute(&db.pool)
        .await
        .unwrap();

    let report = erase::erase(&db.pool, &target).await.unwrap();
    assert_eq!(report.links, 4, "pixel and three links of letter 1");
    assert_eq!(report.events, 5, "letter 1's events on both days");
    assert!(report.suppressed);
    assert!(report.to_string().contains("entry kept as a keyed hash"));
    // Again: nothing left to change, and it says so.
    let again = erase::erase(&db.pool, &target).await.unwrap();
    assert_eq!((again.links, again.events), (0, 0));
    assert!(again.to_string().contains("(already)"), "{again}");

    for table in ["links", "events"] {
        let n: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM {table} WHERE email = ? COLLATE utf8mb4_bin"
        ))
        .bind(&target)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(n, 0, "{table} still names the address");
    }
    let other: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM links WHERE email = 'usér1@example.com' COLLATE utf8mb4_bin",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(other, 4, "a different address is not erased");
    // The suppression outlives the readable address: no entry in clear,
    // and the address is still suppressed.
    let listed = linktrack::store::suppressions::list(&db.pool, None, 10)
        .await
        .unwrap();
    assert!(listed.is_empty(), "{listed:?}");
    let suppressed = linktrack::store::suppressions::suppressed_among(&db.pool, &[&target])
        .await
        .unwrap();
    assert!(suppressed.contains(&target), "the suppression entry stays");
    // Statistics stay: the counts were anonymous already.
    let after = stats::summary(&db.pool, &crate::common::mailing_id(MAILING))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.clicks, before.clicks);
    // And the redirect still works for the erased letter.
    let link = links::lookup(&db.pool, &letters[0].clicks[0].token)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((link.email.as_str(), link.url.as_str()), ("", LINKS[0].1));
}

#[tokio::test]
async fn the_erase_and_rollup_commands_run_from_the_command_line() {
    use clap::Parser;
    // Yesterday: the traffic is at 00:01 and 00:02 of its day, which today
    // would be in the future (or not yet settled) just after midnight.
    let d1 = days_ago(1);
    let db = TestDb::with_days_since(d1).await;
    let letters = letters(&db.pool, d1, 2).await;
    record(&db.pool, &traffic_of_two(&letters, d1)).await;
    let run = |args: &[&str]| {
        let mut argv = vec!["linktrack", "--database-url", &db.url];
        argv.extend_from_slice(args);
        linktrack::cli::run(linktrack::cli::args::Cli::try_parse_from(argv).unwrap())
    };
    run(&["stats", "rollup", "--batch", "1"]).await.unwrap();
    let s = stats::summary(&db.pool, &crate::common::mailing_id(MAILING))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((s.opens.human.total, s.clicks.human.total), (1, 1));

    // The address is normalised (trimmed, lowercased) before matching.
    run(&["erase", "--email", "  USER1@Example.com "])
        .await
        .unwrap();
    let count = |email: &'static str| {
        sqlx::query_scalar::<_, i64>(
            "SELECT (SELECT COUNT(*) FROM links WHERE email = ?) + \
                    (SELECT COUNT(*) FROM events WHERE email = ?)",
        )
        .bind(email)
        .bind(email)
        .fetch_one(&db.pool)
    };
    assert_eq!(count("user1@example.com").await.unwrap(), 0);
    assert_eq!(
        count("user2@example.com").await.unwrap(),
        4,
        "others untouched"
    );
}

/// One open and one click, both by letter 1.
fn traffic_of_two(letters: &[FixtureLetter], day: NaiveDate) -> Vec<Hit<'_>> {
    vec![
        Hit {
            link: &letters[0].pixel,
            kind: "open",
            at: at(day, 0, 1),
            bot: None,
            event_id: 100,
        },
        Hit {
            link: &letters[0].clicks[0],
            kind: "click",
            at: at(day, 0, 2),
            bot: None,
            event_id: 101,
        },
    ]
}

#[tokio::test]
async fn rollups_outlive_dropped_partitions_and_their_watermarks_go() {
    let (d1, d2) = (days_ago(1), days_ago(0));
    let db = TestDb::with_days_since(d1).await;
    let letters = letters(&db.pool, d1, 3).await;
    record(&db.pool, &traffic(&letters, d1, d2)).await;
    rollup::rollup(&db.pool, 1000).await.unwrap();
    let before = stats::summary(&db.pool, &crate::common::mailing_id(MAILING))
        .await
        .unwrap()
        .unwrap();
    let name = linktrack::store::partitions::partition_name(d1);
    sqlx::query(&format!("ALTER TABLE events DROP PARTITION {name}"))
        .execute(&db.pool)
        .await
        .unwrap();
    // The epoch partition is still first, so drop that too: d2 becomes first.
    sqlx::query("ALTER TABLE events DROP PARTITION p19700101")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(rollup::rollup(&db.pool, 1000).await.unwrap().events(), 0);
    let days: Vec<NaiveDate> = sqlx::query_scalar("SELECT day FROM rollup_state ORDER BY day")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert!(
        days.iter().all(|d| *d >= d2),
        "stale watermarks kept: {days:?}"
    );
    let after = stats::summary(&db.pool, &crate::common::mailing_id(MAILING))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.clicks, before.clicks, "counts survive the raw events");
}
