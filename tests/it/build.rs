use crate::common::build::{options, tracked_tokens, BASE};
use crate::common::wait::{eventually_eq, PATIENCE};
use crate::common::{today, TestDb};
use linktrack::builder;
use linktrack::store::links::{self, LinkKind};
use linktrack::store::sequences::Sequence;
use linktrack::store::suppressions;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn the_fixture_mailing_builds_skipping_the_suppressed_and_the_bad() {
    let db = TestDb::new().await;
    suppressions::add(&db.pool, &["blocked@example.net".into()], "test")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let opts = options(
        dir.path(),
        fixtures().join("mailing.json"),
        fixtures().join("recipients.csv"),
    );
    let summary = builder::run(&db.pool, &opts).await.unwrap();

    assert_eq!(
        (summary.letters_built, summary.suppressed, summary.rejected),
        (6, 1, 2),
        "{summary}"
    );
    let rejects = read_jsonl(&dir.path().join("rejects.jsonl"));
    let by_line: HashMap<u64, &str> = rejects
        .iter()
        .map(|r| (r["line"].as_u64().unwrap(), r["reason"].as_str().unwrap()))
        .collect();
    assert!(by_line[&6].starts_with("suppressed"), "{by_line:?}");
    assert!(by_line[&7].contains("invalid address"), "{by_line:?}");
    assert!(
        by_line[&9].contains("duplicate address: first at line 2"),
        "{by_line:?}"
    );

    let letters = read_jsonl(&dir.path().join("letters.jsonl"));
    assert!(!dir.path().join("letters.jsonl.partial").exists());
    assert_eq!(letters.len(), 6);
    let ids: HashSet<u64> = letters
        .iter()
        .map(|l| l["letter_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 6, "letter ids are unique");
    let taro = letters
        .iter()
        .find(|l| l["email"] == "taro.yamada@example.jp")
        .unwrap();
    assert_eq!(
        taro["subject"],
        "太郎, this week: Rust 1.95 and daily partitions"
    );
    assert_eq!(taro["pool"], "newsletters");
    let html = taro["html"].as_str().unwrap();
    assert!(html.contains("Hello 太郎,"));
    assert!(
        html.contains(r#"href="mailto:editor@weekly.example.com""#),
        "mailto untouched"
    );
    assert!(
        html.contains(r#"<a href="https://weekly.example.com/privacy">"#),
        "opted-out link untouched, marker removed"
    );
    assert!(
        !html.contains("https://blog.rust-lang.example"),
        "tracked links are rewritten"
    );
    assert!(
        html.contains("<img src=\"https://t.example.test/o/"),
        "pixel added"
    );

    let headers = &taro["headers"];
    assert_eq!(
        headers["List-Unsubscribe-Post"],
        "List-Unsubscribe=One-Click"
    );
    let unsubscribe = headers["List-Unsubscribe"].as_str().unwrap();
    assert!(unsubscribe.starts_with("<https://t.example.test/u/") && unsubscribe.ends_with('>'));
    assert!(
        html.contains(&unsubscribe[1..unsubscribe.len() - 1]),
        "the template's unsubscribe_url is the header's"
    );

    // Every tracked link resolves to a row naming this letter and its target.
    let mut tokens = tracked_tokens(html);
    let mut honeypots = Vec::new();
    for (kind, token) in &mut tokens {
        let row = links::lookup(&db.pool, token).await.unwrap().unwrap();
        if row.kind == LinkKind::Honeypot {
            // The honeypot is served on /c/ like a click.
            assert_eq!(*kind, LinkKind::Click);
            *kind = LinkKind::Honeypot;
            honeypots.push(*token);
        }
    }
    let clicks = tokens.iter().filter(|(k, _)| *k == LinkKind::Click).count();
    assert_eq!(
        clicks, 8,
        "logo, 3 articles, 2 map areas, VML button, HTML button"
    );
    assert_eq!(honeypots.len(), 1, "one honeypot link per letter");
    let honeypot = format!(
        r#"<area href="https://t.example.test/c/{}" aria-hidden="true" tabindex="-1" alt="" style="display:none;"#,
        honeypots[0]
    );
    assert!(html.contains(&honeypot), "invisible to people: {html}");
    let text_part = linktrack::delivery::message::text_part(html);
    assert!(
        !text_part.contains(&honeypots[0].to_string()),
        "no honeypot in the text part: {text_part}"
    );
    for (kind, token) in &tokens {
        let row = links::lookup(&db.pool, token)
            .await
            .unwrap()
            .expect("row for every token");
        assert_eq!(row.kind, *kind);
        assert_eq!(token.date(), today());
        if *kind != LinkKind::Image {
            assert_eq!(
                (row.email.as_str(), row.letter_id),
                (
                    "taro.yamada@example.jp",
                    taro["letter_id"].as_u64().unwrap()
                )
            );
        }
    }
    let first_click = links::lookup(
        &db.pool,
        &tokens
            .iter()
            .find(|(k, _)| *k == LinkKind::Click)
            .unwrap()
            .1,
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        first_click.url,
        "https://weekly.example.com/?utm_source=newsletter&utm_medium=email&utm_campaign=w47",
        "&amp; decoded"
    );

    // Rows: 8 clicks + pixel + unsubscribe + honeypot per letter, 2
    // distinct images per mailing.
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 6 * 11 + 2);
    assert_eq!(summary.links_stored, 68);
}

#[tokio::test]
async fn a_rerun_after_completion_stores_nothing_new_and_writes_the_same_letters() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let opts = options(
        dir.path(),
        fixtures().join("mailing.json"),
        fixtures().join("recipients.csv"),
    );
    builder::run(&db.pool, &opts).await.unwrap();
    let first = read_jsonl(&dir.path().join("letters.jsonl"));
    let again = builder::run(&db.pool, &opts).await.unwrap();
    assert_eq!(
        (
            again.letters_built,
            again.letters_resumed,
            again.links_stored
        ),
        (7, 7, 0)
    );
    assert_eq!(read_jsonl(&dir.path().join("letters.jsonl")), first);
}

/// The planned builder's letters (MIME bodies encoded from the plan) are
/// the reference path's bytes: a re-run letter by letter, which reuses the
/// stored tokens and has lettre encode every body, writes the same file.
#[tokio::test]
async fn a_rerun_letter_by_letter_writes_the_planned_letters_byte_for_byte() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(
        dir.path(),
        fixtures().join("mailing.json"),
        fixtures().join("recipients.csv"),
    );
    builder::run(&db.pool, &opts).await.unwrap();
    let planned = std::fs::read_to_string(dir.path().join("letters.jsonl")).unwrap();
    opts.letter_by_letter = true;
    let again = builder::run(&db.pool, &opts).await.unwrap();
    assert_eq!((again.letters_resumed, again.links_stored), (7, 0));
    let reference = std::fs::read_to_string(dir.path().join("letters.jsonl")).unwrap();
    assert_eq!(planned.lines().count(), 7);
    assert!(
        planned.contains("Content-Transfer-Encoding: quoted-printable"),
        "{planned}"
    );
    for (a, b) in planned.lines().zip(reference.lines()) {
        assert_eq!(a, b);
    }
}

#[tokio::test]
async fn a_creative_with_another_engines_tags_is_refused_unless_personalize_is_off() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let html = "<p>Hi</p>\n<ul>{{#each items}}<li><a href=\"https://shop.example/{{id}}\">x</a></li>{{/each}}</ul>";
    std::fs::write(dir.path().join("hbs.html"), html).unwrap();
    let mailing = |personalize: bool| {
        let path = dir.path().join(format!("m-{personalize}.json"));
        let json = serde_json::json!({"mailing_id": format!("hbs-{personalize}"), "subject": "s", "from": "f@example.com", "html_file": "hbs.html", "personalize": personalize});
        std::fs::write(&path, json.to_string()).unwrap();
        path
    };
    std::fs::write(
        dir.path().join("r.jsonl"),
        "{\"email\":\"a@example.com\"}\n",
    )
    .unwrap();

    let refused = builder::run(
        &db.pool,
        &options(dir.path(), mailing(true), dir.path().join("r.jsonl")),
    )
    .await
    .unwrap_err();
    let message = refused.to_string();
    assert!(
        message.contains("m-true.json") && message.contains("line 2"),
        "{message}"
    );

    let summary = builder::run(
        &db.pool,
        &options(dir.path(), mailing(false), dir.path().join("r.jsonl")),
    )
    .await
    .unwrap();
    assert_eq!(summary.letters_built, 1);
    let letter = &read_jsonl(&dir.path().join("letters.jsonl"))[0];
    assert!(
        letter["html"]
            .as_str()
            .unwrap()
            .contains("href=\"https://shop.example/{{id}}\""),
        "unresolved template hrefs are left alone"
    );
}

#[tokio::test]
async fn a_recipient_missing_a_field_is_rejected_by_name() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("r.jsonl"),
        "{\"email\":\"a@example.com\",\"first_name\":\"A\"}\n{\"email\":\"b@example.com\"}\n",
    )
    .unwrap();
    let summary = builder::run(
        &db.pool,
        &options(
            dir.path(),
            fixtures().join("mailing.json"),
            dir.path().join("r.jsonl"),
        ),
    )
    .await
    .unwrap();
    assert_eq!((summary.letters_built, summary.rejected), (1, 1));
    let rejects = read_jsonl(&dir.path().join("rejects.jsonl"));
    assert_eq!(rejects[0]["line"], 2);
    assert!(
        rejects[0]["reason"]
            .as_str()
            .unwrap()
            .contains("first_name"),
        "{rejects:?}"
    );
}

#[tokio::test]
async fn track_false_leaves_links_alone_and_stores_only_the_unsubscribe_link() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let html = "<p>Hi {{ first_name }}</p><a href=\"https://example.com/a\">a</a><img src=\"https://example.com/i.png\">";
    let json = serde_json::json!({"mailing_id": "plain", "subject": "s", "from": "f@example.com", "html": html, "track": false});
    std::fs::write(dir.path().join("m.json"), json.to_string()).unwrap();
    std::fs::write(
        dir.path().join("r.jsonl"),
        "{\"email\":\"a@example.com\",\"first_name\":\"Ann\"}\n",
    )
    .unwrap();
    let summary = builder::run(
        &db.pool,
        &options(
            dir.path(),
            dir.path().join("m.json"),
            dir.path().join("r.jsonl"),
        ),
    )
    .await
    .unwrap();
    // Unsubscribing is not tracking: the one row and the header stay.
    assert_eq!((summary.letters_built, summary.links_stored), (1, 1));
    assert_eq!(summary.letters_untracked, 1);
    let letter = &read_jsonl(&dir.path().join("letters.jsonl"))[0];
    assert_eq!(letter["html"], "<p>Hi Ann</p><a href=\"https://example.com/a\">a</a><img src=\"https://example.com/i.png\">");
    let header = letter["headers"]["List-Unsubscribe"].as_str().unwrap();
    assert!(header.starts_with(&format!("<{BASE}/u/")), "{header}");
    let kinds: Vec<String> = sqlx::query_scalar("SELECT CAST(kind AS CHAR) FROM links")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(kinds, ["unsubscribe"]);
}

#[tokio::test]
async fn sequences_hand_out_disjoint_blocks_and_new_names_start_at_one() {
    let db = TestDb::new().await;
    let mut letters_a = Sequence::new("letters", 3);
    let mut letters_b = Sequence::new("letters", 3);
    let mut a = Vec::new();
    let mut b = Vec::new();
    for _ in 0..7 {
        a.push(letters_a.next(&db.pool).await.unwrap());
        b.push(letters_b.next(&db.pool).await.unwrap());
    }
    let all: HashSet<u64> = a.iter().chain(&b).copied().collect();
    assert_eq!(
        all.len(),
        14,
        "two allocators never share an id: {a:?} {b:?}"
    );
    assert_eq!(&a[..3], &[1, 2, 3]);
    assert_eq!(&b[..3], &[4, 5, 6]);
    // The seed's bug: a brand-new name must not report another sequence's value.
    let mut fresh = Sequence::new("brand-new", 100);
    assert_eq!(fresh.next(&db.pool).await.unwrap(), 1);
    // Two servers: same stride, different offsets, never overlap.
    let mut one = Sequence::sharded("sharded", 2, 2, 1);
    let mut two = Sequence::sharded("sharded-2", 2, 2, 2);
    let odd: Vec<u64> = futures_collect(&mut one, &db).await;
    let even: Vec<u64> = futures_collect(&mut two, &db).await;
    assert!(
        odd.iter().all(|n| n % 2 == 1) && even.iter().all(|n| n % 2 == 0),
        "{odd:?} {even:?}"
    );
}

/// The cluster's id blocks: increasing across takes, unique between two
/// allocators of the same row (two processes), and the next block reserved
/// ahead, before the current one runs out (so a build does not wait on it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn id_blocks_increase_never_overlap_and_reserve_the_next_block_ahead() {
    use linktrack::store::cluster::IdBlocks;
    let db = TestDb::new().await;
    let (one, two) = (
        IdBlocks::new("test.ids", 100),
        IdBlocks::new("test.ids", 100),
    );
    let mut taken_by_one: Vec<u64> = Vec::new();
    let mut all = HashSet::new();
    for round in 0..12 {
        let mine = one.take(&db.pool, 30).await.unwrap();
        let theirs = two.take(&db.pool, 45).await.unwrap();
        assert_eq!((mine.len(), theirs.len()), (30, 45));
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "round {round}: {mine:?}"
        );
        if let Some(last) = taken_by_one.last() {
            assert!(mine[0] > *last, "round {round}: {mine:?} after {last}");
        }
        taken_by_one.extend(&mine);
        for id in mine.iter().chain(&theirs) {
            assert!(all.insert(*id), "id {id} handed out twice");
        }
    }
    // A take larger than a block gets one whole, still increasing.
    let big = one.take(&db.pool, 250).await.unwrap();
    assert_eq!(big.len(), 250);
    assert!(big.windows(2).all(|w| w[0] < w[1]) && big[0] > taken_by_one[taken_by_one.len() - 1]);
    // A take that leaves less than its own size behind reserves the next
    // block in the background: 60 of a block of 100 taken, the row moves
    // on to 200 before anything else is asked of it.
    let ahead = IdBlocks::new("test.ahead", 100);
    let reserved = || async {
        sqlx::query_scalar::<_, u64>("SELECT id FROM sequences WHERE name = 'test.ahead'")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    assert_eq!(
        ahead.take(&db.pool, 60).await.unwrap(),
        (1..=60).collect::<Vec<_>>()
    );
    eventually_eq(PATIENCE, "the next block reserved ahead", 200, reserved).await;
    assert_eq!(
        ahead.take(&db.pool, 60).await.unwrap(),
        (61..=120).collect::<Vec<_>>()
    );
}

async fn futures_collect(seq: &mut Sequence, db: &TestDb) -> Vec<u64> {
    let mut out = Vec::new();
    for _ in 0..5 {
        out.push(seq.next(&db.pool).await.unwrap());
    }
    out
}

/// every file of the email corpus builds with `personalize: false`,
/// and every token in the output resolves to a row holding the URL the
/// rewriter found at that position.
#[tokio::test]
async fn every_corpus_letter_builds_and_every_token_resolves_to_its_original_url() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/email-corpus");
    let files: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the corpus lives in fixtures/email-corpus)",
                corpus.display()
            )
        })
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "html"))
        .collect();
    assert!(files.len() >= 30, "corpus has {} files", files.len());
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("r.jsonl"),
        "{\"email\":\"reader@example.com\"}\n",
    )
    .unwrap();
    for (n, file) in files.iter().enumerate() {
        let html = std::fs::read_to_string(file).unwrap();
        let mailing = serde_json::json!({"mailing_id": format!("corpus-{n}"), "subject": "s", "from": "f@example.com", "html": html, "personalize": false});
        let path = dir.path().join(format!("m{n}.json"));
        std::fs::write(&path, mailing.to_string()).unwrap();
        let summary = builder::run(
            &db.pool,
            &options(dir.path(), path, dir.path().join("r.jsonl")),
        )
        .await
        .unwrap();
        assert_eq!(
            (summary.letters_built, summary.rejected),
            (1, 0),
            "{}",
            file.display()
        );

        let mut expected = Vec::new();
        let no_track = linktrack::letter::RewriteOptions {
            track_links: true,
            proxy_images: true,
            own_base_url: BASE,
            pixel_html: None,
            // The build's default: links showing another site's address
            // are left as written (docs/domains.md).
            shown_address_base: Some(BASE),
        };
        linktrack::letter::rewrite(&html, &no_track, |found| {
            expected.push((
                found.kind == linktrack::letter::FoundKind::Click,
                found.url.clone(),
            ));
            found.url.clone()
        })
        .unwrap();
        let letter = &read_jsonl(&dir.path().join("letters.jsonl"))[0];
        let tokens = tracked_tokens(letter["html"].as_str().unwrap());
        let mut clicks = Vec::new();
        for (kind, token) in &tokens {
            let row = links::lookup(&db.pool, token)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{}: token {token} has no row", file.display()));
            if *kind == LinkKind::Click && row.kind == LinkKind::Click {
                clicks.push((row.position, row.url));
            }
        }
        clicks.sort();
        let expected_clicks: Vec<String> = expected
            .iter()
            .filter(|(c, _)| *c)
            .map(|(_, u)| u.clone())
            .collect();
        assert_eq!(
            clicks.into_iter().map(|(_, u)| u).collect::<Vec<_>>(),
            expected_clicks,
            "{}",
            file.display()
        );
    }
}

/// Kill the builder with SIGKILL mid-job, run the same command again: the
/// output holds every accepted recipient once, every link resolves, and no
/// link row is stored twice.
#[tokio::test]
async fn kill_9_then_rerun_gives_every_letter_once_and_no_duplicate_rows() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let recipients = dir.path().join("r.jsonl");
    let total = 3000;
    let lines: String = (0..total)
        .map(|n| format!("{{\"email\":\"reader{n}@example.com\",\"first_name\":\"R{n}\"}}\n"))
        .collect();
    std::fs::write(&recipients, lines).unwrap();
    let out = dir.path().join("letters.jsonl");
    let command = || {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_linktrack"));
        c.args(["build", "--batch-size", "50", "--no-progress", "--mailing"])
            .arg(fixtures().join("mailing.json"))
            .arg("--recipients")
            .arg(&recipients)
            .arg("--out")
            .arg(&out)
            .env("DATABASE_URL", &db.url)
            .env("LINKTRACK_BASE_URL", BASE)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        c
    };
    let stored_letters = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM links WHERE kind = 'pixel'")
            .fetch_one(&db.pool)
            .await
            .unwrap_or(0)
    };

    let mut child = command().spawn().unwrap();
    // Polled every few milliseconds, not through `wait::eventually` (whose
    // pauses grow): the kill must land while the build is still running.
    let deadline = std::time::Instant::now() + crate::common::wait::scaled(PATIENCE);
    while stored_letters().await < 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "the builder stored nothing in time"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let at_kill = stored_letters().await;
    assert!(
        at_kill < total,
        "the job finished before the kill; make it bigger"
    );
    assert!(!out.exists(), "a killed run leaves no final output");

    let status = command().status().unwrap();
    assert!(status.success(), "rerun: {status}");
    let letters = read_jsonl(&out);
    let emails: Vec<&str> = letters
        .iter()
        .map(|l| l["email"].as_str().unwrap())
        .collect();
    let distinct: HashSet<&str> = emails.iter().copied().collect();
    assert_eq!(
        (emails.len(), distinct.len()),
        (total as usize, total as usize),
        "every recipient exactly once"
    );

    let (rows, distinct_uuids): (i64, i64) =
        sqlx::query_as("SELECT COUNT(*), COUNT(DISTINCT uuid) FROM links")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(rows, distinct_uuids);
    assert_eq!(
        rows,
        total * 11 + 2,
        "11 rows per letter (8 clicks, pixel, unsubscribe, honeypot), 2 shared images: nothing duplicated"
    );
    let per_position: Option<(String, i64)> = sqlx::query_as(
        "SELECT email, COUNT(*) c FROM links WHERE kind <> 'image' GROUP BY email, kind, position HAVING c > 1 LIMIT 1",
    )
    .fetch_optional(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        per_position, None,
        "no letter has two rows for one position"
    );
    // Spot-check that links in the final output resolve, including letters built before the kill.
    for letter in letters.iter().step_by(97) {
        for (_, token) in tracked_tokens(letter["html"].as_str().unwrap()) {
            assert!(
                links::lookup(&db.pool, &token).await.unwrap().is_some(),
                "{token} resolves"
            );
        }
    }
}

/// Issue 27: `link_templates` costs a few rows per mailing, one per
/// distinct (kind, position, URL) the letters share, never one per reader.
/// Its disk cost (docs/token.md) is measured here: the fixture mailing is
/// built, its templates copied under `COPIES` more mailing ids (as if that
/// many such mailings had been built), and InnoDB's own figure read back.
/// Run with `--nocapture` to see it.
#[tokio::test]
async fn link_templates_hold_one_row_per_shared_link_of_a_mailing() {
    const MAILING: &str = "weekly-2026-47";
    const COPIES: u32 = 511;
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let opts = options(
        dir.path(),
        fixtures().join("mailing.json"),
        fixtures().join("recipients.csv"),
    );
    let summary = builder::run(&db.pool, &opts).await.unwrap();
    let templates: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM link_templates WHERE mailing_id = ?")
            .bind(MAILING)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    // The links every letter shares: the same (kind, position, URL) in
    // every letter, or the mailing's shared image rows (letter 0). The
    // honeypot has none: a late hit on a bot trap is worth nothing.
    let shared: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT kind, position, url FROM links \
           WHERE mailing_id = ? AND kind <> 'honeypot' \
           GROUP BY kind, position, url \
           HAVING COUNT(DISTINCT letter_id) = ? OR MIN(letter_id) = 0) AS shared",
    )
    .bind(MAILING)
    .bind(summary.letters_built)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let links: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM links WHERE mailing_id = ?")
        .bind(MAILING)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(templates > 0);
    assert_eq!(templates, shared, "one template per shared link");
    assert!(
        templates < links,
        "{templates} templates for {links} link rows"
    );

    for copy in 1..=COPIES {
        sqlx::query(
            "INSERT INTO link_templates (mailing_id, kind, position, url_hash, url, first_day) \
             SELECT CONCAT(mailing_id, '.', ?), kind, position, url_hash, url, first_day \
             FROM link_templates WHERE mailing_id = ?",
        )
        .bind(copy)
        .bind(MAILING)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    sqlx::query("ANALYZE TABLE link_templates")
        .execute(&db.pool)
        .await
        .unwrap();
    let bytes: u64 = sqlx::query_scalar(
        "SELECT CAST(data_length + index_length AS UNSIGNED) FROM information_schema.TABLES \
         WHERE table_schema = DATABASE() AND table_name = 'link_templates'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let mailings = u64::from(COPIES) + 1;
    eprintln!(
        "link_templates: {templates} rows per mailing ({links} link rows, {} letters); \
         {bytes} bytes for {mailings} mailings: {} bytes per mailing",
        summary.letters_built,
        bytes / mailings
    );
}
