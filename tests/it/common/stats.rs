//! Fixture letters and hits recorded straight into `events`: what the
//! rollup, stats API, dashboard and verdict tests share.

use crate::common::token_on;
use chrono::{NaiveDate, NaiveDateTime};
use linktrack::store::links::{self, LinkKind, NewLink, StoredLink};
use sqlx::MySqlPool;

pub const MAILING: &str = "m-2026-11";

/// Link positions of the fixture letter and their tags.
pub const LINKS: [(u32, &str, &[&str]); 3] = [
    (1, "https://example.com/ruby-web", &["ruby", "web"]),
    (2, "https://example.com/ruby", &["ruby"]),
    (3, "https://example.com/erlang", &["erlang"]),
];

/// One stored letter: its pixel and its click links by position.
pub struct FixtureLetter {
    pub email: String,
    pub pixel: StoredLink,
    pub clicks: Vec<StoredLink>,
}

/// Store `n` letters (ids 1..=n, addresses user{i}@example.com) made on `day`.
pub async fn letters(pool: &MySqlPool, day: NaiveDate, n: u64) -> Vec<FixtureLetter> {
    let mut rows = Vec::new();
    for letter_id in 1..=n {
        let email = format!("user{letter_id}@example.com");
        let row = |kind, position, url: &str, tags: &[&str]| NewLink {
            token: token_on(day),
            kind,
            mailing_id: MAILING.into(),
            letter_id,
            email: email.clone(),
            position,
            url: url.into(),
            meta: (!tags.is_empty()).then(|| serde_json::json!({ "tags": tags })),
        };
        rows.push(row(LinkKind::Pixel, 0, "", &[]));
        for (position, url, tags) in LINKS {
            rows.push(row(LinkKind::Click, position, url, tags));
        }
    }
    links::insert(pool, &rows).await.unwrap();
    let ids: Vec<u64> = (1..=n).collect();
    let stored = links::of_letters(pool, &crate::common::mailing_id(MAILING), &ids)
        .await
        .unwrap();
    ids.iter()
        .map(|&letter_id| {
            let mine: Vec<&StoredLink> =
                stored.iter().filter(|l| l.letter_id == letter_id).collect();
            let pixel = mine.iter().find(|l| l.kind == LinkKind::Pixel).unwrap();
            let mut clicks: Vec<StoredLink> = mine
                .iter()
                .filter(|l| l.kind == LinkKind::Click)
                .map(|l| (*l).clone())
                .collect();
            clicks.sort_by_key(|l| l.position);
            FixtureLetter {
                email: pixel.email.clone(),
                pixel: (*pixel).clone(),
                clicks,
            }
        })
        .collect()
}

/// A hit as the tracking server records it. `event_id` is the idempotency
/// key: the same value twice (a journal replay) must not add a row.
pub struct Hit<'a> {
    pub link: &'a StoredLink,
    pub kind: &'a str,
    pub at: NaiveDateTime,
    pub bot: Option<&'a str>,
    pub event_id: u128,
}

/// Insert hits like the server does (INSERT IGNORE); returns rows added.
pub async fn record(pool: &MySqlPool, hits: &[Hit<'_>]) -> u64 {
    let mut conn = pool.acquire().await.unwrap();
    let mut added = 0;
    for hit in hits {
        added += record_on(&mut conn, hit).await;
    }
    added
}

/// Insert one hit on a given connection (or open transaction).
pub async fn record_on(conn: &mut sqlx::MySqlConnection, hit: &Hit<'_>) -> u64 {
    sqlx::query(
        "INSERT IGNORE INTO events (inserted, event_id, occurred_at, kind, uuid, link_id, \
         mailing_id, letter_id, email, position, ip, user_agent, bot, bot_reason) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '192.0.2.0', 'Mozilla/5.0', ?, COALESCE(?, ''))",
    )
    .bind(hit.at.date())
    .bind(&hit.event_id.to_be_bytes()[..])
    .bind(hit.at)
    .bind(hit.kind)
    .bind(&hit.link.token.as_bytes()[..])
    .bind(hit.link.id)
    .bind(&hit.link.mailing_id)
    .bind(hit.link.letter_id)
    .bind(&hit.link.email)
    .bind(hit.link.position)
    .bind(hit.bot.is_some())
    .bind(hit.bot)
    .execute(conn)
    .await
    .unwrap()
    .rows_affected()
}

pub fn at(day: NaiveDate, hour: u32, minute: u32) -> NaiveDateTime {
    day.and_hms_opt(hour, minute, 0).unwrap()
}

/// The fixture's traffic, spread over two days and three hours:
/// letter 1 opens twice and clicks link 1 twice and link 2 once, letter 2
/// opens once and clicks link 1 and link 3, letter 3 opens (a bot: an
/// image-proxy prefetch) and a link scanner clicks its link 2.
pub fn traffic(letters: &[FixtureLetter], d1: NaiveDate, d2: NaiveDate) -> Vec<Hit<'_>> {
    let (l1, l2, l3) = (&letters[0], &letters[1], &letters[2]);
    let hit = |link, kind, at, bot, event_id| Hit {
        link,
        kind,
        at,
        bot,
        event_id,
    };
    vec![
        hit(&l1.pixel, "open", at(d1, 9, 0), None, 1),
        hit(&l1.clicks[0], "click", at(d1, 9, 1), None, 2),
        hit(&l1.clicks[0], "click", at(d1, 10, 5), None, 3),
        hit(&l1.clicks[1], "click", at(d1, 10, 6), None, 4),
        hit(&l2.pixel, "open", at(d1, 10, 30), None, 5),
        hit(&l2.clicks[0], "click", at(d1, 10, 31), None, 6),
        hit(&l3.pixel, "open", at(d1, 11, 0), Some("prefetch"), 7),
        hit(&l3.clicks[1], "click", at(d1, 11, 0), Some("scanner"), 8),
        hit(&l1.pixel, "open", at(d2, 8, 0), None, 9),
        hit(&l2.clicks[2], "click", at(d2, 8, 10), None, 10),
    ]
}
