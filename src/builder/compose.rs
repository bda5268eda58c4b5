//! Composing one letter (`build::compose`; the HTML work itself is in
//! [`crate::letter`]): tokens, personalisation, link rewriting, headers.
//! Pure CPU work with no database access, so batches build on every core.

use super::mailing::Mailing;
use super::recipients::Recipient;
use super::reject::Reject;
use super::track_mode::TrackMode;
use crate::address::Email;
use crate::delivery::body::{BodyPlan, EncodedBody};
use crate::delivery::message;
use crate::letter::plan::{Plan, PlanSource, Slot, Unplannable};
use crate::letter::{rewrite, short_letter, FoundKind, FoundLink, RewriteOptions, Template};
use crate::store::link_templates::TemplateKey;
use crate::store::links::{self, LinkKind, NewLink};
use crate::token::{Plaintext, Token, TokenSeal};
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

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

/// Everything shared by the letters of one mailing, prepared once.
pub(crate) struct MailingContext {
    pub mailing: Mailing,
    pub base_url: String,
    /// The most bytes a letter's HTML may have, after personalising.
    pub max_letter_bytes: usize,
    html: Option<Template>,
    subject: Option<Template>,
    /// The creative places `{{ stop_tracking_url }}`.
    uses_stop_tracking: bool,
    /// Seals every token the letters get (docs/token.md).
    seal: TokenSeal,
    /// The mailing's link templates: (kind, position) -> URL -> id.
    templates: HashMap<(LinkKind, u32), HashMap<String, u32>>,
    /// The letters of each shape compiled once (`letter::plan`); `Err`:
    /// built one by one, for the reason given.
    plans: Vec<(LetterShape, Result<Planned, Unplannable>)>,
    /// `--bounce-domain`: each letter's envelope sender is a VERP address
    /// there.
    bounce_domain: Option<String>,
}

/// A shape's plan, and its MIME parts' fixed text encoded once
/// (`delivery::body`).
pub(crate) struct Planned {
    plan: Plan,
    html_body: BodyPlan,
    text_body: BodyPlan,
}

/// What decides a letter's structure besides its values: which tracking
/// steps run and which parts go before `</body>`. One plan per shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LetterShape {
    rewritten: bool,
    links: bool,
    /// Images through the proxy (not in `last_open_day` letters).
    images: bool,
    honeypot: bool,
    footer: bool,
    pixel: bool,
}

/// The slots of the tail before `</body>`, in this order.
const TAIL_HONEYPOT: usize = 0;
const TAIL_FOOTER: usize = 1;
const TAIL_PIXEL: usize = 2;

/// Why a mailing cannot be built at all (reported before any letter).
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(
        "the letter's HTML is {size} bytes, over the limit of {limit}; nothing was built \
         (raise it with --max-letter-bytes)"
    )]
    TooBig { size: usize, limit: usize },
    #[error("mailing {field}: {message}")]
    Template {
        field: &'static str,
        message: String,
    },
}

impl MailingContext {
    /// Compile the templates once; a creative that is not a valid template
    /// (say, another engine's `{{#each}}`) is refused here with its line.
    pub(crate) fn prepare(
        mailing: Mailing,
        base_url: &str,
        max_letter_bytes: usize,
        seal: TokenSeal,
    ) -> Result<MailingContext, PrepareError> {
        let base_url = base_url.trim_end_matches('/').to_owned();
        if mailing.html.len() > max_letter_bytes {
            return Err(PrepareError::TooBig {
                size: mailing.html.len(),
                limit: max_letter_bytes,
            });
        }
        let from_has_control = mailing.from.chars().any(char::is_control);
        if from_has_control || mailing.from.parse::<lettre::message::Mailbox>().is_err() {
            return Err(PrepareError::Template {
                field: "from",
                message: format!(
                    "{:?} is not an address (`Name <news@example.com>` or `news@example.com`)",
                    mailing.from
                ),
            });
        }
        let mut uses_stop_tracking = false;
        let (html, subject) = if mailing.personalize {
            let html = Template::compile("html", &mailing.html, true).map_err(|e| {
                PrepareError::Template {
                    field: "html",
                    message: e.to_string(),
                }
            })?;
            let subject = Template::compile("subject", &mailing.subject, false).map_err(|e| {
                PrepareError::Template {
                    field: "subject",
                    message: e.to_string(),
                }
            })?;
            uses_stop_tracking = html.variables().contains(STOP_TRACKING_VARIABLE);
            (Some(html), Some(subject))
        } else {
            (None, None)
        };
        let mut context = MailingContext {
            mailing,
            base_url,
            max_letter_bytes,
            html,
            subject,
            uses_stop_tracking,
            seal,
            templates: HashMap::new(),
            plans: Vec::new(),
            bounce_domain: None,
        };
        context.plans = context.compile_plans();
        Ok(context)
    }

    /// Give every letter its own envelope sender at `domain` (VERP).
    pub(crate) fn set_bounce_domain(&mut self, domain: Option<String>) {
        self.bounce_domain = domain;
    }

    /// The letter's VERP address, `bounces+{token}@{domain}`, its token a
    /// [`TokenKind::Bounce`](crate::kind::TokenKind::Bounce) sealed at the
    /// letter's Date with the mailing's unsubscribe template and the letter
    /// id: the same on a re-run (docs/bounces.md, "The bounce address").
    fn bounce_address(&self, letter_id: u64, sent_at: DateTime<Utc>) -> Option<String> {
        let domain = self.bounce_domain.as_deref()?;
        let template = self.template(LinkKind::Unsubscribe, 0, "");
        let token = self
            .seal
            .seal(sent_at, Plaintext::bounce(template, letter_id));
        Some(crate::token::bounce_address(&token, domain))
    }

    /// The key the letters' tokens are sealed with.
    pub(crate) fn seal(&self) -> &TokenSeal {
        &self.seal
    }

    /// The fields the creative reads from each recipient (the subject's
    /// and the HTML's variables but the ones the builder fills in), with
    /// where it reads them: a recipients header is checked against these
    /// before any letter is built.
    pub(crate) fn recipient_fields(&self) -> std::collections::BTreeMap<String, &'static str> {
        let mut fields = std::collections::BTreeMap::new();
        for (template, place) in [(&self.subject, "subject"), (&self.html, "html")] {
            for field in template.iter().flat_map(Template::variables) {
                if !super::columns::BUILDER_FIELDS.contains(&field.as_str()) {
                    fields.entry(field).or_insert(place);
                }
            }
        }
        fields
    }

    /// The shape of a letter in `mode`.
    fn shape(&self, mode: TrackMode) -> LetterShape {
        let offers_stop = self.offers_stop_tracking(mode);
        LetterShape {
            rewritten: mode.is_tracked(),
            links: mode.tracks_clicks(),
            images: mode.proxies_images(),
            honeypot: self.mailing.honeypot && mode.tracks_clicks() && mode != TrackMode::Anonymous,
            footer: offers_stop && mode.is_tracked() && self.mailing.stop_tracking_footer,
            pixel: mode.tracks_opens(),
        }
    }

    /// One plan per shape the mailing's letters can have; a mailing that
    /// cannot be planned is said once here, not per letter.
    fn compile_plans(&self) -> Vec<(LetterShape, Result<Planned, Unplannable>)> {
        let mut plans: Vec<(LetterShape, Result<Planned, Unplannable>)> = Vec::new();
        for mode in TrackMode::ALL {
            let shape = self.shape(mode);
            if plans.iter().any(|(known, _)| *known == shape) {
                continue;
            }
            let plan = self.compile_plan(shape).map(|plan| Planned {
                html_body: BodyPlan::compile(plan.html_fixed()),
                text_body: BodyPlan::compile(plan.text_fixed()),
                plan,
            });
            // Most reasons (the template, a field in a tag) hold for every
            // shape: each is said once.
            let said_before = |why: &Unplannable| {
                plans
                    .iter()
                    .any(|(_, earlier)| earlier.as_ref().err() == Some(why))
            };
            if let Some(why) = plan.as_ref().err().filter(|why| !said_before(why)) {
                tracing::info!(
                    mailing = %self.mailing.mailing_id,
                    mode = mode.as_str(),
                    "letters are personalised and rewritten one by one: {why}"
                );
            }
            plans.push((shape, plan));
        }
        plans
    }

    fn compile_plan(&self, shape: LetterShape) -> Result<Plan, Unplannable> {
        let tail = tail_html(shape, &[0, 1, 2].map(|i| Slot::Tail(i).sentinel()));
        let prefixes = [
            ("unsubscribe_url", self.url_prefix(LinkKind::Unsubscribe)),
            (STOP_TRACKING_VARIABLE, self.url_prefix(LinkKind::OptOut)),
        ];
        let source = PlanSource {
            template: self.html.as_ref(),
            html: &self.mailing.html,
            prefixes: &prefixes,
            options: self.rewrite_options(shape, &tail),
            text_part: message::text_unwrapped,
            wrap: message::wrap_text,
        };
        Plan::compile(&source)
    }

    /// What every URL of this kind starts with (before its token).
    fn url_prefix(&self, kind: LinkKind) -> String {
        tracked_url_of(&self.base_url, kind, "")
    }

    fn rewrite_options<'a>(&'a self, shape: LetterShape, tail_html: &'a str) -> RewriteOptions<'a> {
        RewriteOptions {
            track_links: shape.rewritten && shape.links,
            proxy_images: shape.rewritten && shape.images && self.mailing.proxy_images,
            own_base_url: &self.base_url,
            pixel_html: (shape.rewritten && !tail_html.is_empty()).then_some(tail_html),
            shown_address_base: self.shown_address_base(),
        }
    }

    /// The tracking base the link-text rule compares link texts with, when
    /// the mailing has the rule on.
    fn shown_address_base(&self) -> Option<&str> {
        self.mailing.filter_safe.then_some(self.base_url.as_str())
    }

    /// The click positions of the creative that the link-text rule leaves
    /// as written, for the build's summary (counted on the creative as
    /// written: a reader's field in a link's text is not).
    pub(crate) fn positions_left_as_written(&self) -> Vec<u32> {
        let options = RewriteOptions {
            track_links: true,
            proxy_images: false,
            own_base_url: &self.base_url,
            pixel_html: None,
            shown_address_base: self.shown_address_base(),
        };
        crate::letter::positions_left_as_written(&self.mailing.html, &options).unwrap_or_default()
    }

    /// The plan of `shape` as compiled, or why there is none.
    fn compiled(&self, shape: LetterShape) -> Option<&Result<Planned, Unplannable>> {
        self.plans
            .iter()
            .find(|(known, _)| *known == shape)
            .map(|(_, plan)| plan)
    }

    fn plan(&self, shape: LetterShape) -> Option<&Planned> {
        self.compiled(shape)?.as_ref().ok()
    }

    /// Whether the letters of `mode` are filled in from a plan (for tests
    /// and the benchmark).
    pub(crate) fn is_planned(&self, mode: TrackMode) -> bool {
        self.plan(self.shape(mode)).is_some()
    }

    /// Why letters of `mode` are not planned (`None`: they are).
    pub(crate) fn plan_reason(&self, mode: TrackMode) -> Option<String> {
        let why = self.compiled(self.shape(mode))?.as_ref().err()?;
        Some(why.to_string())
    }

    /// Build every letter the old way, personalised and rewritten one by
    /// one (the reference the plans are checked against, and the benchmark's
    /// baseline).
    pub(crate) fn without_plans(mut self) -> Self {
        self.plans.clear();
        self
    }

    /// A letter in `mode` gets a "stop tracking me" link: where the creative
    /// places it (in any mode: the link must lead somewhere, and the choice
    /// holds for later mailings), or in the footer of a tracked letter.
    fn offers_stop_tracking(&self, mode: TrackMode) -> bool {
        self.uses_stop_tracking || (self.mailing.stop_tracking_footer && mode.is_tracked())
    }

    /// The links every letter of the mailing shares, to store as link
    /// templates before the letters are built: the pixel, the unsubscribe
    /// link, and each link and image of the creative whose URL is the same
    /// in every letter. In a personalised creative that is a URL written
    /// out in the source (no `{{ }}` or `{% %}` in it): a URL made from the
    /// reader's fields is never stored beyond its rows' retention, so it
    /// gets no template (docs/token.md, "Which links get a template").
    pub(crate) fn template_keys(&self) -> Vec<TemplateKey> {
        let mut keys = vec![
            TemplateKey {
                kind: LinkKind::Pixel,
                position: 0,
                url: String::new(),
            },
            TemplateKey {
                kind: LinkKind::Unsubscribe,
                position: 0,
                url: String::new(),
            },
        ];
        let options = RewriteOptions {
            track_links: true,
            proxy_images: self.mailing.proxy_images,
            own_base_url: &self.base_url,
            pixel_html: None,
            shown_address_base: None,
        };
        let _ = rewrite(&self.mailing.html, &options, |found: &FoundLink| {
            let personal = found.url.contains("{{") || found.url.contains("{%");
            if !personal {
                let (kind, position) = match found.kind {
                    FoundKind::Click => (LinkKind::Click, found.position),
                    FoundKind::Image => (LinkKind::Image, 0),
                };
                keys.push(TemplateKey {
                    kind,
                    position,
                    url: found.url.clone(),
                });
            }
            String::new()
        });
        keys.sort_by(|a, b| (a.kind, a.position, &a.url).cmp(&(b.kind, b.position, &b.url)));
        keys.dedup();
        keys
    }

    /// The ids [`Self::template_keys`] were stored under.
    pub(crate) fn set_templates(&mut self, ids: HashMap<TemplateKey, u32>) {
        self.templates.clear();
        for (key, id) in ids {
            self.templates
                .entry((key.kind, key.position))
                .or_default()
                .insert(key.url, id);
        }
    }

    /// The template of a link; 0 (none) for a URL not in the creative's
    /// source, such as a personalised one.
    fn template(&self, kind: LinkKind, position: u32, url: &str) -> u32 {
        self.templates
            .get(&(kind, position))
            .and_then(|urls| urls.get(url))
            .copied()
            .unwrap_or(0)
    }

    /// A fresh sealed token for a letter's link.
    fn issue(
        &self,
        kind: LinkKind,
        position: u32,
        url: &str,
        letter_id: u64,
        at: DateTime<Utc>,
    ) -> Token {
        let template = self.template(kind, position, url);
        let plain = Plaintext::issue(kind.into(), template, letter_id);
        self.seal.seal(at, plain)
    }
}

/// Whether `domain` can follow `bounces+{token}@` in an SMTP envelope:
/// `Err` says why not (`--bounce-domain` is checked before any letter).
pub(crate) fn check_bounce_domain(domain: &str) -> Result<(), String> {
    let sample = crate::token::bounce_address(&Token::from_parts(0, [0; 10]), domain);
    match sample.parse::<lettre::Address>() {
        Ok(_) if !domain.contains(['<', '>', ' ']) => Ok(()),
        _ => Err(format!(
            "{domain:?} is not a mail domain (bounces+TOKEN@{domain} is no address)"
        )),
    }
}

/// The template variable holding the letter's "stop tracking me" URL.
pub(crate) const STOP_TRACKING_VARIABLE: &str = "stop_tracking_url";

/// The optional footer (`stop_tracking_footer`): one short line before
/// `</body>`, its link ours, so never rewritten.
fn stop_tracking_footer(url: &str) -> String {
    format!(
        r#"<p style="font-size:12px;line-height:16px;color:#666666;text-align:center">Prefer not to have opens and clicks of these emails recorded? <a href="{url}" style="color:#666666">Stop tracking me</a></p>"#
    )
}

/// The tracked URL of a token (the URL contract: `/c/`, `/i/`, `/o/….gif`, `/u/`, `/t/`).
pub(crate) fn tracked_url(base_url: &str, kind: LinkKind, token: &Token) -> String {
    tracked_url_of(base_url, kind, &token.to_string())
}

fn tracked_url_of(base_url: &str, kind: LinkKind, token: &str) -> String {
    let base = base_url.trim_end_matches('/');
    match kind {
        LinkKind::Click | LinkKind::Honeypot => format!("{base}/c/{token}"),
        LinkKind::Image => format!("{base}/i/{token}"),
        LinkKind::Pixel => format!("{base}/o/{token}.gif"),
        LinkKind::Unsubscribe => format!("{base}/u/{token}"),
        LinkKind::OptOut => format!("{base}/t/{token}"),
    }
}

/// What goes before `</body>`: the honeypot, the opt-out footer, the pixel,
/// each where the shape has it, with `urls` in the `TAIL_*` slots.
fn tail_html(shape: LetterShape, urls: &[String; 3]) -> String {
    let mut tail = String::new();
    if shape.honeypot {
        tail.push_str(&honeypot_html(&urls[TAIL_HONEYPOT]));
    }
    if shape.footer {
        tail.push_str(&stop_tracking_footer(&urls[TAIL_FOOTER]));
    }
    if shape.pixel {
        tail.push_str(&pixel_html(&urls[TAIL_PIXEL]));
    }
    tail
}

fn pixel_html(url: &str) -> String {
    format!(
        r#"<img src="{url}" width="1" height="1" alt="" style="display:block;border:0;width:1px;height:1px" />{}"#,
        unlisted_link(url)
    )
}

/// The honeypot link: an `<area>` outside any `<map>`, which no browser
/// draws, no keyboard reaches and no accessibility tree holds, and which
/// text browsers (`lynx -dump`, `w3m -dump`) do not list, unlike an
/// `<a>` however hidden (checked in `tests/it/filters.rs`); a scanner that
/// walks the letter's hrefs follows it. It points to linktrack itself
/// (`/c/`, served as a honeypot), never to the sender's site; the text part
/// leaves it out.
fn honeypot_html(url: &str) -> String {
    unlisted_link(url)
}

/// An `href` no reader sees or follows (see [`honeypot_html`]). Beside the
/// pixel it gives the pixel's URL a twin, so the letter's count of URLs
/// keeps its parity (rspamd's `URI_COUNT_ODD` counts an `<img>` but not a
/// lone `<area>`; docs/domains.md).
fn unlisted_link(url: &str) -> String {
    format!(
        r#"<area href="{url}" aria-hidden="true" tabindex="-1" alt="" style="display:none;mso-hide:all" />"#
    )
}

/// Tokens a letter already has from an earlier, interrupted run.
#[derive(Debug, Default, Clone)]
pub(crate) struct StoredTokens {
    /// (kind, position) -> (token, url)
    pub by_position: HashMap<(LinkKind, u32), (Token, String)>,
}

/// Image tokens are shared by every letter of a mailing: one per distinct URL.
/// So are the click and pixel tokens of anonymous letters: one per (kind,
/// position, URL), letter 0 and no address, like an image's.
#[derive(Default)]
pub(crate) struct ImageTokens {
    inner: Mutex<ImageState>,
}

/// A shared row's key: kind, position (0 for images and the pixel), URL.
pub(crate) type SharedKey = (LinkKind, u32, String);

#[derive(Default)]
struct ImageState {
    known: HashMap<SharedKey, Token>,
    new_rows: Vec<NewLink>,
}

impl ImageTokens {
    pub(crate) fn with_known(known: HashMap<SharedKey, Token>) -> Self {
        ImageTokens {
            inner: Mutex::new(ImageState {
                known,
                new_rows: Vec::new(),
            }),
        }
    }

    fn token_for(&self, ctx: &MailingContext, url: &str, made_at: DateTime<Utc>) -> Token {
        self.shared_token(ctx, LinkKind::Image, 0, url, None, made_at)
    }

    /// The one token every letter of the mailing shares for this link
    /// (images; links and the pixel of anonymous letters).
    fn shared_token(
        &self,
        ctx: &MailingContext,
        kind: LinkKind,
        position: u32,
        url: &str,
        meta: Option<Value>,
        made_at: DateTime<Utc>,
    ) -> Token {
        // A poisoned lock only means another letter's build panicked; the map
        // itself is still consistent (inserts are single operations).
        let mut state = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let key = (kind, position, url.to_owned());
        if let Some(token) = state.known.get(&key) {
            return *token;
        }
        let token = ctx.issue(kind, position, url, 0, made_at);
        state.known.insert(key, token);
        state.new_rows.push(NewLink {
            token,
            kind,
            mailing_id: ctx.mailing.mailing_id.clone(),
            letter_id: 0,
            email: String::new(),
            position,
            url: url.to_owned(),
            meta,
        });
        token
    }

    /// Rows for image URLs first seen since the last call.
    pub(crate) fn take_new_rows(&self) -> Vec<NewLink> {
        let mut state = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut state.new_rows)
    }
}

/// A letter and the link rows it needs stored before it may be written.
pub(crate) struct Built {
    pub letter: Letter,
    pub new_links: Vec<NewLink>,
}

/// Hands out the letter's tokens: the stored one for a position when the
/// letter was built before, a fresh one otherwise, and checks that a resumed
/// letter still links where it did.
struct LetterTokens<'a> {
    ctx: &'a MailingContext,
    stored: Option<&'a StoredTokens>,
    made_at: DateTime<Utc>,
    rows: Vec<NewLink>,
    mismatch: Option<Reject>,
    letter_id: u64,
    mailing_id: &'a str,
    email: &'a str,
}

impl LetterTokens<'_> {
    fn token(&mut self, kind: LinkKind, position: u32, url: &str, meta: Option<Value>) -> Token {
        if let Some((token, stored_url)) = self
            .stored
            .and_then(|s| s.by_position.get(&(kind, position)))
        {
            if stored_url != url && self.mismatch.is_none() {
                self.mismatch = Some(Reject::ChangedContent {
                    kind,
                    position,
                    stored: stored_url.clone(),
                    now: url.to_owned(),
                });
            }
            return *token;
        }
        let token = self
            .ctx
            .issue(kind, position, url, self.letter_id, self.made_at);
        self.rows.push(NewLink {
            token,
            kind,
            mailing_id: self.mailing_id.to_owned(),
            letter_id: self.letter_id,
            email: self.email.to_owned(),
            position,
            url: url.to_owned(),
            meta,
        });
        token
    }
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
        mailing_id: &ctx.mailing.mailing_id,
        email: recipient.email.as_str(),
    };
    let mut context = recipient.fields.clone();
    let fixed = fixed_links(ctx, &mut tokens, images, mode, &mut context);
    let mut link_url = |found: &FoundLink| match found.kind {
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
    };
    let shape = ctx.shape(mode);
    let mut content = letter_content(ctx, shape, &context, &fixed.tail_urls, &mut link_url)?;
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
    })
}

/// The letter's own links, minted before its content's (the order a
/// resumed run relies on): the unsubscribe link and its headers, the
/// stop-tracking link, the honeypot and the pixel, as the shape has them.
struct FixedLinks {
    headers: BTreeMap<String, String>,
    /// The message's Date: the unsubscribe token's time.
    sent_at: DateTime<Utc>,
    /// The tail's URLs, by `TAIL_FOOTER`, `TAIL_HONEYPOT`, `TAIL_PIXEL`.
    tail_urls: [String; 3],
}

fn fixed_links(
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
        Value::String(ctx.mailing.mailing_id.clone()),
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
            .map_err(|e| Reject::PersonaliseLetter(e.to_string()))?,
        None => ctx.mailing.html.clone(),
    };
    let subject = render_subject(ctx, context)?;
    check_personalised(html.len(), &subject, ctx.max_letter_bytes)?;
    let tail = tail_html(shape, tail_urls);
    let html = if shape.rewritten {
        rewrite(&html, &ctx.rewrite_options(shape, &tail), link_url)
            .map_err(|e| Reject::Rewrite(e.to_string()))?
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
    let built = message::build(message::MessageParts {
        letter_id,
        mailing_id: &mailing.mailing_id,
        pool: &mailing.pool,
        from: &mailing.from,
        to_email: recipient.email.as_str(),
        to_name,
        reply_to: None,
        return_path: envelope_from.as_deref(),
        subject: &content.subject,
        html: &content.html,
        text: &content.text,
        html_body: content.html_body,
        text_body: content.text_body,
        list_headers: &fixed.headers,
        date: fixed.sent_at.into(),
    })
    .map_err(|e| Reject::Message(e.to_string()))?;
    Ok(Letter {
        letter_id,
        mailing_id: mailing.mailing_id.clone(),
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
            .map_err(|e| Reject::PersonaliseSubject(e.to_string())),
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
