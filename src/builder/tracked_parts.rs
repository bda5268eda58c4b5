//! A letter composed elsewhere, tracked as `build` tracks its own: the
//! HTML parts of a message another platform made (`linktrack relay`)
//! rewritten with one letter's tokens by the same rewriter and rules
//! (links, images, the link-text rule, `data-linktrack="off"`, the
//! honeypot and the pixel before `</body>`), with the letter's unsubscribe
//! link and headers, its VERP envelope sender, and the rows to store,
//! which are stored as `build` stores a batch's (the mailing's letter
//! counts in the same transaction).

use super::compose::{fixed_links, letter_link_url};
use super::error::BuildError;
use super::letter_shape::tail_html;
use super::letter_tokens::{ImageTokens, LetterTokens};
use super::mailing_context::MailingContext;
use super::reject::{Cause, Reject};
use super::row_writer::store_rows;
use super::track_mode::TrackMode;
use crate::letter::{rewrite, short_letter, FoundKind, FoundLink};
use crate::store::link_templates::TemplateKey;
use crate::store::links::{LinkKind, NewLink};
use chrono::{DateTime, Utc};
use serde_json::Map;
use std::collections::BTreeMap;

/// One letter's tracked HTML parts and what goes with them.
#[derive(Debug)]
pub(crate) struct TrackedParts {
    /// The HTML parts, rewritten, in the order given.
    pub html_parts: Vec<String>,
    /// `List-Unsubscribe` and `List-Unsubscribe-Post`.
    pub headers: BTreeMap<String, String>,
    /// `bounces+{token}@{domain}` when the context has a bounce domain.
    pub envelope_from: Option<String>,
    /// The letter's rows (its unsubscribe row in every mode).
    pub rows: Vec<NewLink>,
    /// Each tracked click link, as written and as tracked, in document
    /// order: what a plain text part's copies of the links become.
    pub links: Vec<(String, String)>,
}

/// Track `html_parts` as one letter `letter_id` to `email` in `mode`. Every
/// part gets the letter's tail (pixel, honeypot) before its `</body>`.
pub(crate) fn track_parts(
    ctx: &MailingContext,
    images: &ImageTokens,
    email: &str,
    letter_id: u64,
    mode: TrackMode,
    made_at: DateTime<Utc>,
    html_parts: &[&str],
) -> Result<TrackedParts, Reject> {
    let mut tokens = LetterTokens {
        ctx,
        stored: None,
        made_at,
        rows: Vec::new(),
        mismatch: None,
        letter_id,
        mailing_id: ctx.mailing.mailing_id.as_str(),
        email,
    };
    // No personalisation: the fields the builder would fill in are unused.
    let mut unused = Map::new();
    let fixed = fixed_links(ctx, &mut tokens, images, mode, &mut unused);
    let shape = ctx.shape(mode);
    let tail = tail_html(shape, &fixed.tail_urls);
    let mut rewritten = Vec::with_capacity(html_parts.len());
    let mut links = Vec::new();
    for html in html_parts {
        if !shape.rewritten {
            rewritten.push((*html).to_owned());
            continue;
        }
        let mut link_url = |found: &FoundLink| {
            let url = letter_link_url(ctx, &mut tokens, images, mode, found);
            if found.kind == FoundKind::Click {
                links.push((found.url.clone(), url.clone()));
            }
            url
        };
        let mut part = rewrite(html, &ctx.rewrite_options(shape, &tail), &mut link_url)
            .map_err(|e| Reject::Rewrite(Cause::new(e)))?;
        if ctx.mailing.filter_safe {
            short_letter::pad_past_image_only_sizes(&mut part);
        }
        rewritten.push(part);
    }
    // The letter's own list fields only: the message keeps its From.
    let mut headers = fixed.headers;
    headers.retain(|name, _| name.starts_with("List-"));
    Ok(TrackedParts {
        html_parts: rewritten,
        headers,
        envelope_from: ctx.bounce_address(letter_id, fixed.sent_at),
        rows: tokens.rows,
        links,
    })
}

/// The link templates every letter of a mailing has whatever its HTML
/// (the pixel and the unsubscribe link): a bounce token names its mailing
/// through the unsubscribe one.
pub(crate) fn fixed_template_keys() -> Vec<TemplateKey> {
    [LinkKind::Pixel, LinkKind::Unsubscribe]
        .map(|kind| TemplateKey {
            kind,
            position: 0,
            url: String::new(),
        })
        .to_vec()
}

/// Store letters' rows as `build` stores a batch's part: one transaction
/// (all or nothing: the caller's letters are not resumed), the mailing's
/// letter counts (by mode) in it, today's partitions made when missing.
pub(crate) async fn store_letter_rows(
    pool: &sqlx::MySqlPool,
    rows: &[NewLink],
) -> Result<(), BuildError> {
    store_rows(pool, rows, 1).await
}

/// The base URL of a sender's tracked links: its tracking domain when it
/// has one, else `base_url` (as `build` finds it).
pub(crate) async fn tracking_base_for(
    pool: &sqlx::MySqlPool,
    base_url: &str,
    from: &str,
) -> Result<String, BuildError> {
    super::mailing_setup::tracking_base(pool, base_url, from).await
}

/// The sender a mailing's links belong to: the lowercase domain of its
/// `from` (as `build` saves it).
pub(crate) fn sender_domain(from: &str) -> Option<String> {
    super::mailing_setup::from_domain(from)
}
