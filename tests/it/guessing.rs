//! Issue 43, items 2 and 3: guessing a secret is limited everywhere one is
//! checked (API bearer token, session cookie, login form, admin token), by
//! one limiter keyed by client network, answering 429 with `Retry-After`;
//! a right secret is no use from a blocked network, another network is not
//! held back. (That a flood of other networks does not evict a block is
//! the unit test `guesses::a_flood_of_other_networks_does_not_unblock`:
//! 120,000 networks, more than a loopback test can speak from.)

use crate::common::TestServer;
use crate::common::{stats_api::SECRET, TestDb};
use linktrack::server::guesses::{GUESS_WINDOW, MAX_WRONG_GUESSES};
use reqwest::{header, StatusCode};
use std::net::IpAddr;

const TOKEN: &str = "guessing-test-token-0123456789";
const ADMIN_TOKEN: &str = "guessing-admin-token-0123456789";

async fn serve(db: &TestDb) -> TestServer {
    TestServer::start(db.pool.clone(), |settings| linktrack::server::AppSettings {
        api_token: Some(TOKEN.to_owned()),
        secret: Some(SECRET.to_owned()),
        admin_token: Some(ADMIN_TOKEN.to_owned()),
        ..settings
    })
    .await
}

/// A client speaking from `from` (any 127/8 address is this host's).
fn client_from(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(from.parse::<IpAddr>().unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn assert_retry_after(response: &reqwest::Response) {
    let wait: u64 = response.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (1..=GUESS_WINDOW.as_secs()).contains(&wait),
        "Retry-After {wait}"
    );
}

/// 10,000 bearer guesses from one network: the first ten are told 401,
/// every later one 429, and the right token then too; a neighbour in the
/// same /24 is blocked, a client of another /24 is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_api_guesses_are_refused_after_the_limit() {
    let db = TestDb::new().await;
    let app = serve(&db).await;
    // The API answers 401 to a wrong token (pages would redirect to the
    // login form), and a right one is let through (404: no such mailing).
    let url = app.url("/api/mailings/no-such-mailing/stats");
    let guesser = client_from("127.0.0.1");
    let mut statuses = Vec::with_capacity(10_000);
    for chunk in 0..100 {
        let mut batch = tokio::task::JoinSet::new();
        for n in 0..100 {
            let request = guesser
                .get(&url)
                .bearer_auth(format!("guess-{chunk}-{n}"))
                .send();
            batch.spawn(async move { request.await.unwrap().status() });
        }
        // Counted in order within a batch is not guaranteed; the totals are.
        statuses.extend(batch.join_all().await);
        if chunk == 0 {
            let unauthorized = statuses
                .iter()
                .filter(|s| **s == StatusCode::UNAUTHORIZED)
                .count();
            assert!(unauthorized as u32 <= MAX_WRONG_GUESSES, "{unauthorized}");
        }
    }
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    let let_through = statuses.len() - refused;
    println!("10,000 guesses: {let_through} answered 401, {refused} refused with 429");
    assert!(
        let_through as u32 <= MAX_WRONG_GUESSES * 2,
        "{let_through} guesses were checked"
    );
    let others: Vec<_> = statuses
        .iter()
        .filter(|s| **s != StatusCode::TOO_MANY_REQUESTS && **s != StatusCode::UNAUTHORIZED)
        .collect();
    assert!(others.is_empty(), "{others:?}");

    // The right token is no use from the blocked network (nor a neighbour).
    for from in ["127.0.0.1", "127.0.0.77"] {
        let right = client_from(from)
            .get(&url)
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(right.status(), StatusCode::TOO_MANY_REQUESTS, "{from}");
        assert_retry_after(&right);
    }
    // Another network is not held back.
    let other = client_from("127.0.9.1")
        .get(&url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(
        other.status(),
        StatusCode::NOT_FOUND,
        "let in: no such mailing"
    );
    app.stop().await;
}

/// Unknown session cookies are guesses too (each was a database read):
/// limited the same way, and counted in the same limiter as the admin
/// listener's token and the login form.
#[tokio::test]
async fn cookie_admin_and_login_guesses_share_one_limit() {
    let db = TestDb::new().await;
    let app = serve(&db).await;

    // Cookies from 127.0.1.0/24.
    let cookies = client_from("127.0.1.1");
    for n in 0..MAX_WRONG_GUESSES {
        let guess = cookies
            .get(app.url("/mailings"))
            .header(header::COOKIE, format!("lt_session={n:064x}"))
            .send()
            .await
            .unwrap();
        assert_eq!(guess.status(), StatusCode::SEE_OTHER, "guess {n}");
        let cleared = guess.headers()[header::SET_COOKIE].to_str().unwrap();
        assert!(cleared.starts_with("lt_session=; Max-Age=0"), "{cleared}");
    }
    let blocked = cookies
        .get(app.url("/mailings"))
        .header(header::COOKIE, format!("lt_session={:064x}", 99))
        .send()
        .await
        .unwrap();
    assert_eq!(blocked.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_retry_after(&blocked);

    // Admin tokens and login forms from 127.0.2.0/24: half and half.
    let mixed = client_from("127.0.2.1");
    for n in 0..MAX_WRONG_GUESSES {
        let status = if n % 2 == 0 {
            mixed
                .get(app.admin_url("/metrics"))
                .bearer_auth(format!("admin-guess-{n}"))
                .send()
                .await
                .unwrap()
                .status()
        } else {
            mixed
                .post(app.url("/login"))
                .form(&[("token", format!("login-guess-{n}"))])
                .send()
                .await
                .unwrap()
                .status()
        };
        assert_eq!(status, StatusCode::UNAUTHORIZED, "guess {n}");
    }
    let admin = mixed
        .get(app.admin_url("/metrics"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(admin.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_retry_after(&admin);
    let login = mixed
        .post(app.url("/login"))
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::TOO_MANY_REQUESTS);

    // Requests without credentials are not guesses: a third network asks
    // twenty times and still gets in with the token.
    let plain = client_from("127.0.3.1");
    for _ in 0..2 * MAX_WRONG_GUESSES {
        let status = plain
            .get(app.url("/api/mailings/x/stats"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let admin = plain
        .get(app.admin_url("/metrics"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(admin.status(), StatusCode::OK);
    let text = admin.text().await.unwrap();
    let blocked = crate::common::metric_value(&text, "linktrack_guessing_networks_blocked_total");
    assert!(blocked >= Some(2.0), "two networks blocked: {blocked:?}");
    app.stop().await;
}
