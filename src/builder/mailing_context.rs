//! The mailing prepared once for all its letters ([`MailingContext`]): its
//! templates compiled, its seal key, its link templates' ids, and one plan
//! per letter shape; why a mailing cannot be built at all
//! ([`PrepareError`]).

use super::letter_shape::{tail_html, LetterShape};
use super::mailing::Mailing;
use super::track_mode::TrackMode;
use super::tracked_urls::tracked_url_of;
use crate::delivery::body::BodyPlan;
use crate::delivery::message;
use crate::letter::plan::{Plan, PlanSource, Slot, Unplannable};
use crate::letter::rewrite::creative_click_links;
use crate::letter::{rewrite, FoundKind, FoundLink, RewriteOptions, Template};
use crate::store::link_rules::MailingLink;
use crate::store::link_templates::TemplateKey;
use crate::store::links::LinkKind;
use crate::token::{Plaintext, Token, TokenSeal};
use chrono::{DateTime, Utc};
use std::collections::HashMap;

/// Everything shared by the letters of one mailing, prepared once.
pub(crate) struct MailingContext {
    pub mailing: Mailing,
    pub base_url: String,
    /// The most bytes a letter's HTML may have, after personalising.
    pub max_letter_bytes: usize,
    pub(super) html: Option<Template>,
    pub(super) subject: Option<Template>,
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
    pub(super) plan: Plan,
    pub(super) html_body: BodyPlan,
    pub(super) text_body: BodyPlan,
}

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
        let mut context = Self::prepare_unplanned(mailing, base_url, max_letter_bytes, seal)?;
        context.mailing_links()?;
        context.plans = context.compile_plans();
        Ok(context)
    }

    /// [`Self::prepare`] without the plans: for one letter (a relayed
    /// message), which a plan would not make any faster.
    pub(crate) fn prepare_unplanned(
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
        Ok(MailingContext {
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
        })
    }

    /// Give every letter its own envelope sender at `domain` (VERP).
    pub(crate) fn set_bounce_domain(&mut self, domain: Option<String>) {
        self.bounce_domain = domain;
    }

    /// The letter's VERP address, `bounces+{token}@{domain}`, its token a
    /// [`TokenKind::Bounce`](crate::kind::TokenKind::Bounce) sealed at the
    /// letter's Date with the mailing's unsubscribe template and the letter
    /// id: the same on a re-run (docs/bounces.md, "The bounce address").
    pub(super) fn bounce_address(&self, letter_id: u64, sent_at: DateTime<Utc>) -> Option<String> {
        let domain = self.bounce_domain.as_deref()?;
        let token = self.letter_token(letter_id, sent_at);
        Some(crate::token::bounce_address(&token, domain))
    }

    /// The letter's sealed bounce token: its VERP address's, and the left
    /// part of its Message-ID, so a returned message proves its letter
    /// with or without a bounce domain (docs/bounces.md).
    pub(super) fn letter_token(&self, letter_id: u64, sent_at: DateTime<Utc>) -> Token {
        let template = self.template(LinkKind::Unsubscribe, 0, "");
        self.seal
            .seal(sent_at, Plaintext::bounce(template, letter_id))
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
    pub(super) fn shape(&self, mode: TrackMode) -> LetterShape {
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
                    "letters are personalised and rewritten one by one: {}",
                    crate::error_report::chain(why)
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

    pub(super) fn rewrite_options<'a>(
        &'a self,
        shape: LetterShape,
        tail_html: &'a str,
    ) -> RewriteOptions<'a> {
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

    pub(super) fn plan(&self, shape: LetterShape) -> Option<&Planned> {
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
    pub(super) fn offers_stop_tracking(&self, mode: TrackMode) -> bool {
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

    /// The creative's click positions with their names and UTM choice
    /// (`data-linktrack-name`, `data-linktrack-utm`), as the stats number
    /// them. Two links of one name are refused, naming both.
    pub(crate) fn mailing_links(&self) -> Result<Vec<MailingLink>, PrepareError> {
        let found = if self.mailing.personalize {
            creative_click_links(&self.mailing.html, &self.base_url)
        } else {
            let options = RewriteOptions {
                track_links: true,
                proxy_images: false,
                own_base_url: &self.base_url,
                pixel_html: None,
                shown_address_base: None,
            };
            let mut found = Vec::new();
            rewrite(&self.mailing.html, &options, |link: &FoundLink| {
                if link.kind == FoundKind::Click {
                    found.push(link.clone());
                }
                String::new()
            })
            .map(|_| found)
        };
        let links: Vec<MailingLink> = found
            .unwrap_or_default()
            .into_iter()
            .map(|found| MailingLink {
                position: found.position,
                name: found.name,
                utm: found.utm,
                source_url: found.url,
            })
            .collect();
        let mut named: HashMap<&str, &MailingLink> = HashMap::new();
        for link in &links {
            let Some(name) = link.name.as_deref() else {
                continue;
            };
            check_link_name(name).map_err(|message| PrepareError::Template {
                field: "html",
                message: format!("link {} ({}): {message}", link.position, link.source_url),
            })?;
            if let Some(first) = named.insert(name, link) {
                return Err(PrepareError::Template {
                    field: "html",
                    message: format!(
                        "links {} ({}) and {} ({}) are both named {name:?} \
                         (data-linktrack-name must be unique within a mailing)",
                        first.position, first.source_url, link.position, link.source_url
                    ),
                });
            }
        }
        Ok(links)
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
    pub(super) fn issue(
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

/// The longest link name, in characters (the column's width).
pub(crate) const MAX_LINK_NAME: usize = 100;

/// Whether `name` can name a link: at most [`MAX_LINK_NAME`] characters,
/// no control characters, not only digits (a name stands where a position
/// may, as in `PATCH /api/mailings/{id}/links/{position or name}`).
pub(crate) fn check_link_name(name: &str) -> Result<(), String> {
    if name.chars().count() > MAX_LINK_NAME {
        return Err(format!(
            "data-linktrack-name is longer than {MAX_LINK_NAME} characters"
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(format!(
            "data-linktrack-name {name:?} has a control character"
        ));
    }
    if name.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "data-linktrack-name {name:?} is only digits, which would read as a position"
        ));
    }
    Ok(())
}

/// The template variable holding the letter's "stop tracking me" URL.
pub(crate) const STOP_TRACKING_VARIABLE: &str = "stop_tracking_url";
