//! `linktrack demo`: the whole loop on the files in `fixtures/`, on a fresh
//! machine. The fixtures are compiled in, so the command works from any
//! directory.

use crate::builder::compose::tracked_url;
use crate::builder::{self, BuildOptions, Output, Summary};
use crate::mailing_id::MailingId;
use crate::store::links::LinkKind;
use crate::store::{self, partitions, suppressions};
use crate::token::Token;
use anyhow::Context;
use std::path::{Path, PathBuf};

const MAILING: &str = include_str!("../fixtures/mailing.json");
const NEWSLETTER: &str = include_str!("../fixtures/newsletter.html");
const RECIPIENTS: &str = include_str!("../fixtures/recipients.csv");
const SUPPRESSIONS: &str = include_str!("../fixtures/suppressions.txt");

/// Where the fixture's pictures point: a CDN that does not exist, so the
/// demo's image proxy would answer 502.
const FIXTURE_IMAGES: &str = "https://cdn.example.com/weekly/";

/// The path under which the demo's stand-in CDN answers the fixture's
/// pictures ([`image`]).
pub const IMAGE_PATH: &str = "/demo/";

/// The fixture's pictures by file name (`fixtures/images/`).
const IMAGES: [(&str, &[u8]); 2] = [
    ("logo.png", include_bytes!("../fixtures/images/logo.png")),
    ("map.png", include_bytes!("../fixtures/images/map.png")),
];

/// A picture of the demo's letters, by file name (PNG).
pub fn image(name: &str) -> Option<&'static [u8]> {
    IMAGES
        .iter()
        .find(|(file, _)| *file == name)
        .map(|(_, bytes)| *bytes)
}

/// The fixture newsletter with its pictures at `{image_base}/demo/…` (the
/// demo's stand-in CDN, so the proxied image shows a picture), or where the
/// fixture has them when `image_base` is `None`. Not under the letters' own
/// base URL: the builder leaves its own links alone, so they would not be
/// proxied.
fn newsletter_for(image_base: Option<&str>) -> String {
    match image_base {
        Some(base) => {
            let cdn = format!("{}{IMAGE_PATH}", base.trim_end_matches('/'));
            NEWSLETTER.replace(FIXTURE_IMAGES, &cdn)
        }
        None => NEWSLETTER.to_owned(),
    }
}

/// What the demo produced, for printing and for tests.
#[derive(Debug)]
pub struct DemoOutcome {
    pub summary: Summary,
    pub letters: PathBuf,
    /// A few tracked URLs from the first letter: (what, url).
    pub sample_urls: Vec<(String, String)>,
}

/// The seal key the demo builds with: its secret, and whether it is new
/// (made by this run: recorded as the current key).
#[derive(Debug, Clone, Copy, Default)]
pub struct DemoSeal<'a> {
    pub secret: Option<&'a str>,
    pub new_secret: bool,
}

/// Migrate, create partitions, load the suppression list, build the fixture
/// mailing into `dir/letters.jsonl`, its pictures at `image_base` if given
/// (`newsletter_for`).
pub async fn prepare(
    database_url: &str,
    base_url: &str,
    image_base: Option<&str>,
    dir: &Path,
    seal: DemoSeal<'_>,
) -> anyhow::Result<DemoOutcome> {
    let pool = store::migrate(database_url)
        .await
        .context("migrating DATABASE_URL")?;
    // What `linktrack migrate` gives new tables (page compression when the
    // server can punch holes).
    store::set_row_format(
        &pool,
        &store::RowFormatOptions::new(store::DEFAULT_ROW_FORMAT),
    )
    .await?;
    partitions::ensure_ahead(&pool, crate::store::partitions::DEFAULT_AHEAD_DAYS).await?;

    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let newsletter = newsletter_for(image_base);
    for (name, text) in [
        ("mailing.json", MAILING),
        ("newsletter.html", newsletter.as_str()),
        ("recipients.csv", RECIPIENTS),
    ] {
        std::fs::write(dir.join(name), text)
            .with_context(|| format!("writing {}", dir.join(name).display()))?;
    }
    let blocked: Vec<String> = SUPPRESSIONS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(crate::address::normalize)
        .collect();
    suppressions::add(&pool, &blocked, "demo").await?;

    let letters = dir.join("letters.jsonl");
    let options = BuildOptions {
        mailing: dir.join("mailing.json"),
        recipients: dir.join("recipients.csv"),
        out: Output::File(letters.clone()),
        rejects: dir.join("rejects.jsonl"),
        base_url: base_url.to_owned(),
        batch_size: 1000,
        workers: 2,
        id_block: 1000,
        progress: false,
        smtp: None,
        pools: None,
        return_path: None,
        delivery_log: None,
        bounce_domain: None,
        summary: None,
        max_letter_bytes: builder::DEFAULT_MAX_LETTER_BYTES,
        secret: seal.secret.map(str::to_owned),
        new_secret: seal.new_secret,
        columns: Vec::new(),
        letter_by_letter: false,
    };
    let summary = builder::run(&pool, &options).await?;
    let sample_urls = sample_urls(&letters, base_url)?;
    Ok(DemoOutcome {
        summary,
        letters,
        sample_urls,
    })
}

/// The demo's letters count as delivered from now, when it starts serving
/// them (its clicks are judged from this moment, not from the build), and
/// its verdicts allow a click [`DEMO_MIN_CLICK_DELAY`] after it.
pub async fn deliver_now(database_url: &str, outcome: &DemoOutcome) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&outcome.letters)?;
    let mut mailing_id = String::new();
    let mut letter_ids = Vec::new();
    for line in text.lines() {
        let letter: serde_json::Value = serde_json::from_str(line)?;
        if let (Some(id), Some(mailing)) =
            (letter["letter_id"].as_u64(), letter["mailing_id"].as_str())
        {
            letter_ids.push(id);
            mailing_id = mailing.to_owned();
        }
    }
    if letter_ids.is_empty() {
        return Ok(());
    }
    let mailing_id = MailingId::parse(&mailing_id)?;
    let pool = store::connect(database_url, &store::PoolSettings::default()).await?;
    let reply = "demo: delivered when the demo began serving its links";
    store::deliveries::mark_delivered_now(&pool, &mailing_id, &letter_ids, reply).await?;
    pool.close().await;
    Ok(())
}

/// How soon after the demo starts serving a click may come and still be a
/// person's: the person reads the printed links first. A real mailing
/// allows 10 s after delivery (docs/serve.md, "Bot verdicts").
pub const DEMO_MIN_CLICK_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// The tracked URLs of the first letter, labelled.
fn sample_urls(letters: &Path, base_url: &str) -> anyhow::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(letters)?;
    let Some(first) = text.lines().next() else {
        return Ok(Vec::new());
    };
    let letter: serde_json::Value = serde_json::from_str(first)?;
    let html = letter["html"].as_str().unwrap_or_default();
    let email = letter["email"].as_str().unwrap_or_default();
    let base = base_url.trim_end_matches('/');
    let mut urls = Vec::new();
    for (prefix, kind, label) in [
        ("/c/", LinkKind::Click, "a click"),
        ("/o/", LinkKind::Pixel, "the open pixel"),
        ("/i/", LinkKind::Image, "a proxied image"),
        ("/u/", LinkKind::Unsubscribe, "unsubscribe"),
    ] {
        let needle = format!("{base}{prefix}");
        let Some(at) = html.find(&needle) else {
            continue;
        };
        let start = at + needle.len();
        let Some(hex) = html.get(start..start + 32) else {
            continue;
        };
        if let Ok(token) = Token::parse(hex) {
            urls.push((
                format!("{label} in {email}'s letter"),
                tracked_url(base, kind, &token),
            ));
        }
    }
    Ok(urls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_newsletter_points_every_picture_at_the_stand_in_cdn() {
        assert_eq!(newsletter_for(None), NEWSLETTER);
        let html = newsletter_for(Some("http://127.0.0.1:8080/"));
        assert!(!html.contains("cdn.example.com"), "{html}");
        for (name, bytes) in IMAGES {
            assert!(
                html.contains(&format!("src=\"http://127.0.0.1:8080/demo/{name}\"")),
                "{name}"
            );
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is a PNG");
        }
        assert_eq!(image("logo.png").map(<[u8]>::len), Some(IMAGES[0].1.len()));
        assert_eq!(image("../mailing.json"), None);
    }
}
