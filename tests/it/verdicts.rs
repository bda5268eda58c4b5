//! Verdicts that settle (issue 24): the rollup judges a letter's hits again
//! once their window has closed and counts only final verdicts; and the
//! labelled replay set played against a real server.

use crate::common::stats::{letters, record, Hit, MAILING};
use crate::common::{days_ago, TestDb};
use chrono::{NaiveDateTime, Utc};
use linktrack::bots::letter_judgement::VerdictRules;
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
    let s = stats::summary(&db.pool, &crate::common::mailing_id(MAILING))
        .await
        .unwrap()
        .unwrap();
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
    let s = stats::summary(&db.pool, &crate::common::mailing_id(MAILING))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.bot_reasons["click"]["burst"], 3);
}

/// One labelled hit of `fixtures/bots/replay.csv`.
#[derive(Debug, serde::Deserialize)]
struct Labelled {
    letter: u64,
    at_ms: u64,
    delivered_ms: i64,
    kind: String,
    position: u32,
    ip: String,
    user_agent: String,
    label: String,
    actor: String,
}

/// Precision and recall of `bot` over (expected, judged) pairs.
fn precision_recall(pairs: &[(bool, bool)]) -> (f64, f64) {
    let tp = pairs.iter().filter(|(e, j)| *e && *j).count() as f64;
    let fp = pairs.iter().filter(|(e, j)| !*e && *j).count() as f64;
    let fn_ = pairs.iter().filter(|(e, j)| *e && !*j).count() as f64;
    (tp / (tp + fp).max(1.0), tp / (tp + fn_).max(1.0))
}

/// The replay set played against a real server over a socket (client
/// addresses through a trusted X-Forwarded-For, user agents as recorded),
/// settled by the rollup, and scored: precision and recall of `bot` for
/// clicks (the honeypot's own clicks left out: they are bots by
/// construction) and for opens. The set has fast human readers (the open
/// and a click within 10 s of delivery, some through Gmail's proxy, some
/// while Safe Links walks the letter), stealth scanners from residential
/// ranges following only the visible links, and gateways' time-of-click
/// checks just before a person's click (issue 57). Takes about 50 s: the
/// hits are played on their own clock. Figures in docs/operate.md
/// ("Serving in one page").
#[tokio::test]
async fn bot_replay_set_precision_and_recall() {
    use linktrack::store::links::{self, LinkKind, NewLink};
    use linktrack::token::Token;
    use std::collections::HashMap;

    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/bots/replay.csv");
    let hits: Vec<Labelled> = csv::Reader::from_path(path)
        .unwrap()
        .deserialize()
        .collect::<Result<_, _>>()
        .unwrap();
    let db = TestDb::with_days_since(days_ago(1)).await;
    let made = Utc::now() - chrono::Duration::hours(7);
    let seal = crate::common::seal_of(&db.pool).await;
    let mut tokens: HashMap<(u64, &str, u32), Token> = HashMap::new();
    let mut rows = Vec::new();
    let mut letter_ids: Vec<u64> = hits.iter().map(|h| h.letter).collect();
    letter_ids.dedup();
    for &letter in &letter_ids {
        let mut add = |kind: LinkKind, name: &'static str, position: u32| {
            let token = crate::common::sealed_token(&seal, made, kind);
            tokens.insert((letter, name, position), token);
            rows.push(NewLink {
                token,
                kind,
                mailing_id: MAILING.into(),
                letter_id: letter,
                email: format!("r{letter}@example.com"),
                position,
                url: format!("https://example.com/{position}"),
                meta: None,
            });
        };
        add(LinkKind::Pixel, "open", 0);
        add(LinkKind::Honeypot, "honeypot", 0);
        for position in 1..=8 {
            add(LinkKind::Click, "click", position);
        }
    }
    links::insert(&db.pool, &rows).await.unwrap();
    let app = crate::common::TestServer::start(db.pool.clone(), |settings| {
        linktrack::server::AppSettings {
            server: linktrack::server::state::ServerSettings {
                trust_forwarded_for: true,
                ..settings.server
            },
            ..settings
        }
    })
    .await;
    let start = Utc::now() + chrono::Duration::seconds(2);
    for &letter in &letter_ids {
        let hit = hits.iter().find(|h| h.letter == letter).unwrap();
        let delivered = start + chrono::Duration::milliseconds(hit.delivered_ms);
        sqlx::query(
            "INSERT INTO deliveries (mailing_id, letter_id, status, at) VALUES (?, ?, 'delivered', ?)",
        )
        .bind(MAILING)
        .bind(letter)
        .bind(delivered.naive_utc())
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let begin = tokio::time::Instant::now() + Duration::from_secs(2);
    let mut played = tokio::task::JoinSet::new();
    for hit in &hits {
        let name = if hit.kind == "open" {
            "open"
        } else {
            hit.kind.as_str()
        };
        let token = tokens[&(hit.letter, name, hit.position)];
        let url = match hit.kind.as_str() {
            "open" => format!("{}/o/{token}.gif", app.base),
            _ => format!("{}/c/{token}", app.base),
        };
        let request = client
            .get(url)
            .header("user-agent", &hit.user_agent)
            .header("x-forwarded-for", &hit.ip);
        // The traffic's own clock: each hit is sent at its recorded moment.
        let when = begin + Duration::from_millis(hit.at_ms);
        played.spawn(async move {
            tokio::time::sleep_until(when).await;
            request.send().await.map(|r| r.status())
        });
    }
    while let Some(status) = played.join_next().await {
        assert!(status.unwrap().unwrap().as_u16() < 400);
    }
    // Every hit replayed into `events`, then settled by the rollup.
    let expected = hits.len() as i64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        if n == expected {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{n} of {expected} events"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    rollup::rollup_with(&db.pool, &options(Duration::ZERO))
        .await
        .unwrap();
    app.stop().await;

    // Events by (token, truncated address): the hit they came from.
    let events: Vec<(Vec<u8>, String, i8, Option<String>)> =
        sqlx::query_as("SELECT uuid, ip, bot, bot_reason FROM events")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    type Verdicts = Vec<(bool, Option<String>)>;
    let mut judged: HashMap<(Vec<u8>, String), Verdicts> = HashMap::new();
    for (uuid, ip, bot, reason) in events {
        judged
            .entry((uuid, ip))
            .or_default()
            .push((bot != 0, reason));
    }
    let mut clicks = Vec::new();
    let mut opens = Vec::new();
    let mut misjudged = Vec::new();
    for hit in &hits {
        let name = if hit.kind == "open" {
            "open"
        } else {
            hit.kind.as_str()
        };
        let token = tokens[&(hit.letter, name, hit.position)];
        let octets: Vec<&str> = hit.ip.split('.').take(3).collect();
        let key = (token.as_bytes().to_vec(), format!("{}.0", octets.join(".")));
        let (bot, reason) = judged.get_mut(&key).and_then(Vec::pop).unwrap();
        let expected = hit.label == "bot";
        if expected != bot {
            misjudged.push(format!(
                "{} {} {}: {reason:?}",
                hit.actor, hit.kind, hit.letter
            ));
        }
        match hit.kind.as_str() {
            "click" => clicks.push((expected, bot)),
            "open" => opens.push((expected, bot)),
            _ => {}
        }
    }
    let (click_p, click_r) = precision_recall(&clicks);
    let (open_p, open_r) = precision_recall(&opens);
    println!(
        "bot replay set: {} clicks, {} opens\n  clicks: precision {click_p:.3}, recall {click_r:.3}\n  opens:  precision {open_p:.3}, recall {open_r:.3}\n  misjudged: {misjudged:#?}",
        clicks.len(),
        opens.len()
    );
    let s = stats::summary(&db.pool, &crate::common::mailing_id(MAILING))
        .await
        .unwrap()
        .unwrap();
    println!("  reasons: {:?}", s.bot_reasons);
    // Issue 57's aim is 0.98 on all four, with margin: the floor is 0.98.
    for figure in [click_p, click_r, open_p, open_r] {
        assert!(figure >= 0.98, "below the floor: {figure}");
    }
}

/// The settle pass's read of a batch's letters' clicks (issue 45): on a
/// hot mailing it walked every click of the mailing in the window. Now one
/// range per letter on `mailing_letter`, in the window's day partitions
/// only: a window across midnight reads yesterday's and today's.
#[tokio::test]
async fn the_settle_read_takes_the_letters_index_in_the_windows_partitions() {
    let db = TestDb::with_days_since(days_ago(6)).await;
    let fixture = letters(&db.pool, days_ago(6), 60).await;
    let mut hits = Vec::new();
    for (n, letter) in fixture.iter().enumerate() {
        for day in 0..=6 {
            hits.push(Hit {
                link: &letter.clicks[0],
                kind: "click",
                at: days_ago(day).and_hms_opt(0, 0, 5).unwrap()
                    + chrono::Duration::seconds(n as i64),
                bot: None,
                event_id: (u128::from(day) << 32) | n as u128,
            });
        }
    }
    assert_eq!(record(&db.pool, &hits).await, 60 * 7);
    sqlx::query("ANALYZE TABLE events")
        .execute(&db.pool)
        .await
        .unwrap();

    let midnight = days_ago(0).and_hms_opt(0, 0, 0).unwrap();
    let (from, to) = (
        midnight - chrono::Duration::seconds(10),
        midnight + chrono::Duration::seconds(10),
    );
    let letters: Vec<u64> = (1..=20).collect();
    let sql = linktrack::store::verdicts::context_read_sql(MAILING, from, to, &letters);
    let plan: String = sqlx::query_scalar(&format!("EXPLAIN FORMAT=JSON {sql}"))
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let mut window = vec![
        linktrack::store::partitions::partition_name(days_ago(1)),
        linktrack::store::partitions::partition_name(days_ago(0)),
    ];
    window.sort();
    assert_eq!(
        crate::links::partitions_of(&plan),
        vec![window],
        "plan: {plan}"
    );
    let keys: Vec<&str> = plan
        .split("\"key\":")
        .skip(1)
        .filter_map(|rest| rest.split('"').nth(1))
        .collect();
    assert_eq!(keys, ["mailing_letter"], "plan: {plan}");

    // And the read finds exactly the clicks in the window.
    let all: Vec<u64> = (1..=60).collect();
    let counted = format!(
        "SELECT COUNT(*), COUNT(DISTINCT letter_id) FROM ({}) AS w",
        linktrack::store::verdicts::context_read_sql(MAILING, from, to, &all)
    );
    let query = sqlx::query_as::<_, (i64, i64)>(&counted);
    // Today's clicks at 00:00:05 + n s, n < 60: those with n <= 5.
    assert_eq!(query.fetch_one(&db.pool).await.unwrap(), (6, 6));
}
