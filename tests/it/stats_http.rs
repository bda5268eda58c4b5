//! The stats router over real HTTP: access rules, the JSON API, the login
//! cookie, and the dashboard rendered by a real browser (headless Chromium).

use crate::common::client_without_user_agent as client;
use crate::common::stats::{letters, record, traffic, LINKS, MAILING};
use crate::common::stats_api::{fixture_letter, rolled_db, SECRET, TOKEN};
use crate::common::{days_ago, TestDb, TestServer};
use linktrack::store::{rollup, stats};
use reqwest::header;
use reqwest::StatusCode;
use std::path::{Path, PathBuf};

/// Serve the app with these stats settings on a free port.
async fn spawn(db: &TestDb, api_token: Option<&str>, secret: Option<&str>) -> TestServer {
    TestServer::with_stats(db.pool.clone(), api_token, secret, None).await
}

/// The same mailing minutes after its send: every hit within the last
/// twenty minutes, the subject a template.
async fn just_sent_db() -> TestDb {
    let db = TestDb::with_days_since(days_ago(1)).await;
    let today = days_ago(0);
    let letters = letters(&db.pool, today, 3).await;
    let now = chrono::Utc::now().naive_utc();
    let hits: Vec<_> = traffic(&letters, today, today)
        .into_iter()
        .enumerate()
        .map(|(i, mut hit)| {
            hit.at = now - chrono::Duration::minutes(20 - 2 * i as i64);
            hit
        })
        .collect();
    record(&db.pool, &hits).await;
    rollup::rollup(&db.pool, 1000).await.unwrap();
    let html = std::fs::read_to_string(fixture_letter()).unwrap();
    stats::save_mailing(
        &db.pool,
        &crate::common::mailing_id(MAILING),
        "{{ first_name }}, this week…",
        &html,
    )
    .await
    .unwrap();
    db
}

#[tokio::test]
async fn everything_is_404_without_an_api_token() {
    let db = rolled_db().await;
    let app = spawn(&db, None, Some(SECRET)).await;
    let base = &app.base;
    for path in [
        format!("/api/mailings/{MAILING}/stats"),
        "/mailings".to_owned(),
        format!("/mailings/{MAILING}"),
        "/login".to_owned(),
    ] {
        let response = client()
            .get(format!("{base}{path}"))
            .bearer_auth("")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
    }
    app.stop().await;
}

#[tokio::test]
async fn the_api_needs_the_token_and_answers_json() {
    let db = rolled_db().await;
    let app = spawn(&db, Some(TOKEN), None).await;
    let base = &app.base;
    let url = format!("{base}/api/mailings/{MAILING}/stats");

    let anonymous = client().get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    assert!(anonymous.headers().contains_key(header::WWW_AUTHENTICATE));
    let wrong = client()
        .get(&url)
        .bearer_auth("test-token-012345678X")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    // Without a secret there is no login form: pages also answer 401.
    let page = client()
        .get(format!("{base}/mailings"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::UNAUTHORIZED);

    let response = client().get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(body["mailing_id"], MAILING);
    assert_eq!(body["subject"], "November news");
    assert_eq!(body["letters_built"], 3);
    assert_eq!(
        body["opens"]["human"],
        serde_json::json!({"total": 3, "unique": 2})
    );
    assert_eq!(
        body["clicks"]["human"],
        serde_json::json!({"total": 5, "unique": 2})
    );
    assert_eq!(body["clicks"]["bot"]["total"], 1);
    assert_eq!(body["bot_reasons"]["click"]["scanner"], 1);
    assert_eq!(body["links"][0]["url"], LINKS[0].1);
    assert_eq!(body["links"][0]["human"]["unique"], 2);
    assert_eq!(body["hours"].as_array().unwrap().len(), 4);
    assert!(body["live"].is_null());

    let unknown = client()
        .get(format!("{base}/api/mailings/nope/stats"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let error: serde_json::Value = serde_json::from_str(&unknown.text().await.unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "not_found", "{error}");
    assert!(
        error["error"]["message"].as_str().unwrap().contains("nope"),
        "{error}"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_login_form_sets_a_strict_httponly_session_cookie() {
    let db = rolled_db().await;
    let app = spawn(&db, Some(TOKEN), Some(SECRET)).await;
    let base = &app.base;
    let page = client()
        .get(format!("{base}/mailings"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::SEE_OTHER);
    assert_eq!(page.headers()[header::LOCATION], "/login");

    let login = |token: &'static str| {
        client()
            .post(format!("{base}/login"))
            .form(&[("token", token)])
            .send()
    };
    // A browser with a wrong token gets the form again, saying why.
    let wrong = login("wrong").await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let wrong = wrong.text().await.unwrap();
    assert!(
        wrong.contains("That token is not right") && wrong.contains("<form method=\"post\""),
        "{wrong}"
    );
    let ok = login(TOKEN).await.unwrap();
    assert_eq!(ok.status(), StatusCode::SEE_OTHER);
    let cookie = ok.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "http base URL: {cookie}");
    assert!(
        !cookie.contains(TOKEN),
        "the cookie must not carry the token itself"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();

    let index = client()
        .get(format!("{base}/mailings"))
        .header(header::COOKIE, &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(index.status(), StatusCode::OK);
    assert_eq!(index.headers()[header::CACHE_CONTROL], "no-store");
    assert_eq!(index.headers()[header::REFERRER_POLICY], "no-referrer");
    let html = index.text().await.unwrap();
    assert!(html.contains(&format!("/mailings/{MAILING}")), "{html}");
    assert!(html.contains("November news"));
    // A tampered cookie is refused.
    let tampered = format!("{}0", pair);
    let refused = client()
        .get(format!("{base}/mailings"))
        .header(header::COOKIE, tampered)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::SEE_OTHER);
}

/// Chromium's binary, if installed.
/// The mailing's dashboard page as its operator fetches it (API token).
async fn mailing_page(app: &TestServer) -> String {
    client()
        .get(format!("{}/mailings/{MAILING}", app.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Chromium on the PATH; a test that needs it fails without it (scripts/test
/// and scripts/prepare.d install it).
pub(crate) fn browser() -> PathBuf {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|p| p.join(name))
                    .find(|p| p.is_file())
            })
        })
        .unwrap_or_else(|| {
            panic!(
                "chromium is not installed: apt-get install -y chromium (scripts/test does this)"
            )
        })
}

/// `html` saved as `DIR/STEM.html` under the tests' target directory (kept
/// for a look after the run): its `file:` URL, and the path its screenshot
/// goes to (an earlier run's removed, so a stale one cannot pass).
pub(crate) fn saved_page(dir: &str, stem: &str, html: &str) -> (String, PathBuf) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join(format!("{stem}.html"));
    std::fs::write(&page, html).unwrap();
    let png = dir.join(format!("{stem}.png"));
    let _ = std::fs::remove_file(&png);
    (format!("file://{}", page.display()), png)
}

pub(crate) fn run_chromium(binary: &Path, args: &[String]) -> std::process::Output {
    run_chromium_with(binary, args, &[])
}

/// [`run_chromium`] with these environment variables (`TZ`, `LANG`).
fn run_chromium_with(binary: &Path, args: &[String], env: &[(&str, &str)]) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(binary);
    command.envs(env.iter().copied());
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        "--window-size=1280,1600",
    ]);
    command.arg(format!("--user-data-dir={}", profile.path().display()));
    command.args(args);
    command.output().unwrap()
}

/// The dashboard as a browser shows it. Chromium cannot send our bearer
/// header from the command line, so the test fetches the page with the
/// token and has Chromium render the saved copy from a file: URL; the page
/// is self-contained (inline CSS and SVG, click map in `srcdoc`), so that is
/// exactly what a signed-in browser shows.
#[tokio::test]
async fn the_dashboard_renders_in_a_real_browser_with_click_badges() {
    let browser = browser();
    let db = rolled_db().await;
    let app = spawn(&db, Some(TOKEN), None).await;
    let html = mailing_page(&app).await;
    assert!(html.contains("<svg"), "the chart is inline SVG");
    assert!(
        html.contains(r#"sandbox="allow-same-origin""#) && !html.contains("allow-scripts"),
        "the click map is sandboxed: nothing in the letter runs"
    );

    let (url, png) = saved_page("stats-dashboard", "dashboard", &html);

    let shot = run_chromium(
        &browser,
        &[format!("--screenshot={}", png.display()), url.clone()],
    );
    assert!(
        png.is_file(),
        "no screenshot: {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    // A blank 1280×1600 page compresses to a few KB; text, chart and the
    // click map make it far larger.
    assert!(
        bytes.len() > 30_000,
        "suspiciously small screenshot: {} bytes",
        bytes.len()
    );

    let dom = run_chromium(&browser, &["--dump-dom".to_owned(), url]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("<polyline"), "chart missing from the DOM");
    // The badges live in the iframe's srcdoc, escaped once for the attribute.
    assert!(dom.contains("lt-badge"), "no click badges in the DOM");
    assert!(dom.contains("3 · 60.0%"), "link 1: 3 of 5 human clicks");
    assert!(dom.contains("1 · 20.0%"), "links 2 and 3: 1 of 5 each");
    eprintln!("screenshot: {}", png.display());
}

/// Right after a send, as a marketer sees it: the chart draws minutes with a
/// dot per point, no template syntax shows anywhere (title, heading, click
/// map), badges are graded, and the frame is sized to the letter.
#[tokio::test]
async fn the_dashboard_right_after_a_send_shows_minutes_and_no_template_syntax() {
    let browser = browser();
    let db = just_sent_db().await;
    let app = spawn(&db, Some(TOKEN), None).await;
    let html = mailing_page(&app).await;
    assert!(html.contains(r#"data-resolution="minute""#), "{html}");
    assert!(html.contains("<circle"), "no dots on the chart");
    assert!(
        html.contains("<title>linktrack: ‹first_name›, this week…</title>"),
        "{html}"
    );

    let (url, png) = saved_page("stats-dashboard-just-sent", "dashboard", &html);
    run_chromium(
        &browser,
        &[format!("--screenshot={}", png.display()), url.clone()],
    );
    assert!(png.is_file(), "no screenshot");

    let dom = run_chromium(&browser, &["--dump-dom".to_owned(), url]);
    // The click map lives in the frame's srcdoc, its quotes escaped once.
    let dom = String::from_utf8_lossy(&dom.stdout).replace("&quot;", "\"");
    assert!(
        !dom.contains("{{") && !dom.contains("{%"),
        "template syntax on the page"
    );
    assert!(dom.contains("‹first_name›, this week…"), "the heading");
    assert!(
        dom.contains("Hello ‹name›"),
        "the click map renders the letter's fields"
    );
    // Link 1 has the most human clicks, link 3 one: different grades.
    assert!(dom.contains(r#"data-lt-heat="4""#), "the hottest badge");
    assert!(dom.contains(r#"data-lt-heat="2""#) || dom.contains(r#"data-lt-heat="1""#));
    // The frame was sized to its letter by the page's onload (the default is
    // 600px; the fixture letter is shorter).
    let height = dom
        .split(r#"id="clickmap""#)
        .nth(1)
        .and_then(|rest| rest.split("height: ").nth(1))
        .and_then(|rest| rest.split("px").next())
        .and_then(|px| px.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("the click map frame has no height set: {dom}"));
    assert!(height > 50.0 && height < 600.0, "frame height {height}px");
    eprintln!("screenshot: {}", png.display());
    app.stop().await;
}

/// The per-minute chart's time labels, like every other time on the page,
/// are shown in the viewer's time zone: Chromium run in Asia/Kolkata
/// (UTC+05:30, so even the minutes move) writes each axis end as the local
/// time of its `data-at`, keeps the UTC instant as its title, and no
/// "UTC" is left on the chart.
#[tokio::test]
async fn the_dashboard_charts_times_are_in_the_viewers_time_zone() {
    let browser = browser();
    let db = just_sent_db().await;
    let app = spawn(&db, Some(TOKEN), None).await;
    let html = mailing_page(&app).await;
    assert!(html.contains(r#"data-resolution="minute""#), "{html}");
    // The axis ends as served: UTC, with their instants.
    let ends: Vec<String> = html
        .split(r#"data-at=""#)
        .skip(1)
        .filter_map(|rest| rest.split('"').next().map(str::to_owned))
        .collect();
    assert_eq!(ends.len(), 2, "two labelled ends: {html}");
    assert!(html.contains(" UTC</text>"), "UTC without script");

    let page = tempfile::Builder::new().suffix(".html").tempfile().unwrap();
    std::fs::write(page.path(), &html).unwrap();
    let url = format!("file://{}", page.path().display());
    let out = run_chromium_with(
        &browser,
        &["--lang=en-US".to_owned(), "--dump-dom".to_owned(), url],
        &[("TZ", "Asia/Kolkata"), ("LANG", "en_US.UTF-8")],
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let chart = dom
        .split(r#"data-resolution="minute""#)
        .nth(1)
        .and_then(|rest| rest.split("</svg>").next())
        .unwrap_or_else(|| panic!("no per-minute chart in the DOM: {dom}"));
    assert!(!chart.contains("UTC"), "a label is still in UTC: {chart}");
    let kolkata = chrono::FixedOffset::east_opt(5 * 3600 + 30 * 60).unwrap();
    for at in &ends {
        let utc = chrono::DateTime::parse_from_rfc3339(at).unwrap();
        // en-US, timeStyle short: "2:32 PM" (a narrow space before PM).
        let local = utc.with_timezone(&kolkata).format("%-I:%M").to_string();
        let label = chart
            .split(&format!(r#"data-at="{at}""#))
            .nth(1)
            .and_then(|rest| rest.split_once('>'))
            .and_then(|(attributes, rest)| {
                rest.split("</text>").next().map(|text| (attributes, text))
            })
            .unwrap_or_else(|| panic!("no label for {at}: {chart}"));
        assert!(
            label.1.contains(&local),
            "{at} shown as {:?}, not Kolkata's {local}",
            label.1
        );
        assert!(
            chart.contains(&format!(r#"title="{at}""#)),
            "{at}: the UTC instant kept as the title: {chart}"
        );
    }
    app.stop().await;
}

/// The style sheet reaches the browser as CSS, not HTML-escaped text: the
/// body's computed font family is the dashboard's, not the browser's serif
/// fall-back (issue 25 found `font:14px&#x2f;1.45 …&quot;Segoe UI&quot;`).
#[tokio::test]
async fn the_dashboard_css_applies_in_a_real_browser() {
    let browser = browser();
    let db = rolled_db().await;
    let app = spawn(&db, Some(TOKEN), None).await;
    for path in ["/mailings".to_owned(), format!("/mailings/{MAILING}")] {
        let html = client()
            .get(format!("{}{path}", app.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            !html.contains("&quot;Segoe UI&quot;"),
            "{path}: the CSS is escaped"
        );
        // The browser writes what it computed into the DOM it dumps.
        let script = "document.body.setAttribute('data-font', \
                      getComputedStyle(document.body).fontFamily)";
        let probe = format!("<script>{script}</script></body>");
        // The page's policy runs no script but its own: the probe is
        // allowed by its hash, the policy otherwise as served.
        let hash = {
            use base64::Engine;
            use sha2::Digest;
            let digest = sha2::Sha256::digest(script.as_bytes());
            base64::engine::general_purpose::STANDARD.encode(digest)
        };
        assert!(
            html.contains("script-src "),
            "{path}: the page has a policy"
        );
        let html = html
            .replacen("script-src ", &format!("script-src 'sha256-{hash}' "), 1)
            .replacen("</body>", &probe, 1);
        let page = tempfile::Builder::new().suffix(".html").tempfile().unwrap();
        std::fs::write(page.path(), html).unwrap();
        let url = format!("file://{}", page.path().display());
        let dom = run_chromium(&browser, &["--dump-dom".to_owned(), url]);
        let dom = String::from_utf8_lossy(&dom.stdout);
        let font = dom
            .split("data-font=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_else(|| panic!("{path}: no computed font in the DOM:\n{dom}"));
        assert!(
            font.starts_with("system-ui") && font.contains("Segoe UI"),
            "{path}: computed font family {font:?}"
        );
    }
}

/// Gmail and Yahoo send RFC 8058 one-click unsubscribes from their servers,
/// without a browser's user agent. An unsubscribe is an instruction, not
/// engagement: every one is counted, as the suppression it caused (per
/// letter), and its bot verdict is kept for information only.
#[tokio::test]
async fn unsubscribes_are_counted_whatever_the_user_agent() {
    use linktrack::store::links::{self, LinkKind, NewLink};
    let day = days_ago(1);
    let db = TestDb::with_days_since(day).await;
    let seal = crate::common::seal_of(&db.pool).await;
    let noon = day.and_hms_opt(12, 0, 0).unwrap().and_utc();
    let rows: Vec<NewLink> = (1..=4)
        .map(|letter_id| NewLink {
            token: crate::common::sealed_token(&seal, noon, LinkKind::Unsubscribe),
            kind: LinkKind::Unsubscribe,
            mailing_id: MAILING.into(),
            letter_id,
            email: format!("user{letter_id}@example.com"),
            position: 0,
            url: String::new(),
            meta: None,
        })
        .collect();
    let tokens: Vec<String> = rows.iter().map(|r| r.token.to_string()).collect();
    links::insert(&db.pool, &rows).await.unwrap();
    let app = spawn(&db, Some(TOKEN), None).await;
    let one_click = |token: &str, user_agent: Option<&str>| {
        let mut request = client()
            .post(format!("{}/u/{token}", app.base))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body("List-Unsubscribe=One-Click");
        if let Some(agent) = user_agent {
            request = request.header(header::USER_AGENT, agent);
        }
        request.send()
    };
    // Three letters without a user agent (one of them twice), one by curl.
    for (token, agent) in [
        (&tokens[0], None),
        (&tokens[1], None),
        (&tokens[2], None),
        (&tokens[0], None),
        (&tokens[3], Some("curl/8.5.0")),
    ] {
        let response = one_click(token, agent).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let stored = crate::common::wait_for_events(&db.pool, 5).await;
    assert_eq!(stored.len(), 5, "{stored:?}");
    rollup::rollup(&db.pool, 1000).await.unwrap();

    let api = client()
        .get(format!("{}/api/mailings/{MAILING}/stats", app.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let body: serde_json::Value = serde_json::from_str(&api.text().await.unwrap()).unwrap();
    assert_eq!(
        body["unsubscribes"],
        serde_json::json!({"human": {"total": 5, "unique": 4}, "bot": {"total": 0, "unique": 0}}),
        "{body}"
    );
    // The verdicts are stored, for information.
    assert_eq!(
        body["bot_reasons"]["unsubscribe"],
        serde_json::json!({"no_user_agent": 4, "ua:curl": 1}),
        "{body}"
    );
    let page = mailing_page(&app).await;
    assert!(
        page.contains("<small>Unsubscribes</small><b id=\"unsubscribes\">4</b>"),
        "{page}"
    );
    // Listed among the bot verdicts, and said to be counted all the same.
    assert!(
        page.contains(
            "<span id=\"unsubscribe-verdicts\">unsubscribe (counted in Unsubscribes all the same"
        ),
        "{page}"
    );
    let suppressed: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM suppressions")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(suppressed, 4);
    app.stop().await;
}

/// Issue 29, item 7: JSON answers are never cached nor sniffed; HTML pages
/// carry a strict policy that allows no remote origin at all.
#[tokio::test]
async fn api_answers_are_no_store_nosniff_and_pages_carry_a_strict_policy() {
    let db = rolled_db().await;
    let app = spawn(&db, Some(TOKEN), Some(SECRET)).await;
    let base = &app.base;
    let api = format!("{base}/api/mailings/{MAILING}/stats");
    let answered = client().get(&api).bearer_auth(TOKEN).send().await.unwrap();
    let refused = client().get(&api).send().await.unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    for response in [&answered, &refused] {
        let headers = response.headers();
        assert!(headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
        assert_eq!(headers[header::CACHE_CONTROL], "no-store");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }
    for path in [
        "/mailings".to_owned(),
        format!("/mailings/{MAILING}"),
        "/login".to_owned(),
    ] {
        let response = client()
            .get(format!("{base}{path}"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let policy = response.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_owned();
        for directive in [
            "default-src 'none'",
            "img-src 'self' data:",
            "frame-ancestors 'none'",
            "form-action 'self'",
        ] {
            assert!(
                policy.contains(directive),
                "{path}: {directive} in {policy}"
            );
        }
        assert!(
            !policy.contains("http") && !policy.contains('*'),
            "{path}: no remote origin allowed: {policy}"
        );
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
        assert_eq!(
            response.headers()[header::X_CONTENT_TYPE_OPTIONS],
            "nosniff"
        );
    }
    app.stop().await;
}

/// Issue 29, item 7: a creative's images, style sheets and fonts point at a
/// listener of the test's; a real browser renders the dashboard with its
/// click map, and the listener never sees a connection.
#[tokio::test]
async fn the_click_map_makes_the_browser_contact_nobody() {
    let browser = browser();
    let db = rolled_db().await;
    let remote = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    remote.set_nonblocking(true).unwrap();
    let host = format!("http://{}", remote.local_addr().unwrap());
    let creative = std::fs::read_to_string(fixture_letter())
        .unwrap()
        .replacen(
            "<body",
            &format!(
                "<link rel=\"stylesheet\" href=\"{host}/style.css\">\
                 <style>@font-face{{font-family:x;src:url({host}/font.woff)}}\
                 p{{font-family:x;background:url({host}/bg.png)}}</style><body"
            ),
            1,
        )
        .replacen(
            "<p>",
            &format!("<p><img src=\"{host}/logo.png\" width=\"10\" height=\"10\">"),
            1,
        );
    assert!(creative.contains("/logo.png") && creative.contains("/style.css"));
    stats::save_mailing(
        &db.pool,
        &crate::common::mailing_id(MAILING),
        "November news",
        &creative,
    )
    .await
    .unwrap();
    let app = spawn(&db, Some(TOKEN), None).await;
    let html = mailing_page(&app).await;
    // The server's image proxy refuses loopback (SSRF), so the image is
    // the neutral placeholder, and its address is gone from the page.
    assert!(
        html.contains("data-lt-placeholder") && !html.contains("logo.png"),
        "the creative's image is a placeholder in the click map"
    );
    let (url, _) = saved_page("stats-no-remote", "dashboard", &html);
    let dom = run_chromium(&browser, &["--dump-dom".to_owned(), url]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("lt-badge"), "the click map rendered");
    match remote.accept() {
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok((_, peer)) => panic!("the browser fetched a creative's resource (from {peer})"),
        Err(err) => panic!("accept: {err}"),
    }
    app.stop().await;
}

/// Issue 24: the API and dashboard show opens by class (real opens, human
/// and proxy, apart from machine prefetches and scanners) and clicks
/// without bots, with the bots' share.
#[tokio::test]
async fn opens_are_shown_by_class_and_clicks_without_bots() {
    use crate::common::stats::{at, Hit};
    let d1 = days_ago(1);
    let db = TestDb::with_days_since(d1).await;
    let l = letters(&db.pool, d1, 3).await;
    let hit = |link, kind, minute, bot, event_id| Hit {
        link,
        kind,
        at: at(d1, 9, minute),
        bot,
        event_id,
    };
    record(
        &db.pool,
        &[
            hit(&l[0].pixel, "open", 0, None, 1),
            hit(&l[1].pixel, "open", 1, Some("machine:apple_mpp"), 2),
            hit(&l[2].pixel, "open", 2, Some("ua:bot"), 3),
            hit(&l[2].pixel, "open", 30, Some("proxy:gmail"), 4),
            hit(&l[0].clicks[0], "click", 31, None, 5),
            hit(&l[1].clicks[0], "click", 32, None, 6),
            hit(&l[2].clicks[1], "click", 33, Some("ua:bot"), 7),
        ],
    )
    .await;
    // A proxy open is a real open: not a bot, its class in its reason.
    sqlx::query("UPDATE events SET bot = 0 WHERE bot_reason LIKE 'proxy:%'")
        .execute(&db.pool)
        .await
        .unwrap();
    rollup::rollup(&db.pool, 1000).await.unwrap();
    let app = spawn(&db, Some(TOKEN), None).await;
    let get = |path: String| client().get(path).bearer_auth(TOKEN).send();

    let api = get(format!("{}/api/mailings/{MAILING}/stats", app.base))
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::OK);
    let body: serde_json::Value = serde_json::from_str(&api.text().await.unwrap()).unwrap();
    assert_eq!(
        body["classes"],
        serde_json::json!({
            "opens": {"total": 2, "unique": 2},
            "machine_opens": 1,
            "scanner_opens": 1,
            "clicks": {"total": 2, "unique": 2},
            "bot_clicks": 1,
            "bot_share": 1.0 / 3.0,
        }),
        "{body}"
    );
    let page = get(format!("{}/mailings/{MAILING}", app.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("<b id=\"machine-opens\">1 / 1</b>"), "{page}");
    assert!(page.contains("<b id=\"bot-clicks\">1 (33 %)</b>"), "{page}");
    assert!(page.contains("<b id=\"opens\">2 (2)</b>"), "{page}");
}

/// Issue 25: with an https base URL the session cookie is `Secure` (a
/// browser that reached the dashboard over plain http never sends it).
#[tokio::test]
async fn the_session_cookie_is_secure_when_the_base_url_is_https() {
    let db = rolled_db().await;
    let app = TestServer::start(db.pool.clone(), |settings| linktrack::server::AppSettings {
        api_token: Some(TOKEN.to_owned()),
        secret: Some(SECRET.to_owned()),
        server: linktrack::server::state::ServerSettings {
            base_url: "https://t.example.com".to_owned(),
            ..settings.server
        },
        ..settings
    })
    .await;
    let ok = client()
        .post(format!("{}/login", app.base))
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::SEE_OTHER);
    let cookie = ok.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.ends_with("; Secure"), "{cookie}");
    app.stop().await;
}

/// Issue 42: the mailing page in a real browser before any traffic and
/// after it: screenshots of both, the creative's unfetchable image shown
/// as the placeholder (no `<img>` left pointing anywhere but `data:`), no
/// console message (a policy violation or a script error would log one),
/// the cumulative chart and the bars drawn, times put in the viewer's zone.
#[tokio::test]
async fn the_mailing_page_before_and_after_traffic_has_no_broken_image_or_console_error() {
    let browser = browser();
    let db = TestDb::with_days_since(days_ago(1)).await;
    let today = days_ago(0);
    let letters = letters(&db.pool, today, 3).await;
    let creative = std::fs::read_to_string(fixture_letter()).unwrap().replacen(
        "<p>",
        "<p><img src=\"http://127.0.0.1:1/logo.png\" width=\"40\" height=\"20\" alt=\"logo\">",
        1,
    );
    stats::save_mailing(
        &db.pool,
        &crate::common::mailing_id(MAILING),
        "November news",
        &creative,
    )
    .await
    .unwrap();
    let app = spawn(&db, Some(TOKEN), None).await;
    let mut doms = Vec::new();
    for stage in ["before", "after"] {
        if stage == "after" {
            record(&db.pool, &traffic(&letters, today, today)).await;
            rollup::rollup(&db.pool, 1000).await.unwrap();
        }
        let html = mailing_page(&app).await;
        assert!(html.contains("data-lt-placeholder"), "{stage}");
        assert!(
            !html.contains("127.0.0.1:1"),
            "{stage}: the image's address left"
        );
        let (url, png) = saved_page("stats-before-after", stage, &html);
        run_chromium(
            &browser,
            &[format!("--screenshot={}", png.display()), url.clone()],
        );
        let bytes = std::fs::read(&png).unwrap_or_default();
        assert!(
            bytes.len() > 30_000 && &bytes[1..4] == b"PNG",
            "{stage}: screenshot"
        );
        let out = run_chromium(
            &browser,
            &[
                "--enable-logging=stderr".to_owned(),
                "--v=0".to_owned(),
                "--dump-dom".to_owned(),
                url,
            ],
        );
        let log = String::from_utf8_lossy(&out.stderr);
        let console: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("CONSOLE") || l.contains("Refused to") || l.contains("Uncaught"))
            .collect();
        assert!(console.is_empty(), "{stage}: console messages: {console:?}");
        eprintln!("screenshot: {}", png.display());
        doms.push(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let (before, after) = (&doms[0], &doms[1]);
    assert!(before.contains("No opens or clicks rolled up yet."));
    assert!(before.contains("None yet."), "no bars before traffic");
    assert!(after.contains("chart cumulative") && after.contains(" opens</text>"));
    assert!(after.contains("class=\"bars\""), "bars after traffic");
    // The script ran: the first event's time carries its RFC 3339 as a
    // title and shows the viewer's local form.
    let at = after
        .find("id=\"first-event\"")
        .expect("the first event's time");
    let tag_end = at + after[at..].find('>').unwrap();
    assert!(
        after[at..tag_end].contains("title=\""),
        "{}",
        &after[at..tag_end]
    );
    app.stop().await;
}
