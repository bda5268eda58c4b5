//! Verdicts that settle (issue 24): the rollup judges a letter's hits again
//! once their window has closed and counts only final verdicts; and the
//! labelled replay set played against a real server.

use crate::common::{days_ago, TestDb};
use crate::stats::{letters, record, Hit, MAILING};
use chrono::{NaiveDateTime, Utc};
use linktrack::events::verdicts::VerdictRules;
use linktrack::store::{rollup, stats};
use std::sync::Arc;
use std::time::Duration;

fn seconds_ago(seconds: f64) -> NaiveDateTime {
    (Utc::now() - chrono::Duration::milliseconds((seconds * 1000.0) as i64)).naive_utc()
}

fn options(settle: Duration) -> rollup::RollupOptions {
    rollup::RollupOptions {
        limit: 1_000,
        verdicts: Arc::new(VerdictRules {
            settle,
            ..VerdictRules::default()
        }),
        ..Default::default()
    }
}

/// (human, bot) click totals of the mailing, and the same counted from `events`.
async fn click_totals(db: &TestDb) -> ((u64, u64), (i64, i64)) {
    let s = stats::summary(&db.pool, MAILING).await.unwrap().unwrap();
    let naive: (i64, i64) = sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(bot = 0), 0) AS SIGNED), CAST(COALESCE(SUM(bot <> 0), 0) AS SIGNED) \
         FROM events WHERE mailing_id = ? AND kind = 'click'",
    )
    .bind(MAILING)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    ((s.clicks.human.total, s.clicks.bot.total), naive)
}

#[tokio::test]
async fn a_burst_revises_its_earlier_clicks_before_they_are_counted_and_nothing_twice() {
    // Built yesterday: hours before every click, so no click is too fast.
    let db = TestDb::with_days_since(days_ago(1)).await;
    let letters = letters(&db.pool, days_ago(1), 2).await;
    let (one, two) = (&letters[0], &letters[1]);
    let hit = |link, at, event_id| Hit {
        link,
        kind: "click",
        at,
        bot: None,
        event_id,
    };
    // A scanner walks letter 1's three links in a second; each click alone
    // looked human when it was journaled. Letter 2's click is a second old:
    // its window is still open.
    record(
        &db.pool,
        &[
            hit(&one.clicks[0], seconds_ago(120.0), 1),
            hit(&one.clicks[1], seconds_ago(119.6), 2),
            hit(&one.clicks[2], seconds_ago(119.2), 3),
            hit(&two.clicks[0], seconds_ago(1.0), 4),
        ],
    )
    .await;
    let settle = Duration::from_secs(60);
    let report = rollup::rollup_with(&db.pool, &options(settle))
        .await
        .unwrap();
    assert_eq!(report.events(), 3, "the open window waits");
    let (counted, naive) = click_totals(&db).await;
    assert_eq!(
        counted,
        (0, 3),
        "the burst, its first click too, counted as bots"
    );
    assert_eq!(
        naive,
        (1, 3),
        "the unsettled click is in events, not yet counted"
    );
    let reasons: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT bot_reason FROM events WHERE letter_id = ? ORDER BY occurred_at",
    )
    .bind(one.clicks[0].letter_id)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(reasons, vec![Some("burst".to_owned()); 3]);

    // Once the window closes, the last click is counted once, as a person's;
    // passes after that change nothing.
    for _ in 0..2 {
        rollup::rollup_with(&db.pool, &options(Duration::ZERO))
            .await
            .unwrap();
    }
    let (counted, naive) = click_totals(&db).await;
    assert_eq!(counted, (1, 3));
    assert_eq!(
        (counted.0 as i64, counted.1 as i64),
        naive,
        "every click counted once, with its final verdict"
    );
    let s = stats::summary(&db.pool, MAILING).await.unwrap().unwrap();
    assert_eq!(s.bot_reasons["click"]["burst"], 3);
}
