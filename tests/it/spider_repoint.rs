//! Repointing sent links on a real Spider cluster (issue 56): the repoint
//! commands read the letters' links through the head from both data
//! nodes, and a running server sends every letter, whichever node holds
//! its link, to the new target: a position for every letter, one
//! recipient's link, and a personalised link refilled with each reader's
//! own values.

use crate::common::cluster::Cluster;
use crate::common::spider::{build_through_head, click_tokens, link_rows, ok};
use crate::common::wait::{eventually, PATIENCE};
use linktrack::store;

/// Where `token` leads on the server at `base`, polled until it is `want`.
async fn wait_for_location(http: &reqwest::Client, base: &str, token: &str, want: &str) {
    let what = format!("{token} leading to {want}");
    eventually(PATIENCE, &what, || async {
        let answer = http.get(format!("{base}/c/{token}")).send().await.unwrap();
        assert_eq!(answer.status(), 302, "{token}");
        let seen = answer.headers()["location"].to_str().unwrap().to_owned();
        if seen == want {
            Ok(())
        } else {
            Err(seen)
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repoints_reach_letters_on_every_data_node() {
    let cluster = Cluster::start().await;
    ok(&cluster, &["migrate"]);
    let dir = tempfile::tempdir().unwrap();
    let mailing = dir.path().join("mailing.json");
    std::fs::write(
        &mailing,
        serde_json::json!({
            "mailing_id": "spider-links", "subject": "s", "from": "f@example.com",
            "html": "<p><a href=\"https://shop.example/u/{{ id }}\" data-linktrack-name=\"mine\">yours</a> \
                     <a href=\"https://shop.example/sale\" data-linktrack-name=\"cta\">sale</a></p>",
            "proxy_images": false
        })
        .to_string(),
    )
    .unwrap();
    let recipients = dir.path().join("recipients.jsonl");
    let lines: Vec<String> = (0..40)
        .map(|n| format!("{{\"email\":\"r{n}@example.com\",\"id\":\"u{n}\"}}"))
        .collect();
    std::fs::write(&recipients, lines.join("\n") + "\n").unwrap();
    let letters: Vec<(String, Vec<String>)> =
        build_through_head(&cluster, dir.path(), &mailing, &recipients, &[])
            .iter()
            .map(|letter| {
                (
                    letter["email"].as_str().unwrap().to_owned(),
                    click_tokens(letter),
                )
            })
            .collect();
    assert_eq!(letters.len(), 40);
    // Both nodes hold some of the letters' links (the test means nothing
    // otherwise).
    for node in 0..2 {
        let rows = link_rows(&cluster.node_pool(node).await).await;
        assert!(!rows.is_empty(), "node {node} holds no link");
    }

    let head = store::connect(&cluster.head.url(), &store::PoolSettings::default())
        .await
        .unwrap();
    let app = crate::common::TestServer::start(head, |settings| settings).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let base = app.base.clone();
    wait_for_location(&http, &base, &letters[0].1[1], "https://shop.example/sale").await;

    let repoint = |args: &[&str]| {
        let mut all = vec!["links", "repoint", "--mailing", "spider-links"];
        all.extend(args);
        ok(&cluster, &all)
    };
    repoint(&["--name", "cta", "--to", "https://shop.example/fixed"]);
    repoint(&[
        "--name",
        "mine",
        "--to",
        "https://shop.example/account/{{ id }}",
    ]);
    repoint(&[
        "--position",
        "2",
        "--recipient",
        "r7@example.com",
        "--to",
        "https://shop.example/for-r7",
    ]);
    for (email, tokens) in &letters {
        let n = email
            .trim_start_matches('r')
            .trim_end_matches("@example.com");
        let mine = format!("https://shop.example/account/u{n}");
        wait_for_location(&http, &base, &tokens[0], &mine).await;
        let cta = if email == "r7@example.com" {
            "https://shop.example/for-r7"
        } else {
            "https://shop.example/fixed"
        };
        wait_for_location(&http, &base, &tokens[1], cta).await;
    }
    let listed = ok(
        &cluster,
        &["links", "list", "--mailing", "spider-links", "--json"],
    );
    assert!(
        listed.contains("https://shop.example/account/{{ id }}"),
        "{listed}"
    );
    assert!(listed.contains("https://shop.example/for-r7"), "{listed}");
    drop(app);
}
