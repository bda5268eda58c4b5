use crate::common::{linktrack, wait, TestDb};
use linktrack::store::links;
use linktrack::token::Token;

#[tokio::test]
async fn the_demo_builds_the_fixtures_and_its_sample_urls_resolve() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let outcome = linktrack::demo::prepare(
        &db.url,
        "http://127.0.0.1:9",
        None,
        dir.path(),
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        (
            outcome.summary.letters_built,
            outcome.summary.suppressed,
            outcome.summary.rejected
        ),
        (6, 1, 2)
    );
    assert_eq!(outcome.sample_urls.len(), 4, "{:?}", outcome.sample_urls);
    for (label, url) in &outcome.sample_urls {
        let hex = url.rsplit('/').next().unwrap().trim_end_matches(".gif");
        let token = Token::parse(hex).unwrap();
        assert!(
            links::lookup(&db.pool, &token).await.unwrap().is_some(),
            "{label}: {url}"
        );
    }
    // Running it again is safe: same letters, nothing stored twice.
    let again = linktrack::demo::prepare(
        &db.url,
        "http://127.0.0.1:9",
        None,
        dir.path(),
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        (again.summary.letters_built, again.summary.links_stored),
        (6, 0)
    );
}

#[tokio::test]
async fn the_demo_command_prints_urls_and_exits_with_no_serve() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().expect("a UTF-8 temporary path");
    let out = linktrack(
        &db,
        &[
            "demo",
            "--no-serve",
            "--listen",
            "127.0.0.1:9",
            "--dir",
            dir_arg,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("built 6 letters"), "{stdout}");
    assert!(
        stdout.contains("a click in ann.lee@example.com's letter: http://127.0.0.1:9/c/"),
        "{stdout}"
    );
    assert!(dir.path().join("letters.jsonl").exists());
}

/// The demo serves its letters' pictures itself: the proxied image URL it
/// prints answers a PNG through the image proxy (it pointed at a CDN that
/// does not exist, and answered 502).
#[tokio::test]
async fn the_demos_printed_image_url_answers_a_picture() {
    use tokio::io::AsyncBufReadExt;
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().expect("a UTF-8 temporary path");
    // The demo prints URLs made from its `--listen`, so port 0 would not do:
    // a port is picked, and the demo is run again on another when the one
    // picked was taken before it bound it (it exits saying so).
    for _ in 0..3 {
        let listen = format!("127.0.0.1:{}", crate::common::pick_port("127.0.0.1"));
        let mut demo = tokio::process::Command::new(env!("CARGO_BIN_EXE_linktrack"))
            .args(["demo", "--listen", &listen, "--admin-listen", "127.0.0.1:0"])
            .args(["--dir", dir_arg])
            .env("DATABASE_URL", &db.url)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("starting linktrack demo");
        let mut lines = tokio::io::BufReader::new(demo.stdout.take().unwrap()).lines();
        let printed = async {
            loop {
                let line = lines
                    .next_line()
                    .await
                    .unwrap()
                    .expect("the demo printed no proxied image URL");
                if line.trim_start().starts_with("a proxied image") {
                    break line.split_once(": ").unwrap().1.to_owned();
                }
            }
        };
        // Twice the usual patience: the demo builds its letters before it
        // prints their URLs.
        let image_url = tokio::time::timeout(wait::scaled(2 * wait::PATIENCE), printed)
            .await
            .expect("the demo printed no proxied image URL in time");
        assert!(
            image_url.starts_with(&format!("http://{listen}/i/")),
            "{image_url}"
        );

        // The URLs are printed before the server listens: wait for it (or
        // for the demo to exit: the port was taken).
        let http = reqwest::Client::new();
        let response = wait::eventually(wait::PATIENCE, "the demo listens", || {
            let exited = demo.try_wait().unwrap().is_some();
            let request = http.get(&image_url).send();
            let url = image_url.as_str();
            async move {
                if exited {
                    return Ok(None);
                }
                match request.await {
                    Ok(response) => Ok(Some(response)),
                    Err(err) if err.is_connect() => Err(err),
                    Err(err) => panic!("{url}: {err}"),
                }
            }
        })
        .await;
        let Some(response) = response else {
            let mut stderr = String::new();
            use tokio::io::AsyncReadExt;
            demo.stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .await
                .unwrap();
            assert!(
                crate::common::port_was_taken(&stderr),
                "the demo exited: {stderr}"
            );
            continue;
        };
        assert_picture(&image_url, response).await;
        demo.kill().await.unwrap();
        return;
    }
    panic!("three picked ports were taken");
}

/// The image proxy's answer: a PNG.
async fn assert_picture(image_url: &str, response: reqwest::Response) {
    assert_eq!(response.status(), reqwest::StatusCode::OK, "{image_url}");
    let content_type = response.headers()[reqwest::header::CONTENT_TYPE].clone();
    assert_eq!(content_type, "image/png");
    let body = response.bytes().await.unwrap();
    assert!(
        body.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} bytes",
        body.len()
    );
}
