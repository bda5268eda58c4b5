//! Composing one letter (`build::compose`; the HTML work itself is in
//! [`crate::letter`]): its tokens, personalisation, link rewriting,
//! headers, the message. Pure CPU work with no database access, so batches
//! build on every core. What it starts from is in `mailing_context.rs`, the
//! tokens in `letter_tokens.rs`, the parts before `</body>` in
//! `letter_shape.rs`.

use super::letter_shape::{tail_html, LetterShape, TAIL_FOOTER, TAIL_HONEYPOT, TAIL_PIXEL};
use super::letter_tokens::{ImageTokens, LetterTokens, StoredTokens};
use super::mailing::Mailing;
use super::mailing_context::{MailingContext, STOP_TRACKING_VARIABLE};
use super::recipient_fields::Recipient;
use super::reject::{Cause, Reject};
use super::track_mode::TrackMode;
// Also named from here by `demo.rs`.
pub(crate) use super::tracked_urls::tracked_url;
use crate::address::Email;
use crate::delivery::body::EncodedBody;
use crate::delivery::message;
use crate::letter::{rewrite, short_letter, FoundKind, FoundLink};
use crate::store::links::{self, LinkKind, NewLink};
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// One built letter, as written to the output (one JSON line).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Letter {
    pub letter_id: u64,
    pub mailing_id: String,
    pub email: Email,
    pub pool: String,
    pub subject: String,
    pub headers: BTreeMap<String, String>,
    pub html: String,
    /// `<letter.mailing@from-domain>`, the same on every run.
    pub message_id: String,
    /// The letter's own envelope sender, `bounces+{token}@{bounce domain}`
    /// (VERP, docs/bounces.md), when the build has `--bounce-domain`: the
    /// SMTP hand-off's `MAIL FROM` and the message's `Return-Path`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub envelope_from: Option<String>,
    /// The complete RFC 5322 message (CRLF): headers, text and HTML parts.
    pub message: String,
    /// The recipient's line in the recipients file (for the rejects file).
    #[serde(skip)]
    pub line: u64,
    /// The mode the letter was built in (the build's per-mode counts).
    #[serde(skip)]
    pub track: TrackMode,
}

/// A letter and the link rows it needs stored before it may be written.
pub(crate) struct Built {
    pub letter: Letter,
    pub new_links: Vec<NewLink>,
    /// The merge fields of the recipient's row that were empty when the
    /// letter printed an empty value (none: it printed none).
    pub empty_fields: Vec<String>,
}

/// Build one letter in tracking mode `mode` (see [`letter_mode`]). `Err`
/// is the reason the recipient is rejected.
pub(crate) fn build_letter(
    ctx: &MailingContext,
    recipient: &Recipient,
    letter_id: u64,
    stored: Option<&StoredTokens>,
    images: &ImageTokens,
    made_at: DateTime<Utc>,
    mode: TrackMode,
) -> Result<Built, Reject> {
    let mut tokens = LetterTokens {
        ctx,
        stored,
        made_at,
        rows: Vec::new(),
        mismatch: None,
        letter_id,
        mailing_id: ctx.mailing.mailing_id.as_str(),
        email: recipient.email.as_str(),
    };
    let mut context = recipient.fields.clone();
    let fixed = fixed_links(ctx, &mut tokens, images, mode, &mut context);
    let mut link_url = |found: &FoundLink| letter_link_url(ctx, &mut tokens, images, mode, found);
    let shape = ctx.shape(mode);
    let (content, empty_values) = crate::letter::count_empty_values(|| {
        letter_content(ctx, shape, &context, &fixed.tail_urls, &mut link_url)
    });
    let mut content = content?;
    let empty_fields = if empty_values > 0 {
        empty_merge_fields(ctx, &recipient.fields)
    } else {
        Vec::new()
    };
    if shape.rewritten
        && ctx.mailing.filter_safe
        && short_letter::pad_past_image_only_sizes(&mut content.html) > 0
    {
        // After the text part is made: spaces change nothing it shows.
        // The HTML's body is then encoded from the padded HTML.
        content.html_body = None;
    }
    if let Some(mismatch) = tokens.mismatch {
        return Err(mismatch);
    }
    let letter = assemble(ctx, recipient, letter_id, mode, fixed, content)?;
    Ok(Built {
        letter,
        new_links: tokens.rows,
        empty_fields,
    })
}

/// The fields the mailing's templates use that are empty (blank or `null`)
/// in the recipient's row.
fn empty_merge_fields(ctx: &MailingContext, fields: &Map<String, Value>) -> Vec<String> {
    let used: std::collections::BTreeSet<String> = [&ctx.html, &ctx.subject]
        .into_iter()
        .flatten()
        .flat_map(|template| template.variables())
        .collect();
    used.into_iter()
        .filter(|name| match fields.get(name) {
            Some(Value::Null) => true,
            Some(Value::String(text)) => text.trim().is_empty(),
            _ => false,
        })
        .collect()
}

/// The tracked URL of a link or image the rewriter found in a letter in
/// `mode`: the letter's own token, or the mailing's shared one (images,
/// and every link of an anonymous letter).
pub(super) fn letter_link_url(
    ctx: &MailingContext,
    tokens: &mut LetterTokens<'_>,
    images: &ImageTokens,
    mode: TrackMode,
    found: &FoundLink,
) -> String {
    let made_at = tokens.made_at;
    match found.kind {
        FoundKind::Click => {
            let meta = link_meta(found.tag.as_deref(), &ctx.mailing.tags);
            let (position, url) = (found.position, found.url.as_str());
            let token = if mode == TrackMode::Anonymous {
                images.shared_token(ctx, LinkKind::Click, position, url, meta, made_at)
            } else {
                tokens.token(LinkKind::Click, position, url, meta)
            };
            tracked_url(&ctx.base_url, LinkKind::Click, &token)
        }
        FoundKind::Image => {
            let token = images.token_for(ctx, &found.url, made_at);
            tracked_url(&ctx.base_url, LinkKind::Image, &token)
        }
    }
}

/// The letter's own links, minted before its content's (the order a
/// resumed run relies on): the unsubscribe link and its headers, the
/// stop-tracking link, the honeypot and the pixel, as the shape has them.
pub(super) struct FixedLinks {
    pub(super) headers: BTreeMap<String, String>,
    /// The message's Date: the unsubscribe token's time.
    pub(super) sent_at: DateTime<Utc>,
    /// The tail's URLs, by `TAIL_FOOTER`, `TAIL_HONEYPOT`, `TAIL_PIXEL`.
    pub(super) tail_urls: [String; 3],
}

pub(super) fn fixed_links(
    ctx: &MailingContext,
    tokens: &mut LetterTokens<'_>,
    images: &ImageTokens,
    mode: TrackMode,
    context: &mut Map<String, Value>,
) -> FixedLinks {
    let mut headers = BTreeMap::from([("From".to_owned(), ctx.mailing.from.clone())]);
    // The message's Date is the unsubscribe token's time (below), which a
    // resumed run reuses, so a re-run writes the same message bytes.
    // Every mode has the unsubscribe link and header (unsubscribing is not
    // tracking). Its row is the letter's one row in every mode: it carries
    // the letter's mode (the build's per-mode counts) and its token's time
    // is the message's Date (the pixel's was, made at the same moment).
    let unsubscribe = tokens.token(
        LinkKind::Unsubscribe,
        0,
        "",
        Some(json!({ "track": mode.as_str() })),
    );
    let sent_at = unsubscribe.created_at();
    let unsubscribe_url = tracked_url(&ctx.base_url, LinkKind::Unsubscribe, &unsubscribe);
    headers.insert("List-Unsubscribe".into(), format!("<{unsubscribe_url}>"));
    headers.insert(
        "List-Unsubscribe-Post".into(),
        "List-Unsubscribe=One-Click".into(),
    );
    context.insert("unsubscribe_url".into(), Value::String(unsubscribe_url));
    let shape = ctx.shape(mode);
    let mut tail_urls: [String; 3] = Default::default();
    if ctx.offers_stop_tracking(mode) {
        let stop = tokens.token(LinkKind::OptOut, 0, "", None);
        let stop_url = tracked_url(&ctx.base_url, LinkKind::OptOut, &stop);
        context.insert(
            STOP_TRACKING_VARIABLE.into(),
            Value::String(stop_url.clone()),
        );
        tail_urls[TAIL_FOOTER] = stop_url;
    }
    // The honeypot link catches link scanners: only where links are tracked,
    // and never in anonymous letters (its row would name the reader).
    if shape.honeypot {
        let honeypot = tokens.token(LinkKind::Honeypot, 0, "", None);
        tail_urls[TAIL_HONEYPOT] = tracked_url(&ctx.base_url, LinkKind::Honeypot, &honeypot);
    }
    if shape.pixel {
        let pixel = match mode {
            TrackMode::Anonymous => {
                images.shared_token(ctx, LinkKind::Pixel, 0, "", None, tokens.made_at)
            }
            // Its row's URL says what its opens keep: the day only.
            TrackMode::LastOpenDay => {
                tokens.token(LinkKind::Pixel, 0, links::LAST_OPEN_DAY_PIXEL, None)
            }
            _ => tokens.token(LinkKind::Pixel, 0, "", None),
        };
        tail_urls[TAIL_PIXEL] = tracked_url(&ctx.base_url, LinkKind::Pixel, &pixel);
    }
    context.insert(
        "mailing_id".into(),
        Value::String(ctx.mailing.mailing_id.as_str().to_owned()),
    );
    FixedLinks {
        headers,
        sent_at,
        tail_urls,
    }
}

/// A letter's personalised, rewritten content.
struct LetterContent {
    html: String,
    text: String,
    subject: String,
    /// The HTML and text parts' bodies encoded from the plan; `None`:
    /// encoded from `html` and `text` when the message is built.
    html_body: Option<EncodedBody>,
    text_body: Option<EncodedBody>,
}

/// Personalise and rewrite: from the mailing's compiled plan when it has
/// one for this shape and these values, else letter by letter (render,
/// rewrite, derive the text part). Both make the same bytes.
fn letter_content(
    ctx: &MailingContext,
    shape: LetterShape,
    context: &Map<String, Value>,
    tail_urls: &[String; 3],
    link_url: &mut impl FnMut(&FoundLink) -> String,
) -> Result<LetterContent, Reject> {
    let planned = ctx
        .plan(shape)
        .and_then(|planned| planned.plan.values(context).map(|values| (planned, values)));
    if let Some((planned, values)) = planned {
        let plan = &planned.plan;
        // The old path checks the personalised HTML before rewriting it.
        let subject = render_subject(ctx, context)?;
        check_personalised(
            plan.personalised_len(&values),
            &subject,
            ctx.max_letter_bytes,
        )?;
        let link_urls: Vec<String> = plan.links().iter().map(link_url).collect();
        let filled = plan.fill(&values, &link_urls, tail_urls);
        return Ok(LetterContent {
            html_body: planned.html_body.encode(&filled.html_chunks),
            text_body: planned.text_body.encode(&filled.text_chunks),
            html: filled.html,
            text: filled.text,
            subject,
        });
    }
    let html = match &ctx.html {
        Some(template) => template
            .render(context)
            .map_err(|e| Reject::PersonaliseLetter(Cause::new(e)))?,
        None => ctx.mailing.html.clone(),
    };
    let subject = render_subject(ctx, context)?;
    check_personalised(html.len(), &subject, ctx.max_letter_bytes)?;
    let tail = tail_html(shape, tail_urls);
    let html = if shape.rewritten {
        rewrite(&html, &ctx.rewrite_options(shape, &tail), link_url)
            .map_err(|e| Reject::Rewrite(Cause::new(e)))?
    } else {
        html
    };
    let text = message::text_part(&html);
    Ok(LetterContent {
        html,
        text,
        subject,
        html_body: None,
        text_body: None,
    })
}

/// The letter as a complete message, and the record of it.
fn assemble(
    ctx: &MailingContext,
    recipient: &Recipient,
    letter_id: u64,
    mode: TrackMode,
    fixed: FixedLinks,
    content: LetterContent,
) -> Result<Letter, Reject> {
    let mailing = &ctx.mailing;
    let to_name = recipient
        .fields
        .get("name")
        .and_then(Value::as_str)
        .filter(|name| !name.trim().is_empty());
    let envelope_from = ctx.bounce_address(letter_id, fixed.sent_at);
    let letter_token = ctx.letter_token(letter_id, fixed.sent_at).to_string();
    let built = message::build(message::MessageParts {
        letter_id,
        mailing_id: mailing.mailing_id.as_str(),
        pool: &mailing.pool,
        from: &mailing.from,
        to_email: recipient.email.as_str(),
        to_name,
        reply_to: None,
        return_path: envelope_from.as_deref(),
        letter_token: Some(&letter_token),
        subject: &content.subject,
        html: &content.html,
        text: &content.text,
        html_body: content.html_body,
        text_body: content.text_body,
        list_headers: &fixed.headers,
        date: fixed.sent_at.into(),
    })
    .map_err(|e| Reject::Message(Cause::new(e)))?;
    Ok(Letter {
        letter_id,
        mailing_id: mailing.mailing_id.as_str().to_owned(),
        email: recipient.email.clone(),
        pool: mailing.pool.clone(),
        subject: content.subject,
        headers: fixed.headers,
        html: content.html,
        message_id: built.message_id,
        envelope_from,
        message: built.message,
        line: recipient.line,
        track: mode,
    })
}

fn render_subject(ctx: &MailingContext, context: &Map<String, Value>) -> Result<String, Reject> {
    match &ctx.subject {
        Some(subject) => subject
            .render(context)
            .map_err(|e| Reject::PersonaliseSubject(Cause::new(e))),
        None => Ok(ctx.mailing.subject.clone()),
    }
}

/// A personalised letter (`size`: its HTML's bytes before rewriting) must
/// still fit the size limit, and its subject (a header) must hold no
/// control character a field brought in.
fn check_personalised(size: usize, subject: &str, limit: usize) -> Result<(), Reject> {
    if size > limit {
        return Err(Reject::TooBig { size, limit });
    }
    match subject.chars().find(|c| c.is_control()) {
        Some(found) => Err(Reject::ControlCharacter {
            field: "subject (after personalising)".into(),
            found,
        }),
        None => Ok(()),
    }
}

/// The mode a letter is built in: none when the recipient withdrew from
/// tracking (`tracking_optouts`), else the recipient's `linktrack_track`
/// column when it has one (checked when the line was read), else the
/// mailing's `track`.
pub(crate) fn letter_mode(mailing: &Mailing, recipient: &Recipient, opted_out: bool) -> TrackMode {
    if opted_out {
        return TrackMode::None;
    }
    super::track_mode::recipient_mode(&recipient.fields)
        .ok()
        .flatten()
        .unwrap_or(mailing.track)
}

/// The letter's mode as stored in its unsubscribe row's `meta` (see
/// [`build_letter`]); `None` for rows stored before modes existed.
pub(crate) fn stored_mode(meta: Option<&Value>) -> Option<TrackMode> {
    let name = meta?.get("track")?.as_str()?;
    TrackMode::parse(name).ok()
}

/// The link's own tag and the mailing's tags, for segments and statistics.
fn link_meta(tag: Option<&str>, mailing_tags: &[String]) -> Option<Value> {
    let mut tags: Vec<&str> = tag.into_iter().collect();
    tags.extend(mailing_tags.iter().map(String::as_str));
    (!tags.is_empty()).then(|| json!({ "tags": tags }))
}

#[cfg(test)]
#[path = "compose_plan_tests.rs"]
mod plan_tests;
