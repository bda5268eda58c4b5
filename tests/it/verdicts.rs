//! Verdicts that settle (issue 24): the rollup judges a letter's hits again
//! once their window has closed and counts only final verdicts; and the
//! labelled replay set played against a real server.

use crate::common::stats::{letters, record, Hit, MAILING};
use crate::common::wait::{eventually_eq, PATIENCE};
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
        "SELECT NULLIF(bot_reason, '') FROM events WHERE letter_id = ? ORDER BY occurred_at",
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
        // The traffic's own clock: each hit is sent at its recorded moment
        // (the pacing is the input under test, not a wait for a result).
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
    eventually_eq(
        PATIENCE,
        "every hit replayed into events",
        expected,
        || async {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM events")
                .fetch_one(&db.pool)
                .await
                .unwrap()
        },
    )
    .await;
    rollup::rollup_with(&db.pool, &options(Duration::ZERO))
        .await
        .unwrap();
    app.stop().await;

    // Events by (token, truncated address): the hit they came from.
    let events: Vec<(Vec<u8>, String, i8, Option<String>)> =
        sqlx::query_as("SELECT uuid, ip, bot, NULLIF(bot_reason, '') FROM events")
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

/// One generated hit: kind, letter, position, network, user agent,
/// first reason, milliseconds before now.
type Generated = (
    &'static str,
    u64,
    u32,
    String,
    &'static str,
    Option<&'static str>,
    i64,
);

/// Hot letters in waves: clicks and opens of a few letters, a listed
/// scanner's network, honeypot clicks, HEAD requests, Gmail's proxy and a
/// library's agent among them, so every rule has something to judge.
fn hot_letters(wave: i64, seed: &mut u64) -> Vec<Generated> {
    let mut next = |n: u64| {
        // xorshift: the same hits in both databases, every run.
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed % n
    };
    const AGENTS: [&str; 4] = [
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/120 Safari/537.36",
        "Mozilla/5.0",
        "Mozilla/5.0 (via ggpht.com GoogleImageProxy)",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1) AppleWebKit/605.1.15 Safari/605.1.15",
    ];
    const NETWORKS: [&str; 5] = [
        "86.85.99.0",
        "92.14.7.0",
        "40.107.3.0",
        "188.4.2.0",
        "66.249.84.0",
    ];
    (0..400)
        .map(|_| {
            let letter = 1 + next(6);
            let roll = next(100);
            let (kind, position, reason) = match roll {
                0..=2 => ("click", 0, Some("honeypot")),
                3..=5 => ("click", 1 + next(8) as u32, Some("head")),
                6..=59 => ("click", 1 + next(8) as u32, None),
                60..=94 => ("open", 0, None),
                _ => ("image", 0, None),
            };
            let network = NETWORKS[next(NETWORKS.len() as u64) as usize].to_owned();
            let agent = AGENTS[next(AGENTS.len() as u64) as usize];
            // Each wave spans 40 s, the next starts 30 s later: windows
            // reach across waves.
            let ago = 400_000 - wave * 30_000 - next(40_000) as i64;
            (kind, letter, position, network, agent, reason, ago)
        })
        .collect()
}

async fn insert_generated(pool: &sqlx::MySqlPool, hits: &[Generated], now: chrono::DateTime<Utc>) {
    for (n, (kind, letter, position, ip, agent, reason, ago)) in hits.iter().enumerate() {
        let at = now - chrono::Duration::milliseconds(*ago);
        sqlx::query(
            "INSERT INTO events (inserted, event_id, occurred_at, kind, uuid, link_id, mailing_id, \
               letter_id, email, position, ip, user_agent, bot, bot_reason) \
             VALUES (?, UNHEX(MD5(?)), ?, ?, UNHEX(MD5(?)), 7, ?, ?, ?, ?, ?, ?, ?, COALESCE(?, ''))",
        )
        .bind(at.date_naive())
        .bind(format!("{ago}-{n}-{letter}"))
        .bind(at.naive_utc())
        .bind(*kind)
        .bind(format!("token-{letter}-{position}"))
        .bind(MAILING)
        .bind(*letter)
        .bind(format!("r{letter}@example.com"))
        .bind(*position)
        .bind(ip)
        .bind(*agent)
        .bind(reason.is_some())
        .bind(*reason)
        .execute(pool)
        .await
        .unwrap();
    }
}

/// The settle pass with its memory of recent hits gives every event the
/// verdict it gives reading each window from the table: hot letters
/// rolled in small batches, in waves, by two processes in turn (each with
/// its own memory, so one finds the other's verdicts written meanwhile).
#[tokio::test]
async fn the_memory_of_recent_hits_judges_as_the_table_read_does() {
    let table = TestDb::with_days_since(days_ago(1)).await;
    let held = TestDb::with_days_since(days_ago(1)).await;
    let now = Utc::now();
    for db in [&table, &held] {
        sqlx::query(
            "INSERT INTO deliveries (mailing_id, letter_id, status, at) VALUES (?, 1, 'delivered', ?), (?, 2, 'delivered', ?)",
        )
        .bind(MAILING)
        .bind((now - chrono::Duration::seconds(395)).naive_utc())
        .bind(MAILING)
        .bind((now - chrono::Duration::seconds(300)).naive_utc())
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let batches = |recent_hits: linktrack::store::recent_hits::RecentHits| rollup::RollupOptions {
        limit: 37,
        recent_hits,
        ..options(Duration::ZERO)
    };
    let from_table = batches(linktrack::store::recent_hits::RecentHits::off());
    let (one, two) = (batches(Default::default()), batches(Default::default()));
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    for wave in 0..6 {
        let hits = hot_letters(wave, &mut seed);
        insert_generated(&table.pool, &hits, now).await;
        insert_generated(&held.pool, &hits, now).await;
        rollup::rollup_with(&table.pool, &from_table).await.unwrap();
        let process = if wave % 3 == 1 { &two } else { &one };
        rollup::rollup_with(&held.pool, process).await.unwrap();
    }
    let verdicts = |db: &TestDb| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, (u64, i8, Option<String>)>(
                "SELECT id, bot, NULLIF(bot_reason, '') FROM events ORDER BY id",
            )
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    let (expected, found) = (verdicts(&table).await, verdicts(&held).await);
    assert_eq!(expected.len(), 2_400);
    let settled: std::collections::HashMap<Option<String>, usize> =
        expected
            .iter()
            .fold(Default::default(), |mut n, (_, _, r)| {
                *n.entry(r.clone()).or_default() += 1;
                n
            });
    // The rules had something to do: revised verdicts of several kinds.
    for reason in ["burst", "net:microsoft_eop", "proxy:gmail"] {
        assert!(
            settled.contains_key(&Some(reason.to_owned())),
            "{settled:?}"
        );
    }
    let differing: Vec<_> = expected
        .iter()
        .zip(&found)
        .filter(|(a, b)| a != b)
        .take(10)
        .collect();
    assert!(differing.is_empty(), "{differing:?}");
    let summary = |db: &TestDb| {
        let pool = db.pool.clone();
        async move {
            stats::summary(&pool, &crate::common::mailing_id(MAILING))
                .await
                .unwrap()
                .unwrap()
        }
    };
    let (a, b) = (summary(&table).await, summary(&held).await);
    assert_eq!((a.opens, a.clicks), (b.opens, b.clicks));
}

/// An install from before the verdict reason had a fixed length: its
/// `VARCHAR … NULL` column becomes ASCII `CHAR(32) NOT NULL` (migration
/// 20261230000001), every stored reason kept and none read back as none;
/// events stored afterwards keep theirs too, and the readers' answers are
/// what they were.
#[tokio::test]
async fn an_install_from_before_the_fixed_length_reason_keeps_every_verdict() {
    use linktrack::event::EventRow;
    use linktrack::kind::EventKind;
    use linktrack::store::{event_feed, events};
    let db = TestDb::with_days_since(crate::common::today()).await;
    for sql in [
        "ALTER TABLE events MODIFY bot_reason VARCHAR(32) NULL",
        "DELETE FROM _sqlx_migrations WHERE version = 20261230000001",
    ] {
        sqlx::query(sql).execute(&db.pool).await.unwrap();
    }
    let event = |n: u8, reason: Option<&str>| EventRow {
        event_id: [n; 16],
        occurred_at: Utc::now(),
        kind: EventKind::Click,
        token: [n; 16],
        link_id: Some(u64::from(n)),
        mailing_id: Some(MAILING.into()),
        letter_id: Some(1),
        email: None,
        position: Some(u32::from(n)),
        ip: Some("192.0.2.0".into()),
        user_agent: Some("Mozilla/5.0".into()),
        country: None,
        bot: reason.is_some(),
        bot_reason: reason.map(str::to_owned),
    };
    let before = [
        event(1, None),
        event(2, Some("ua:facebookexternalhit")),
        event(3, Some("time_of_click")),
    ];
    // The old shape stored None as NULL, as the writer before did.
    for row in &before {
        sqlx::query(
            "INSERT INTO events (inserted, event_id, occurred_at, kind, uuid, bot, bot_reason) \
             VALUES (?, ?, ?, 'click', ?, ?, ?)",
        )
        .bind(row.occurred_at.date_naive())
        .bind(&row.event_id[..])
        .bind(row.occurred_at.naive_utc())
        .bind(&row.token[..])
        .bind(row.bot)
        .bind(row.bot_reason.as_deref())
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let nulls: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE bot_reason IS NULL")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(nulls, 1, "the old shape holds NULL for none");

    linktrack::store::migrate(&db.url).await.unwrap();
    let (kind, nullable, charset): (String, String, String) = sqlx::query_as(
        "SELECT CAST(DATA_TYPE AS CHAR), CAST(IS_NULLABLE AS CHAR), \
         CAST(CHARACTER_SET_NAME AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'events' AND COLUMN_NAME = 'bot_reason'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (kind.as_str(), nullable.as_str(), charset.as_str()),
        ("char", "NO", "ascii")
    );

    let after = [
        event(4, None),
        event(5, Some("walk")),
        event(6, Some("ua:é")),
    ];
    events::insert_idempotent(&db.pool, &after).await.unwrap();
    let stored: Vec<(u64, String)> = sqlx::query_as(
        "SELECT CAST(ASCII(event_id) AS UNSIGNED), bot_reason FROM events ORDER BY event_id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        stored,
        [
            (1, String::new()),
            (2, "ua:facebookexternalhit".into()),
            (3, "time_of_click".into()),
            (4, String::new()),
            (5, "walk".into()),
            (6, "ua:??".into()),
        ],
        "none is '', a reason is kept; one the column cannot hold is made ASCII"
    );
    let (last, _) = event_feed::latest_ids(&db.pool).await.unwrap();
    let ids: Vec<u64> = (1..=last).collect();
    let feed = event_feed::events_with_ids(&db.pool, &ids, crate::common::today())
        .await
        .unwrap();
    let reasons: Vec<Option<String>> = feed.iter().map(|e| e.row.bot_reason.clone()).collect();
    assert_eq!(
        reasons,
        [
            None,
            Some("ua:facebookexternalhit".into()),
            Some("time_of_click".into()),
            None,
            Some("walk".into()),
            Some("ua:??".into()),
        ],
        "readers see the reason, or none, as before"
    );
}
