//! Engagement data out (issue 42), the breakdowns: real-shaped user
//! agents and recipients of every provider, and clicks from loopback
//! addresses a test country database places, the rollup's table against a
//! count over `events` and the API's answer. The recipients export is
//! `export`'s.

use crate::common::export::{
    api_server, build_mailing, get, humans_only, lenient_rollup, letter, tokens,
};
use crate::common::stats_api::TOKEN;
use crate::common::wait_for_events;
use crate::common::{days_ago, TestDb};
use linktrack::kind::LinkKind;
use linktrack::store::rollup;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Real-shaped user agents of mail clients, proxies and browsers.
const AGENTS: [&str; 8] = [
    "Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)",
    "Mozilla/5.0",
    "Microsoft Office/16.0 (Windows NT 10.0; Microsoft Outlook 16.0.17231; Pro)",
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Thunderbird/128.3.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 GmailApp/6.0.240310",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36",
];

/// (dimension, value, kind, bot) -> events, as `stats_breakdowns` keys them.
type Counts = BTreeMap<(String, String, String, bool), u64>;

/// The breakdowns by brute force: every open and click of `mailing` read
/// back, its user agent classified and its address's provider looked up
/// here, counted here.
async fn breakdowns_by_brute_force(pool: &sqlx::MySqlPool, mailing: &str) -> Counts {
    type Row = (String, i8, Option<String>, Option<String>, Option<String>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), bot, user_agent, email, country FROM events \
         WHERE mailing_id = ? AND kind IN ('open', 'click') AND COALESCE(link_id, 1) <> 0",
    )
    .bind(mailing)
    .fetch_all(pool)
    .await
    .unwrap();
    let classifier = linktrack::bots::clients::Classifier::default();
    let mut counts = Counts::new();
    for (kind, bot, agent, email, country) in rows {
        let class = classifier.classify(agent.as_deref());
        let provider = email
            .as_deref()
            .map_or("unknown", linktrack::address::mailbox_provider);
        for (dimension, value) in [
            ("client", class.client.clone()),
            ("client_type", class.client_type.as_str().to_owned()),
            ("os", class.os.clone()),
            ("device", class.device.as_str().to_owned()),
            ("provider", provider.to_owned()),
            ("country", country.unwrap_or_else(|| "unknown".to_owned())),
        ] {
            *counts
                .entry((dimension.into(), value, kind.clone(), bot != 0))
                .or_default() += 1;
        }
    }
    counts
}

async fn rolled_breakdowns(pool: &sqlx::MySqlPool, mailing: &str) -> Counts {
    let rows: Vec<(String, String, String, i8, u64)> = sqlx::query_as(
        "SELECT CAST(dimension AS CHAR), value, CAST(kind AS CHAR), bot, n \
         FROM stats_breakdowns WHERE mailing_id = ?",
    )
    .bind(mailing)
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(d, v, k, b, n)| ((d, v, k, b != 0), n))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakdowns_by_client_os_device_and_provider_agree_with_the_events() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let dir = tempfile::tempdir().unwrap();
    let people = [
        "ann@gmail.com",
        "bob@hotmail.com",
        "cy@yahoo.com",
        "dee@icloud.com",
        "eve@example.org",
        "fay@outlook.com",
        "gus@googlemail.com",
        "hal@me.com",
    ];
    let mut recipients: Vec<Value> = people.iter().map(|p| json!({ "email": p })).collect();
    recipients.push(json!({"email": "ivy@gmail.com", "linktrack_track": "anonymous"}));
    let letters = build_mailing(&db, dir.path(), "m-clients", &recipients).await;
    let other_dir = tempfile::tempdir().unwrap();
    let other = build_mailing(
        &db,
        other_dir.path(),
        "m-other",
        &[json!({"email": "zed@gmail.com"})],
    )
    .await;

    let app = api_server(&db, humans_only()).await;
    let send = |agent: &'static str, path: String| {
        let url = app.url(&path);
        async move {
            let http = reqwest::Client::builder()
                .user_agent(agent)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap();
            let status = http.get(url).send().await.unwrap().status();
            assert!(
                status.is_success() || status.is_redirection(),
                "{path}: {status}"
            );
        }
    };
    // Each person reads with one client; browsers also click.
    let mut expected_events = 0;
    for (i, person) in people.iter().enumerate() {
        let l = letter(&letters, person);
        let agent = AGENTS[i % AGENTS.len()];
        send(agent, format!("/o/{}.gif", tokens(l, LinkKind::Pixel)[0])).await;
        expected_events += 1;
        if agent.contains("Chrome") || agent.contains("Safari") || agent.contains("Thunderbird") {
            send(agent, format!("/c/{}", tokens(l, LinkKind::Click)[0])).await;
            expected_events += 1;
        }
    }
    // The anonymous reader (no address, no provider) and a scanner.
    let ivy = letter(&letters, "ivy@gmail.com");
    send(
        AGENTS[5],
        format!("/o/{}.gif", tokens(ivy, LinkKind::Pixel)[0]),
    )
    .await;
    send(
        "curl/8.5.0",
        format!("/c/{}", tokens(ivy, LinkKind::Click)[1]),
    )
    .await;
    let zed = letter(&other, "zed@gmail.com");
    send(
        AGENTS[2],
        format!("/o/{}.gif", tokens(zed, LinkKind::Pixel)[0]),
    )
    .await;
    expected_events += 3;
    let stored = wait_for_events(&db.pool, expected_events).await;
    assert_eq!(stored.len(), expected_events, "{stored:?}");
    // Two rollups: the second batch meets user agents already classified.
    let options = rollup::RollupOptions {
        limit: 7,
        ..lenient_rollup()
    };
    let report = rollup::rollup_with(&db.pool, &options).await.unwrap();
    assert!(report.batches.len() >= 2, "{report}");

    let truth = breakdowns_by_brute_force(&db.pool, "m-clients").await;
    assert_eq!(rolled_breakdowns(&db.pool, "m-clients").await, truth);
    let classes: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM user_agent_classes")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let agents: i64 = sqlx::query_scalar(
        "SELECT COUNT(DISTINCT user_agent) FROM events WHERE kind IN ('open', 'click')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(agents >= AGENTS.len() as i64, "{agents}");
    assert_eq!(classes, agents, "each user agent classified once");

    // The API: humans' counts, bots beside, most first.
    let answer = get(&app, "/api/mailings/m-clients/breakdowns", Some(TOKEN))
        .await
        .text()
        .await
        .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let share = |side: &str, dimension: &str, value: &str| -> (u64, u64) {
        answer[side][dimension]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["value"] == value)
            .map(|s| (s["n"].as_u64().unwrap(), s["bots"].as_u64().unwrap()))
            .unwrap_or_else(|| panic!("no {side}/{dimension}/{value}: {answer}"))
    };
    assert_eq!(share("opens", "client", "Outlook"), (1, 0));
    assert_eq!(share("opens", "client", "Gmail image proxy").0, 1);
    assert_eq!(
        share("opens", "client", "Apple Mail Privacy Protection"),
        (0, 1)
    );
    assert_eq!(share("opens", "client", "Thunderbird"), (1, 0));
    assert_eq!(share("opens", "client", "Gmail app"), (1, 0));
    assert_eq!(share("clicks", "client_type", "webmail").0, 3);
    assert_eq!(share("opens", "provider", "Gmail"), (2, 0));
    assert_eq!(
        share("opens", "provider", "Microsoft"),
        (1, 1),
        "Bob's prefetch, beside"
    );
    assert_eq!(share("opens", "provider", "Apple"), (2, 0));
    assert_eq!(
        share("opens", "provider", "unknown"),
        (1, 0),
        "the anonymous reader"
    );
    assert_eq!(
        share("clicks", "provider", "unknown").1,
        1,
        "the scanner, beside"
    );
    assert_eq!(share("opens", "device", "mobile"), (2, 0), "{answer}");
    // No GeoIP database: no country.
    assert_eq!(share("opens", "country", "unknown"), (8, 1), "{answer}");
    assert_eq!(answer["opens"]["country"].as_array().unwrap().len(), 1);
    let opens = answer["opens"]["client"].as_array().unwrap();
    assert!(opens
        .windows(2)
        .all(|w| w[0]["n"].as_u64() >= w[1]["n"].as_u64()));

    // Every mailing together: the other mailing's Outlook open is added.
    let overall = get(&app, "/api/breakdowns", Some(TOKEN))
        .await
        .text()
        .await
        .unwrap();
    let overall: Value = serde_json::from_str(&overall).unwrap();
    assert_eq!(overall["mailing_id"], Value::Null);
    let outlook = overall["opens"]["client"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["value"] == "Outlook")
        .unwrap();
    assert_eq!(outlook["n"], 2);
    let unknown = get(&app, "/api/mailings/nope/breakdowns", Some(TOKEN)).await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    app.stop().await;
}

/// A country database the test writes: two loopback addresses of one /24
/// in different countries (the lookup is made before the address is
/// truncated), another network in a third; 127.0.0.1 is in none.
fn loopback_countries(dir: &std::path::Path) -> std::path::PathBuf {
    let networks = [
        ("127.0.0.2".parse().unwrap(), 32, "SE"),
        ("127.0.0.3".parse().unwrap(), 32, "JP"),
        ("127.0.9.0".parse().unwrap(), 24, "BR"),
    ];
    let path = dir.join("countries.mmdb");
    std::fs::write(&path, crate::common::mmdb::country_database(&networks)).unwrap();
    path
}

/// A client whose connections come from `from` (a loopback address).
fn client_from(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(from.parse::<std::net::IpAddr>().unwrap())
        .user_agent(AGENTS[5])
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_from_loopback_addresses_are_counted_by_their_country() {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let dir = tempfile::tempdir().unwrap();
    let recipients: Vec<Value> = (0..6)
        .map(|n| json!({ "email": format!("r{n}@example.org") }))
        .collect();
    let letters = build_mailing(&db, dir.path(), "m-geo", &recipients).await;
    let geoip = linktrack::server::geoip::GeoIp::open(&loopback_countries(dir.path())).unwrap();
    assert_eq!(
        geoip.country("127.0.0.3".parse().unwrap()).as_deref(),
        Some("JP")
    );
    assert_eq!(geoip.country("127.0.0.1".parse().unwrap()), None);

    let mut settings = humans_only();
    settings.geoip = Some(std::sync::Arc::new(geoip));
    let app = api_server(&db, settings).await;
    // (reader, from, opens, clicks)
    let plan = [
        (0, "127.0.0.2", 1, 2),
        (1, "127.0.0.2", 1, 1),
        (2, "127.0.0.3", 1, 1),
        (3, "127.0.9.77", 1, 2),
        (4, "127.0.0.1", 1, 1),
        (5, "127.0.9.5", 0, 1),
    ];
    let mut expected = 0;
    for (reader, from, opens, clicks) in plan {
        let l = letter(&letters, &format!("r{reader}@example.org"));
        let http = client_from(from);
        let mut paths = Vec::new();
        paths.extend((0..opens).map(|_| format!("/o/{}.gif", tokens(l, LinkKind::Pixel)[0])));
        paths.extend((0..clicks).map(|n| format!("/c/{}", tokens(l, LinkKind::Click)[n % 2])));
        for path in paths {
            let status = http.get(app.url(&path)).send().await.unwrap().status();
            assert!(
                status.is_success() || status.is_redirection(),
                "{path}: {status}"
            );
            expected += 1;
        }
    }
    let stored = wait_for_events(&db.pool, expected).await;
    assert_eq!(stored.len(), expected);
    // Only the code is kept: the network stays truncated, one /24 for SE and JP.
    let by_network: Vec<(Option<String>, Option<String>, i64)> = sqlx::query_as(
        "SELECT ip, country, COUNT(*) FROM events GROUP BY ip, country ORDER BY ip, country",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        by_network,
        vec![
            (Some("127.0.0.0".into()), None, 2),
            (Some("127.0.0.0".into()), Some("JP".into()), 2),
            (Some("127.0.0.0".into()), Some("SE".into()), 5),
            (Some("127.0.9.0".into()), Some("BR".into()), 4),
        ]
    );

    let options = rollup::RollupOptions {
        limit: 5,
        ..lenient_rollup()
    };
    let report = rollup::rollup_with(&db.pool, &options).await.unwrap();
    assert!(report.batches.len() >= 2, "{report}");
    let truth = breakdowns_by_brute_force(&db.pool, "m-geo").await;
    assert_eq!(rolled_breakdowns(&db.pool, "m-geo").await, truth);
    // The same again with the database's own GROUP BY over `events`.
    let grouped: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), COALESCE(country, 'unknown'), COUNT(*) FROM events \
         WHERE mailing_id = 'm-geo' GROUP BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let rolled: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), value, CAST(SUM(n) AS SIGNED) FROM stats_breakdowns \
         WHERE mailing_id = 'm-geo' AND dimension = 'country' GROUP BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let as_map = |rows: Vec<(String, String, i64)>| -> BTreeMap<(String, String), i64> {
        rows.into_iter().map(|(k, v, n)| ((k, v), n)).collect()
    };
    assert_eq!(as_map(rolled), as_map(grouped));

    let answer = get(&app, "/api/mailings/m-geo/breakdowns", Some(TOKEN))
        .await
        .text()
        .await
        .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let countries = |side: &str| -> Vec<(String, u64)> {
        answer[side]["country"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["value"].as_str().unwrap().to_owned(),
                    s["n"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        countries("clicks"),
        vec![
            ("BR".to_owned(), 3),
            ("SE".to_owned(), 3),
            ("JP".to_owned(), 1),
            ("unknown".to_owned(), 1),
        ],
        "{answer}"
    );
    assert_eq!(
        countries("opens"),
        vec![
            ("SE".to_owned(), 2),
            ("BR".to_owned(), 1),
            ("JP".to_owned(), 1),
            ("unknown".to_owned(), 1),
        ],
        "{answer}"
    );
    app.stop().await;
}

#[test]
fn serve_names_a_geoip_file_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let not_mmdb = dir.path().join("countries.csv");
    std::fs::write(&not_mmdb, "127.0.0.2,SE\n").unwrap();
    for path in [not_mmdb, dir.path().join("missing.mmdb")] {
        let out = std::process::Command::new(crate::common::linktrack_binary())
            .args(["serve", "--listen", "127.0.0.1:0", "--geoip"])
            .arg(&path)
            .env("DATABASE_URL", "mysql://root@127.0.0.1:1/none")
            .env("LINKTRACK_JOURNAL", dir.path().join("journal"))
            .output()
            .unwrap();
        assert!(!out.status.success());
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("--geoip"), "{said}");
        assert!(said.contains(&path.display().to_string()), "{said}");
    }
}
