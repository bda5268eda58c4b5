//! Token version 2 over real sockets (docs/token.md): every route serves
//! only its own kind of token, refusing any other before a database read
//! and recording nothing (issue 29), and a token whose row is gone still
//! answers from its link template (issue 27).

use crate::common::{add_link, client, db, quick, server_pool, TestServer};
use crate::common::{days_ago, seal_of, TestDb};
use chrono::Utc;
use linktrack::kind::TokenKind;
use linktrack::store::link_templates::{self, TemplateKey};
use linktrack::store::links::LinkKind;
use linktrack::store::rollup;
use linktrack::store::stats::{self, LateCounts, LateSummary};
use linktrack::token::{Plaintext, Token, TokenSeal};
use reqwest::{header, Method, StatusCode};
use sqlx::MySqlPool;

/// A route of the token contract, with the kind of token it serves.
struct Route {
    method: Method,
    path: fn(&Token) -> String,
    serves: LinkKind,
}

fn routes() -> Vec<Route> {
    vec![
        Route {
            method: Method::GET,
            path: |t| format!("/c/{t}"),
            serves: LinkKind::Click,
        },
        Route {
            method: Method::GET,
            path: |t| format!("/o/{t}.gif"),
            serves: LinkKind::Pixel,
        },
        Route {
            method: Method::GET,
            path: |t| format!("/i/{t}"),
            serves: LinkKind::Image,
        },
        Route {
            method: Method::GET,
            path: |t| format!("/u/{t}"),
            serves: LinkKind::Unsubscribe,
        },
        Route {
            method: Method::POST,
            path: |t| format!("/u/{t}"),
            serves: LinkKind::Unsubscribe,
        },
        Route {
            method: Method::GET,
            path: |t| format!("/t/{t}"),
            serves: LinkKind::OptOut,
        },
        Route {
            method: Method::POST,
            path: |t| format!("/t/{t}"),
            serves: LinkKind::OptOut,
        },
    ]
}

/// A token sealing `kind` (any 3-bit code, issued or not).
fn token_of_code(seal: &TokenSeal, code: u8, template: u32) -> Token {
    let plain = Plaintext {
        kind: code,
        template,
        nonce: 7 << 19,
    };
    seal.seal(Utc::now() - chrono::Duration::hours(1), plain)
}

/// An event's kind, mailing, position, letter, address and link.
type LateEvent = (
    String,
    String,
    Option<u32>,
    Option<u64>,
    Option<String>,
    Option<u64>,
);

async fn count(pool: &MySqlPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn every_route_refuses_every_other_kind_and_records_nothing() {
    let db = db().await;
    let dir = tempfile::tempdir().unwrap();
    let seal = seal_of(&db.pool).await;
    // A stored row for each link kind: a wrong kind is refused even though
    // its row exists (and names the same letter as the right one).
    let mut stored = Vec::new();
    for kind in LinkKind::ALL {
        stored.push((
            kind,
            add_link(&db.pool, kind, "http://127.0.0.1:9/x", 1).await,
        ));
    }
    // Codes no route serves: 0 (never issued) and 7 (bounce, only ever in a
    // VERP address).
    let unrouted: Vec<(u8, Token)> = [0u8, 7]
        .into_iter()
        .map(|code| (code, token_of_code(&seal, code, 0)))
        .collect();
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();
    let mut tried = 0;
    for route in routes() {
        let wrong = stored
            .iter()
            .filter(|(kind, _)| *kind != route.serves)
            // `/c/` serves honeypot links (kind 6): not a wrong kind there.
            .filter(|(kind, _)| !(route.serves == LinkKind::Click && *kind == LinkKind::Honeypot))
            .map(|(kind, token)| (TokenKind::from(*kind).code(), *token))
            .chain(unrouted.iter().copied());
        for (code, token) in wrong {
            let path = (route.path)(&token);
            let response = http
                .request(route.method.clone(), server.url(&path))
                .body("List-Unsubscribe=One-Click")
                .send()
                .await
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::NOT_FOUND,
                "{} {path} with a kind-{code} token",
                route.method
            );
            tried += 1;
        }
    }
    // 7 routes × (5 other stored kinds + 2 codes no route serves), but for
    // the honeypot row on `/c/`.
    assert_eq!(tried, 7 * 7 - 1, "every route × every wrong kind");
    server.stop().await;
    // The stop replays the whole journal: nothing was journaled.
    assert_eq!(count(&db.pool, "SELECT COUNT(*) FROM events").await, 0);
    assert_eq!(
        count(&db.pool, "SELECT COUNT(*) FROM suppressions").await,
        0
    );

    // The right kinds are served (so the 404s above were the kind check).
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();
    for (kind, token) in &stored {
        let serves = match kind {
            LinkKind::Honeypot => LinkKind::Click,
            kind => *kind,
        };
        let route = routes().into_iter().find(|r| r.serves == serves).unwrap();
        let response = http
            .request(route.method.clone(), server.url(&(route.path)(token)))
            .send()
            .await
            .unwrap();
        // The image's upstream (port 9) refuses: 502, past the kind check.
        assert_ne!(response.status(), StatusCode::NOT_FOUND, "{kind} token");
    }
    server.stop().await;
}

/// A template of mailing "m-old" and a token sealed with it, made
/// `days` ago: past retention, its row is long gone.
async fn late_token(pool: &MySqlPool, kind: LinkKind, url: &str, days: u64) -> Token {
    let seal = seal_of(pool).await;
    let key = TemplateKey {
        kind,
        position: if kind == LinkKind::Click { 3 } else { 0 },
        url: url.to_owned(),
    };
    let made_on = days_ago(days);
    let ids = link_templates::intern(
        pool,
        &crate::common::mailing_id("m-old"),
        std::slice::from_ref(&key),
        made_on,
    )
    .await
    .unwrap();
    let made_at = made_on.and_hms_opt(12, 0, 0).unwrap().and_utc();
    seal.seal(made_at, Plaintext::issue(kind.into(), ids[&key], 42))
}

#[tokio::test]
async fn an_expired_letter_still_leads_where_it_did_and_names_nobody() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    sqlx::query(
        "INSERT INTO mailings (mailing_id, subject, html, list_manage_url) \
         VALUES ('m-old', 's', '<p>', 'mailto:lists@example.com')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // One regular click of the mailing's position 3 (letter 7), rolled up
    // before the late ones arrive.
    sqlx::query(
        "INSERT INTO events (inserted, event_id, occurred_at, kind, uuid, link_id, mailing_id, \
           letter_id, email, position, bot) \
         VALUES (UTC_DATE(), UNHEX(REPLACE(UUID(), '-', '')), UTC_TIMESTAMP(3), 'click', \
           UNHEX(REPLACE(UUID(), '-', '')), 5, 'm-old', 7, 'a@example.com', 3, 0)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    rollup::rollup(&db.pool, 1000).await.unwrap();
    let before = stats::summary(&db.pool, &crate::common::mailing_id("m-old"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(before.clicks.human.total, 1);
    assert_eq!(before.late, LateSummary::default());
    let click = late_token(&db.pool, LinkKind::Click, "https://example.com/spring", 200).await;
    let pixel = late_token(&db.pool, LinkKind::Pixel, "", 200).await;
    let unsubscribe = late_token(&db.pool, LinkKind::Unsubscribe, "", 200).await;
    // Tokens sealed with a template id nobody made: unknown, as before
    // (404 for a current one, 410 for one past retention).
    let seal = seal_of(&db.pool).await;
    let made_up = |at| seal.seal(at, Plaintext::issue(TokenKind::Click, 987_654, 1));
    let forged = made_up(Utc::now() - chrono::Duration::hours(1));
    let forged_old = made_up(days_ago(200).and_hms_opt(12, 0, 0).unwrap().and_utc());
    // A template of another kind: the click route does not follow it.
    let pixel_as_click = Token::parse(&pixel.to_string()).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(server_pool(&db).await, dir.path(), quick).await;
    let http = client();
    for _ in 0..2 {
        let response = http
            .get(server.url(&format!("/c/{click}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::FOUND);
        assert_eq!(
            response.headers()[header::LOCATION],
            "https://example.com/spring"
        );
    }
    let response = http
        .get(server.url(&format!("/o/{pixel}.gif")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::CONTENT_TYPE], "image/gif");
    for method in [Method::GET, Method::POST] {
        let response = http
            .request(method.clone(), server.url(&format!("/u/{unsubscribe}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{method}");
        let page = response.text().await.unwrap();
        assert!(page.contains("expired"), "{page}");
        assert!(page.contains("href=\"mailto:lists@example.com\""), "{page}");
    }
    let response = http
        .get(server.url(&format!("/c/{forged}")))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::NOT_FOUND,
        "a made-up template"
    );
    let response = http
        .get(server.url(&format!("/c/{forged_old}")))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::GONE,
        "no template: as before"
    );
    let response = http
        .get(server.url(&format!("/c/{pixel_as_click}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND, "a pixel on /c/");
    server.stop().await;

    // Two late clicks, for the mailing and position, naming nobody; the
    // pixel and the unsubscribe page recorded nothing; nobody unsubscribed.
    let late: Vec<LateEvent> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), mailing_id, position, letter_id, email, link_id FROM events \
         WHERE COALESCE(letter_id, 0) <> 7",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let expected = (
        "click".to_owned(),
        "m-old".to_owned(),
        Some(3),
        None,
        None,
        Some(0),
    );
    assert_eq!(late, vec![expected.clone(), expected]);
    assert_eq!(
        count(&db.pool, "SELECT COUNT(*) FROM suppressions").await,
        0
    );

    // The statistics keep them apart: late clicks for the mailing and
    // position, the regular figures as they were.
    rollup::rollup(&db.pool, 1000).await.unwrap();
    let after = stats::summary(&db.pool, &crate::common::mailing_id("m-old"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.clicks, before.clicks);
    assert_eq!(after.late.clicks, LateCounts { human: 2, bot: 0 });
    let link = after.links.iter().find(|l| l.position == 3).unwrap();
    assert_eq!((link.human.total, link.late.human), (1, 2));
    assert_eq!(after.hours, before.hours);
}
