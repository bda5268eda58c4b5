//! A mailing compiled once: the letter's HTML and text part as fixed text
//! and slots, so each letter is written by filling the slots instead of
//! personalising, parsing and rewriting it from scratch.
//!
//! # How a plan is made
//!
//! The letter is built once the ordinary way with a *sentinel* in place of
//! every value that differs between letters: each personal field, each
//! tracked URL and each URL of the tail before `</body>` (honeypot, footer,
//! pixel). A sentinel is `U+E000`, a lowercase letter, a number and
//! `U+E001` (private-use characters no creative has). The result, split at
//! the sentinels, is the plan for the HTML; its text part
//! ([`crate::delivery::message::text_unwrapped`]), split the same way, is
//! the plan for the text.
//!
//! # Why filling gives the same bytes
//!
//! The plan is only used where that can be shown, and [`Plan::compile`]
//! refuses the rest (the builder then personalises and rewrites each letter
//! as before, and says why once in the log):
//!
//! - The template's only tags are bare `{{ name }}` (no `{% %}`, no
//!   `{# #}`, no filters or expressions): its output is its text with each
//!   value written in, HTML-escaped, whatever the value.
//! - Every field lands in ordinary text (not in a tag, comment, title,
//!   style or script), except our own URLs (`unsubscribe_url`,
//!   `stop_tracking_url`), which may also be a whole quoted `href`/`src`
//!   value: the rewriter leaves our own links alone whatever their token.
//!   An escaped value cannot end text or a quoted value (`<`, `&`, quotes
//!   are escaped), so it cannot change what the rewriter sees.
//! - No found link's URL or tag contains a field (a personalised URL is a
//!   different link per letter), nor, with the link-text rule on, any
//!   link's visible text (it decides whether the link is tracked).
//! - Every sentinel survives into the text part unchanged.
//!
//! Per letter, [`Plan::values`] accepts only string values that the text
//! part shows exactly as they are: not empty, no leading, trailing or
//! doubled space, only letters, digits, punctuation and single spaces
//! (whitespace is collapsed by the text part, other characters may be
//! dropped). Any other value sends that one letter down the old path, which
//! is the definition the plan must match (`src/builder/compose_plan_tests.rs` checks both
//! paths against each other on every creative of `fixtures/email-corpus/`).

use std::borrow::Cow;
use std::ops::Range;

use lol_html::html_content::TextType;
use lol_html::{doc_text, element, HtmlRewriter, Settings};
use serde_json::{Map, Value};

use super::personalize::{escape_html, Template};
use super::rewrite::{link_texts, rewrite, FoundLink, RewriteOptions};
use super::start_tag;

const OPEN: char = '\u{E000}';
const CLOSE: char = '\u{E001}';

/// What a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The i-th field the plan fills (the template's variables, in order).
    Field(usize),
    /// The tracked URL of the i-th found link of [`Plan::links`].
    Link(usize),
    /// The i-th URL of the tail before `</body>`.
    Tail(usize),
}

impl Slot {
    /// The sentinel written where this slot's value goes.
    pub fn sentinel(self) -> String {
        let (kind, index) = match self {
            Slot::Field(i) => ('f', i),
            Slot::Link(i) => ('l', i),
            Slot::Tail(i) => ('t', i),
        };
        format!("{OPEN}{kind}{index}{CLOSE}")
    }
}

/// One field the template reads, and the fixed start every value of it has
/// (our own URLs: `https://t.example.com/u/`), which stays in the fixed text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanField {
    pub name: String,
    pub prefix: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Fixed(Range<usize>),
    Slot(Slot),
}

/// Fixed text (kept once) and where the slots go in it.
#[derive(Debug, Clone)]
struct Pieces {
    text: String,
    pieces: Vec<Piece>,
}

/// Why a mailing is built letter by letter instead (logged once).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unplannable {
    #[error("its template has a tag other than a bare {{{{ name }}}} near byte {0}")]
    TemplateLogic(usize),
    #[error("the creative itself contains the private-use characters U+E000/U+E001")]
    SentinelInCreative,
    #[error("field {0:?} is used inside a tag, comment, title, style or script")]
    FieldOutsideText(String),
    #[error("field {0:?} is part of a tracked link's URL or tag")]
    FieldInLink(String),
    #[error("field {0:?} is part of a link's text, which decides whether it is tracked")]
    FieldInLinkText(String),
    #[error("our own URL base {0:?} needs escaping in HTML")]
    BaseNeedsEscaping(String),
    #[error("the text part changes a value (CSS or layout around it)")]
    TextChangesValue,
    #[error("the sample letter could not be built")]
    Sample(#[source] SampleError),
}

/// Why the sample letter could not be built: the template's, the
/// rewrite's or the HTML parser's error, shared (each shape of a mailing
/// keeps its plan's reason). Two are the same reason when they say the
/// same: a reason is logged once, not once per shape.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct SampleError(std::sync::Arc<dyn std::error::Error + Send + Sync>);

impl SampleError {
    fn of(err: impl std::error::Error + Send + Sync + 'static) -> Unplannable {
        Unplannable::Sample(SampleError(std::sync::Arc::new(err)))
    }
}

impl PartialEq for SampleError {
    fn eq(&self, other: &SampleError) -> bool {
        crate::error_report::chain(self) == crate::error_report::chain(other)
    }
}

impl Eq for SampleError {}

/// What the plan is compiled from.
pub struct PlanSource<'a> {
    /// The compiled creative, or `None` when personalisation is off.
    pub template: Option<&'a Template>,
    /// The creative as written: `template`'s source, or the letter's HTML
    /// as is when `template` is `None`.
    pub html: &'a str,
    /// Fields with a fixed prefix (our own URLs); other fields have none.
    pub prefixes: &'a [(&'a str, String)],
    /// The rewrite as the letters get it, with `pixel_html` holding
    /// [`Slot::Tail`] sentinels where its URLs go.
    pub options: RewriteOptions<'a>,
    /// Turns a letter's final HTML into its text part, unwrapped.
    pub text_part: fn(&str) -> String,
    /// Wraps the text part's lines; line by line, so a line without values
    /// is wrapped once here and a line with values after filling.
    pub wrap: fn(&str) -> String,
}

/// One line of the text part (with its line break).
#[derive(Debug, Clone)]
enum TextLine {
    /// No values: wrapped once, at compile time.
    Wrapped(String),
    /// Filled in per letter, then wrapped.
    Filled(Pieces),
}

/// A mailing's letters as fixed text and slots.
#[derive(Debug, Clone)]
pub struct Plan {
    fields: Vec<PlanField>,
    links: Vec<FoundLink>,
    /// Bytes of the personalised HTML (before rewriting) that are not
    /// values, and how often each field occurs in it.
    personalised_fixed: usize,
    field_counts: Vec<usize>,
    html: Pieces,
    text: Vec<TextLine>,
    wrap: fn(&str) -> String,
}

/// A piece of a filled letter's part: one of the plan's fixed pieces (the
/// i-th of [`Plan::html_fixed`] or [`Plan::text_fixed`]) or a letter's own
/// text. The MIME encoder (`delivery::body`) encodes the fixed pieces once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk<'a> {
    Fixed(usize),
    Value(Cow<'a, str>),
}

/// A letter's HTML and text part, filled in, as text and as chunks.
#[derive(Debug, Clone)]
pub struct Filled<'a> {
    pub html: String,
    pub text: String,
    pub html_chunks: Vec<Chunk<'a>>,
    pub text_chunks: Vec<Chunk<'a>>,
}

/// One letter's field values, checked by [`Plan::values`]: what goes into
/// the HTML (escaped) and into the text part, per field.
#[derive(Debug, Clone)]
pub struct Values {
    html: Vec<String>,
    text: Vec<String>,
}

impl Plan {
    /// Compiles the plan, or says why these letters must be built one by one.
    pub fn compile(source: &PlanSource) -> Result<Plan, Unplannable> {
        if source.html.contains([OPEN, CLOSE]) {
            return Err(Unplannable::SentinelInCreative);
        }
        let base = source.options.own_base_url;
        if escape_html(base) != base || base.contains(char::is_whitespace) {
            return Err(Unplannable::BaseNeedsEscaping(base.to_owned()));
        }
        let (fields, personalised) = match source.template {
            Some(template) => {
                check_bare_tags(source.html)?;
                let fields = plan_fields(template, source.prefixes);
                let context = sentinel_context(&fields);
                let html = template.render(&context).map_err(SampleError::of)?;
                check_fields_in_text(&html, &fields)?;
                if source.options.shown_address_base.is_some() {
                    check_link_texts(&html, &fields)?;
                }
                (fields, html)
            }
            None => (Vec::new(), source.html.to_owned()),
        };
        let field_counts: Vec<usize> = (0..fields.len())
            .map(|i| personalised.matches(&Slot::Field(i).sentinel()).count())
            .collect();
        let sentinel_bytes: usize = field_counts
            .iter()
            .enumerate()
            .map(|(i, count)| count * Slot::Field(i).sentinel().len())
            .sum();
        let personalised_fixed = personalised.len() - sentinel_bytes;
        let mut links = Vec::new();
        let html = rewrite(&personalised, &source.options, |found| {
            links.push(found.clone());
            Slot::Link(links.len() - 1).sentinel()
        })
        .map_err(SampleError::of)?;
        if let Some(link) = links
            .iter()
            .find(|l| l.url.contains(OPEN) || l.tag.as_deref().is_some_and(|t| t.contains(OPEN)))
        {
            let name = named_field(&fields, &link.url).unwrap_or_default();
            return Err(Unplannable::FieldInLink(name));
        }
        let text = (source.text_part)(&html);
        let html = split_at_sentinels(html).ok_or(Unplannable::SentinelInCreative)?;
        let text = text_lines(&text, source.wrap).ok_or(Unplannable::TextChangesValue)?;
        Ok(Plan {
            fields,
            links,
            personalised_fixed,
            field_counts,
            html,
            text,
            wrap: source.wrap,
        })
    }

    /// The links of every letter, in the order the old path finds them:
    /// mint their tokens in this order, then [`Plan::fill`].
    pub fn links(&self) -> &[FoundLink] {
        &self.links
    }

    /// This letter's values, or `None` when one of them must take the old
    /// path (missing, not a string, or not shown as it is in the text part).
    pub fn values(&self, context: &Map<String, Value>) -> Option<Values> {
        let mut values = Values {
            html: Vec::with_capacity(self.fields.len()),
            text: Vec::with_capacity(self.fields.len()),
        };
        for field in &self.fields {
            let value = context.get(&field.name)?.as_str()?;
            let rest = value.strip_prefix(field.prefix.as_str())?;
            if !is_plain(rest) {
                return None;
            }
            values.html.push(escape_html(rest).into_owned());
            values.text.push(rest.to_owned());
        }
        Some(values)
    }

    /// The size of the letter's personalised HTML before rewriting (what
    /// the size limit is checked against).
    pub fn personalised_len(&self, values: &Values) -> usize {
        self.field_counts
            .iter()
            .zip(&values.html)
            .map(|(count, value)| count * value.len())
            .sum::<usize>()
            + self.personalised_fixed
    }

    /// The fixed pieces of the HTML, in order ([`Chunk::Fixed`] indexes them).
    pub fn html_fixed(&self) -> Vec<&str> {
        self.html
            .pieces
            .iter()
            .filter_map(|piece| match piece {
                Piece::Fixed(range) => Some(&self.html.text[range.clone()]),
                Piece::Slot(_) => None,
            })
            .collect()
    }

    /// The text part's lines without values (wrapped), in order
    /// ([`Chunk::Fixed`] indexes them).
    pub fn text_fixed(&self) -> Vec<&str> {
        self.text
            .iter()
            .filter_map(|line| match line {
                TextLine::Wrapped(fixed) => Some(fixed.as_str()),
                TextLine::Filled(_) => None,
            })
            .collect()
    }

    /// The letter's HTML and text part (wrapped). `link_urls` are the
    /// tracked URLs of [`Plan::links`], `tail_urls` those of the tail; both
    /// must be plain URLs (no `&`, `<`, `>`, quotes or whitespace: ours are).
    pub fn fill<'a>(
        &'a self,
        values: &'a Values,
        link_urls: &'a [String],
        tail_urls: &'a [String],
    ) -> Filled<'a> {
        let slot = |slot: &Slot| -> &'a str {
            let (list, i) = match *slot {
                Slot::Field(i) => (values.html.as_slice(), i),
                Slot::Link(i) => (link_urls, i),
                Slot::Tail(i) => (tail_urls, i),
            };
            list.get(i).map_or("", String::as_str)
        };
        let mut html = String::with_capacity(self.html.text.len() + 64 * link_urls.len());
        let mut html_chunks = Vec::with_capacity(self.html.pieces.len());
        let mut fixed = 0;
        for piece in &self.html.pieces {
            match piece {
                Piece::Fixed(range) => {
                    html.push_str(&self.html.text[range.clone()]);
                    html_chunks.push(Chunk::Fixed(fixed));
                    fixed += 1;
                }
                Piece::Slot(s) => {
                    let value = slot(s);
                    html.push_str(value);
                    html_chunks.push(Chunk::Value(Cow::Borrowed(value)));
                }
            }
        }
        let mut text = String::with_capacity(html.len() / 2);
        let mut text_chunks = Vec::with_capacity(self.text.len());
        let mut fixed = 0;
        for line in &self.text {
            match line {
                TextLine::Wrapped(lines) => {
                    text.push_str(lines);
                    text_chunks.push(Chunk::Fixed(fixed));
                    fixed += 1;
                }
                TextLine::Filled(pieces) => {
                    let filled = fill(pieces, &values.text, link_urls, tail_urls);
                    let wrapped = (self.wrap)(&filled);
                    text.push_str(&wrapped);
                    text_chunks.push(Chunk::Value(Cow::Owned(wrapped)));
                }
            }
        }
        Filled {
            html,
            text,
            html_chunks,
            text_chunks,
        }
    }
}

/// Only `{{ name }}` may appear: no statements, comments or expressions.
fn check_bare_tags(raw: &str) -> Result<(), Unplannable> {
    for marker in ["{%", "{#"] {
        if let Some(at) = raw.find(marker) {
            return Err(Unplannable::TemplateLogic(at));
        }
    }
    let mut rest = raw;
    let mut offset = 0;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or(Unplannable::TemplateLogic(offset + start))?;
        let inner = after[..end].trim_matches(' ');
        let is_name = inner
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !is_name {
            return Err(Unplannable::TemplateLogic(offset + start));
        }
        let consumed = start + 2 + end + 2;
        offset += consumed;
        rest = &rest[consumed..];
    }
    Ok(())
}

fn plan_fields(template: &Template, prefixes: &[(&str, String)]) -> Vec<PlanField> {
    template
        .variables()
        .into_iter()
        .map(|name| {
            let prefix = prefixes
                .iter()
                .find(|(field, _)| *field == name)
                .map(|(_, prefix)| prefix.clone())
                .unwrap_or_default();
            PlanField { name, prefix }
        })
        .collect()
}

fn sentinel_context(fields: &[PlanField]) -> Map<String, Value> {
    fields
        .iter()
        .enumerate()
        .map(|(i, field)| {
            let value = format!("{}{}", field.prefix, Slot::Field(i).sentinel());
            (field.name.clone(), Value::String(value))
        })
        .collect()
}

/// Every field sentinel must be in ordinary text, or (our own URLs) be a
/// whole quoted `href`/`src` value: counted, so one anywhere else (a tag
/// name, another attribute, a comment, `<title>`, `<style>`) is noticed.
fn check_fields_in_text(html: &str, fields: &[PlanField]) -> Result<(), Unplannable> {
    let total = html.matches(OPEN).count();
    let mut in_text = 0usize;
    let mut in_own_urls = 0usize;
    let mut pending = String::new();
    {
        let counted = std::cell::RefCell::new((&mut in_text, &mut in_own_urls, &mut pending));
        let settings = Settings::new()
            .with_strict(false)
            .append_document_content_handler(doc_text!(|chunk| {
                let mut counted = counted.borrow_mut();
                if chunk.text_type() == TextType::Data {
                    counted.2.push_str(chunk.as_str());
                }
                if chunk.last_in_text_node() {
                    *counted.0 += counted.2.matches(OPEN).count();
                    counted.2.clear();
                }
                Ok(())
            }))
            .append_element_content_handler(element!("*", |el| {
                let location = el.source_location().bytes();
                let Some(tag) = html.get(location) else {
                    return Ok(());
                };
                let mut counted = counted.borrow_mut();
                *counted.1 += own_url_values(tag, fields);
                Ok(())
            }));
        let mut parser = HtmlRewriter::new(settings, |_: &[u8]| {});
        let parsed = parser.write(html.as_bytes()).and_then(|()| parser.end());
        parsed.map_err(SampleError::of)?;
    }
    if in_text + in_own_urls == total {
        return Ok(());
    }
    let name = named_field(fields, html).unwrap_or_default();
    Err(Unplannable::FieldOutsideText(name))
}

/// The link-text rule reads each link's text: a field in it (a reader's
/// own web site, say) decides per letter whether the link is tracked.
fn check_link_texts(html: &str, fields: &[PlanField]) -> Result<(), Unplannable> {
    let texts = link_texts(html).map_err(SampleError::of)?;
    match texts.iter().find(|text| text.contains(OPEN)) {
        Some(text) => Err(Unplannable::FieldInLinkText(
            named_field(fields, text).unwrap_or_default(),
        )),
        None => Ok(()),
    }
}

/// How many attributes of this start tag are an `href` or `src` whose whole
/// quoted value is one of our own URL fields.
fn own_url_values(tag: &str, fields: &[PlanField]) -> usize {
    if !tag.contains(OPEN) {
        return 0;
    }
    start_tag::attributes(tag)
        .filter(|a| a.is_named("href") || a.is_named("src"))
        .filter_map(|a| {
            let (range, quote) = a.value?;
            (quote != start_tag::Quote::Unquoted).then(|| tag.get(range))?
        })
        .filter(|value| {
            fields.iter().enumerate().any(|(i, f)| {
                !f.prefix.is_empty()
                    && *value == format!("{}{}", f.prefix, Slot::Field(i).sentinel())
            })
        })
        .count()
}

/// The first field whose sentinel occurs in `text`, for error messages.
fn named_field(fields: &[PlanField], text: &str) -> Option<String> {
    fields
        .iter()
        .enumerate()
        .find(|(i, _)| text.contains(&Slot::Field(*i).sentinel()))
        .map(|(_, f)| f.name.clone())
}

/// The text part's lines: runs of lines without values wrapped now, the
/// others split at their sentinels. `None` when a sentinel is broken.
fn text_lines(text: &str, wrap: fn(&str) -> String) -> Option<Vec<TextLine>> {
    let mut lines = Vec::new();
    let mut fixed = String::new();
    for line in text.split_inclusive('\n') {
        if !line.contains([OPEN, CLOSE]) {
            fixed.push_str(&wrap(line));
            continue;
        }
        if !fixed.is_empty() {
            lines.push(TextLine::Wrapped(std::mem::take(&mut fixed)));
        }
        lines.push(TextLine::Filled(split_at_sentinels(line.to_owned())?));
    }
    if !fixed.is_empty() {
        lines.push(TextLine::Wrapped(fixed));
    }
    Some(lines)
}

/// Splits at sentinels; `None` if a sentinel is broken (the text part
/// changed it) or a stray private-use character is left.
fn split_at_sentinels(text: String) -> Option<Pieces> {
    let mut pieces = Vec::new();
    let mut at = 0;
    while let Some(found) = text[at..].find(OPEN) {
        let start = at + found;
        let body_start = start + OPEN.len_utf8();
        let body_end = body_start + text[body_start..].find(CLOSE)?;
        let slot = parse_slot(&text[body_start..body_end])?;
        if start > at {
            pieces.push(Piece::Fixed(at..start));
        }
        pieces.push(Piece::Slot(slot));
        at = body_end + CLOSE.len_utf8();
    }
    if at < text.len() {
        pieces.push(Piece::Fixed(at..text.len()));
    }
    let fixed_has_close = pieces.iter().any(|p| match p {
        Piece::Fixed(range) => text[range.clone()].contains(CLOSE),
        Piece::Slot(_) => false,
    });
    (!fixed_has_close).then_some(Pieces { text, pieces })
}

fn parse_slot(body: &str) -> Option<Slot> {
    let mut chars = body.chars();
    let kind = chars.next()?;
    let digits = chars.as_str();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let index: usize = digits.parse().ok()?;
    match kind {
        'f' => Some(Slot::Field(index)),
        'l' => Some(Slot::Link(index)),
        't' => Some(Slot::Tail(index)),
        _ => None,
    }
}

fn fill(plan: &Pieces, fields: &[String], links: &[String], tail: &[String]) -> String {
    let mut out = String::with_capacity(plan.text.len() + 64 * (links.len() + tail.len()));
    for piece in &plan.pieces {
        match piece {
            Piece::Fixed(range) => out.push_str(&plan.text[range.clone()]),
            Piece::Slot(Slot::Field(i)) => out.push_str(fields.get(*i).map_or("", String::as_str)),
            Piece::Slot(Slot::Link(i)) => out.push_str(links.get(*i).map_or("", String::as_str)),
            Piece::Slot(Slot::Tail(i)) => out.push_str(tail.get(*i).map_or("", String::as_str)),
        }
    }
    out
}

/// A value the text part shows exactly as written.
fn is_plain(value: &str) -> bool {
    let shown = |c: char| {
        c == ' '
            || c.is_alphanumeric()
            || c.is_ascii_punctuation()
            || matches!(
                c,
                '\u{2018}' | '\u{2019}' | '\u{201C}' | '\u{201D}' | '\u{2013}' | '\u{2014}'
            )
    };
    !value.is_empty()
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !value.contains("  ")
        && value.chars().all(shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip_through_their_sentinels() {
        for slot in [Slot::Field(0), Slot::Link(12), Slot::Tail(2)] {
            let text = format!("a{}b", slot.sentinel());
            let pieces = split_at_sentinels(text).expect("splits");
            assert_eq!(pieces.pieces[1], Piece::Slot(slot));
        }
    }

    #[test]
    fn a_broken_sentinel_is_refused() {
        assert!(split_at_sentinels(format!("a{OPEN}F1{CLOSE}")).is_none());
        assert!(split_at_sentinels(format!("a{OPEN}f1")).is_none());
        assert!(split_at_sentinels(format!("a{CLOSE}b")).is_none());
    }

    #[test]
    fn only_bare_names_are_planned() {
        assert!(check_bare_tags("Hi {{ first_name }}, {{x}}").is_ok());
        assert_eq!(
            check_bare_tags("Hi {{ name|upper }}"),
            Err(Unplannable::TemplateLogic(3))
        );
        assert!(check_bare_tags("{% if a %}x{% endif %}").is_err());
        assert!(check_bare_tags("{# note #}").is_err());
        assert!(check_bare_tags("{{ user.name }}").is_err());
        assert!(check_bare_tags("{{ unclosed").is_err());
    }

    #[test]
    fn plain_values_are_shown_as_written() {
        assert!(is_plain("Reader 1"));
        assert!(is_plain("José O'Brien-Smith"));
        assert!(!is_plain(""));
        assert!(!is_plain(" lead"));
        assert!(!is_plain("two  spaces"));
        assert!(!is_plain("tab\there"));
        assert!(!is_plain("emoji 🎉"));
    }
}
