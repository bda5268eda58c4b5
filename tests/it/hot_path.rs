//! The request path at the database's limit, counted by the database
//! itself (per-user statement counts, `CountedUser`): an open reads
//! nothing, and its event still carries its link's fields after the replay;
//! concurrent clicks share their lookups.

use crate::common::{
    days_ago, seal_of, sealed_token, today, token_on, CountedUser, Statements, TestDb, TestServer,
};
use chrono::{NaiveDate, Timelike, Utc};
use linktrack::journal::segments::JournalSettings;
use linktrack::server::AppSettings;
use linktrack::store::links::{self, LinkKind, NewLink};
use linktrack::store::{self, PoolSettings};
use linktrack::token::{Token, TokenSeal};
use std::time::Duration;

/// A token made an hour ago (clicks on it are not "too fast") on `day`, or
/// at noon on an earlier day.
fn settled_token(seal: &TokenSeal, day: NaiveDate, kind: LinkKind) -> Token {
    let made = if day == today() {
        Utc::now() - chrono::Duration::hours(1)
    } else {
        day.and_hms_opt(12, 0, 0).unwrap().and_utc()
    };
    sealed_token(seal, made, kind)
}

fn link(token: Token, kind: LinkKind, n: u32) -> NewLink {
    NewLink {
        token,
        kind,
        mailing_id: format!("m-{}", n % 3),
        letter_id: u64::from(n),
        email: format!("reader{n}@example.com"),
        position: if kind == LinkKind::Pixel {
            0
        } else {
            n % 7 + 1
        },
        url: format!("https://example.com/article/{n}"),
        meta: None,
    }
}

/// The server under test on a pool of the counted user. The journal is
/// sealed only on stop, and the privacy view, link rules and live link
/// templates read at the start only, so every statement before the stop
/// is the request path's.
pub(crate) async fn counted_app(user: &CountedUser) -> TestServer {
    counted_app_sealing_after(user, Duration::from_secs(3_600)).await
}

/// [`counted_app`] with its journal sealed (and so replayed) `seal_after`
/// a segment's first event.
async fn counted_app_sealing_after(user: &CountedUser, seal_after: Duration) -> TestServer {
    let settings = PoolSettings {
        max_connections: 16,
        acquire_timeout: Duration::from_secs(5),
    };
    let pool = store::connect(&user.url, &settings).await.unwrap();
    TestServer::start(pool, |settings| AppSettings {
        journal: JournalSettings {
            seal_after,
            ..settings.journal
        },
        privacy: linktrack::privacy::PrivacySettings {
            refresh_every: Duration::from_secs(3_600),
            ..Default::default()
        },
        follow_every: Duration::from_secs(3_600),
        ..settings
    })
    .await
}

/// A browser's client that shows redirects instead of following them.
fn a_browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent("Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0")
        .build()
        .unwrap()
}

/// Rows of `links` read so far in the test's database, by anyone
/// (MariaDB's `TABLE_STATISTICS`; [`CountedUser`] turns `userstat` on).
/// Only the server under test reads `links` here.
async fn links_rows_read(db: &TestDb) -> i64 {
    let read: Option<i64> = sqlx::query_scalar(
        "SELECT CAST(SUM(ROWS_READ) AS SIGNED) FROM information_schema.TABLE_STATISTICS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'links'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    read.unwrap_or(0)
}

/// An event as stored: (kind, token, mailing, letter, email).
type StoredEvent = (String, String, Option<String>, Option<u64>, Option<String>);

/// The events `rows` should have become, one each, sorted as
/// [`stored_events`] after a sort; `reader` is the address each keeps.
fn expected_events(
    rows: &[NewLink],
    kind: &str,
    reader: impl Fn(&NewLink) -> Option<String>,
) -> Vec<StoredEvent> {
    let mut expected: Vec<StoredEvent> = rows
        .iter()
        .map(|r| {
            (
                kind.to_owned(),
                r.token.to_string(),
                Some(r.mailing_id.clone()),
                Some(r.letter_id),
                reader(r),
            )
        })
        .collect();
    expected.sort();
    expected
}

/// Events as stored: (kind, token, mailing, letter, email).
async fn stored_events(db: &TestDb) -> Vec<StoredEvent> {
    sqlx::query_as(
        "SELECT CAST(kind AS CHAR), LOWER(HEX(uuid)), mailing_id, letter_id, email FROM events",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opens_read_nothing_on_the_request_path_and_their_events_carry_the_link() {
    let db = TestDb::with_days_since(days_ago(3)).await;
    let seal = seal_of(&db.pool).await;
    let rows: Vec<NewLink> = (0..500u32)
        .map(|n| {
            link(
                settled_token(&seal, days_ago(u64::from(n % 4)), LinkKind::Pixel),
                LinkKind::Pixel,
                n,
            )
        })
        .collect();
    links::insert(&db.pool, &rows).await.unwrap();
    let user = CountedUser::new(&db).await;
    let app = counted_app(&user).await;
    let before = user.settled_statements().await;

    let http = reqwest::Client::new();
    let unknown = settled_token(&seal, today(), LinkKind::Pixel);
    let mut paths: Vec<String> = rows.iter().map(|r| format!("/o/{}.gif", r.token)).collect();
    paths.push(format!("/o/{unknown}.gif"));
    let mut requests = tokio::task::JoinSet::new();
    for chunk in paths.chunks(64) {
        for path in chunk {
            let (http, url) = (http.clone(), format!("{}{path}", app.base));
            requests.spawn(async move { http.get(url).send().await.unwrap().status() });
        }
        while let Some(status) = requests.join_next().await {
            assert_eq!(status.unwrap(), reqwest::StatusCode::OK);
        }
    }
    let answered = user.statements().await;
    assert_eq!(
        answered.since(before),
        Statements {
            selects: 0,
            updates: 0,
            others: 0
        },
        "501 opens answered without a statement"
    );

    app.stop().await;
    let replayed = user.statements().await.since(answered);
    assert!(
        replayed.selects >= 1,
        "the replay read the links: {replayed:?}"
    );
    assert!(
        (replayed.total() as f64) / 500.0 <= 0.12,
        "statements per open: {replayed:?}"
    );
    let mut stored = stored_events(&db).await;
    stored.sort();
    let expected = expected_events(&rows, "open", |r| Some(r.email.clone()));
    assert_eq!(
        stored, expected,
        "each open once, with its link's fields; the unknown token's dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clicks_on_distinct_tokens_share_their_lookups() {
    let db = TestDb::with_days_since(days_ago(2)).await;
    let seal = seal_of(&db.pool).await;
    let rows: Vec<NewLink> = (0..640u32)
        .map(|n| {
            link(
                settled_token(&seal, days_ago(u64::from(n % 3)), LinkKind::Click),
                LinkKind::Click,
                n,
            )
        })
        .collect();
    links::insert(&db.pool, &rows).await.unwrap();
    let user = CountedUser::new(&db).await;
    let app = counted_app(&user).await;
    let http = a_browser();
    let before = user.settled_statements().await;

    // Ten rounds of 64 concurrent clicks, each on a token not seen before.
    for round in rows.chunks(64) {
        let mut clicks = tokio::task::JoinSet::new();
        for row in round {
            let (http, url) = (http.clone(), format!("{}/c/{}", app.base, row.token));
            let expected = row.url.clone();
            clicks.spawn(async move {
                let response = http.get(url).send().await.unwrap();
                assert_eq!(response.status(), reqwest::StatusCode::FOUND);
                let location = response.headers()[reqwest::header::LOCATION]
                    .to_str()
                    .unwrap();
                assert_eq!(location, expected);
            });
        }
        while let Some(done) = clicks.join_next().await {
            done.unwrap();
        }
    }
    let clicked = user.statements().await.since(before);
    assert!(clicked.selects >= 1, "the control: lookups are counted");
    let per_click = clicked.total() as f64 / 640.0;
    assert!(
        per_click <= 0.5,
        "{per_click:.2} statements per click: {clicked:?}"
    );

    app.stop().await;
    let all = user.statements().await.since(before);
    let per_click = all.total() as f64 / 640.0;
    assert!(
        per_click <= 0.6,
        "{per_click:.2} statements per click, events included: {all:?}"
    );
    // Each click's reader came from the row its request read (handed to
    // the replay in memory), not from a second read of it.
    let replayed = all.since(clicked);
    assert_eq!(replayed.selects, 0, "the replay read links: {replayed:?}");
    let mut stored = stored_events(&db).await;
    stored.sort();
    // Letter 0 is a row every letter shares: its clicks are nobody's.
    let expected = expected_events(&rows, "click", |r| {
        Some(r.email.clone()).filter(|_| r.letter_id != 0)
    });
    let missing: Vec<_> = expected.iter().filter(|e| !stored.contains(e)).collect();
    let extra: Vec<_> = stored.iter().filter(|e| !expected.contains(e)).collect();
    assert!(
        missing.is_empty() && extra.is_empty() && stored.len() == expected.len(),
        "each click once, with its reader: missing {missing:?}, unexpected {extra:?}"
    );
}

/// A hot letter's links are clicked again and again within seconds, each
/// later click a cache hit whose cached copy has no address. The replay
/// finds the row the first click's lookup held, or the row it read
/// itself, and reads nothing for them (it used to read the row again for
/// every such click).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_links_later_clicks_cost_the_replay_no_read() {
    const CLICKS_A_LINK: u64 = 4;
    let db = TestDb::with_days_since(days_ago(1)).await;
    let seal = seal_of(&db.pool).await;
    let rows: Vec<NewLink> = (1..=32u32)
        .map(|n| {
            link(
                settled_token(&seal, today(), LinkKind::Click),
                LinkKind::Click,
                n,
            )
        })
        .collect();
    links::insert(&db.pool, &rows).await.unwrap();
    let user = CountedUser::new(&db).await;
    // Each round's clicks are replayed before the next round's.
    let app = counted_app_sealing_after(&user, Duration::from_millis(50)).await;
    let http = a_browser();
    let mut after_first_round = None;
    for round in 1..=CLICKS_A_LINK {
        let mut clicks = tokio::task::JoinSet::new();
        for row in &rows {
            let (http, url) = (http.clone(), format!("{}/c/{}", app.base, row.token));
            clicks.spawn(async move { http.get(url).send().await.unwrap().status() });
        }
        while let Some(status) = clicks.join_next().await {
            assert_eq!(status.unwrap(), reqwest::StatusCode::FOUND);
        }
        let expected = rows.len() as u64 * round;
        crate::common::wait::eventually(
            crate::common::wait::PATIENCE,
            "the round's clicks are replayed",
            || async {
                let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
                    .fetch_one(&db.pool)
                    .await
                    .unwrap();
                if stored as u64 == expected {
                    Ok(())
                } else {
                    Err(format!("{stored} of {expected} events"))
                }
            },
        )
        .await;
        if round == 1 {
            let first = links_rows_read(&db).await;
            assert!(
                first >= 1,
                "the control: the first clicks' lookups read links"
            );
            after_first_round = Some(first);
        }
    }
    // Rows of `links` read, not statements: the server's periodic work
    // (its privacy heartbeat) runs statements of its own on a slow machine.
    let later = links_rows_read(&db).await - after_first_round.unwrap();
    app.stop().await;
    assert_eq!(
        later, 0,
        "the later rounds' clicks and their replay read no link row"
    );
    let mut stored = stored_events(&db).await;
    stored.sort();
    let mut expected = Vec::new();
    for _ in 0..CLICKS_A_LINK {
        expected.extend(expected_events(&rows, "click", |r| Some(r.email.clone())));
    }
    expected.sort();
    assert_eq!(stored, expected, "every click once, with its reader");
}

/// The replay's insert writes its values into the statement: every field
/// comes back as it went in, whatever its characters, NULLs included; a
/// second insert of the same events adds nothing; a day without a
/// partition is an error naming the table, not a lost row.
#[tokio::test]
async fn replayed_events_are_stored_exactly_and_once() {
    use linktrack::event::EventRow;
    use linktrack::kind::EventKind;
    use linktrack::store::events::insert_idempotent;
    let db = TestDb::with_days_since(days_ago(1)).await;
    let now = Utc::now();
    let full = EventRow {
        event_id: *Token::at(now).as_bytes(),
        occurred_at: now,
        kind: EventKind::Click,
        token: *token_on(today()).as_bytes(),
        link_id: Some(u64::MAX),
        mailing_id: Some("m'; DROP TABLE events; -- \\ \"x\"".to_owned()),
        letter_id: Some(7),
        email: Some("zoë+ünïcode@exämple.com".to_owned()),
        position: Some(u32::MAX),
        ip: Some("2001:db8:abcd::".to_owned()),
        user_agent: Some("Mozilla/5.0 \u{1F600} \0 \\' end".to_owned()),
        country: Some("SE".to_owned()),
        bot: true,
        bot_reason: Some("ua:curl".to_owned()),
    };
    let bare = EventRow {
        event_id: *Token::at(now - chrono::Duration::days(1)).as_bytes(),
        occurred_at: now - chrono::Duration::days(1),
        kind: EventKind::Open,
        link_id: None,
        mailing_id: None,
        letter_id: None,
        email: None,
        position: None,
        ip: None,
        user_agent: None,
        country: None,
        bot: false,
        bot_reason: None,
        ..full.clone()
    };
    let rows = [full.clone(), bare.clone()];
    insert_idempotent(&db.pool, &rows).await.unwrap();
    insert_idempotent(&db.pool, &rows).await.unwrap();

    type Stored = (
        Vec<u8>,
        String,
        Option<u64>,
        Option<String>,
        Option<u64>,
        Option<String>,
        Option<u32>,
        Option<String>,
        Option<String>,
        bool,
        Option<String>,
        chrono::NaiveDateTime,
    );
    let stored: Vec<Stored> = sqlx::query_as(
        "SELECT event_id, CAST(kind AS CHAR), link_id, mailing_id, letter_id, email, position, \
         ip, user_agent, bot, NULLIF(bot_reason, ''), occurred_at FROM events ORDER BY occurred_at DESC",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let expect = |row: &EventRow| -> Stored {
        (
            row.event_id.to_vec(),
            row.kind.as_str().to_owned(),
            row.link_id,
            row.mailing_id.clone(),
            row.letter_id,
            row.email.clone(),
            row.position,
            row.ip.clone(),
            row.user_agent.clone(),
            row.bot,
            row.bot_reason.clone(),
            // DATETIME(3): milliseconds are kept.
            row.occurred_at
                .naive_utc()
                .with_nanosecond(row.occurred_at.timestamp_subsec_millis() * 1_000_000)
                .unwrap(),
        )
    };
    assert_eq!(stored, vec![expect(&full), expect(&bare)]);
    let countries: Vec<Option<String>> =
        sqlx::query_scalar("SELECT country FROM events ORDER BY occurred_at DESC")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(countries, vec![full.country.clone(), bare.country.clone()]);

    let far = EventRow {
        event_id: [9; 16],
        occurred_at: now + chrono::Duration::days(400),
        ..bare
    };
    let err = insert_idempotent(&db.pool, &[far]).await.unwrap_err();
    assert!(err.to_string().contains("events"), "{err}");
}
