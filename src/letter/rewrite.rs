//! Link rewriting: find every trackable link with lol_html, then splice the
//! new URLs into the original bytes.
//!
//! # Why splice instead of `Element::set_attribute`
//!
//! lol_html re-serialises a start tag as soon as one attribute changes: line
//! breaks and runs of spaces between attributes become single spaces and
//! single-quoted or unquoted values become double-quoted (checked against
//! lol_html 2.9). Letters must stay byte for byte as they were apart from the
//! rewritten values, so lol_html is used only as the parser that says *where*
//! start tags, comments and `</body>` are (`source_location()`), and
//! `start_tag`, a small scanner, finds the attribute inside the tag's raw
//! bytes. The output is the input with those byte ranges replaced.
//!
//! # Numbering
//!
//! Click links are numbered 1, 2, 3… in document order, counting links inside
//! Outlook conditional comments where the comment appears. Images have their
//! own counter, also starting at 1, so proxying images on or off never changes
//! a click link's position. A link left as written by the link-text rule
//! (below) keeps its number, so the numbers are the same with the rule on or
//! off (the click map numbers the creative without it).
//!
//! # Links that show their own address
//!
//! With [`RewriteOptions::shown_address_base`] set, an `<a>` whose visible
//! text shows a URL or a domain name (`www.acme-inc.com`, `HTMLemail.io`,
//! `https://example.com/x`) is tracked only when that domain shares the
//! tracking host's registrable domain (`click.brand.example` may stand in
//! for `www.brand.example`). Otherwise the link is left as written: a link
//! whose text names one site and whose href names another is what phishing
//! looks like, and filters score it so (rspamd `PHISHING`, SpamAssassin
//! `HTTPS_HTTP_MISMATCH`; docs/domains.md). A text that shows an `https://`
//! URL is also left alone when the tracking base is plain `http://`.
//!
//! # Control attributes
//!
//! `data-linktrack="off"` (value compared case-insensitively) on the link or
//! image element itself leaves its URL alone; it is not inherited from parent
//! elements. SendGrid's `clicktracking="off"` and Mailgun's
//! `disable-tracking="true"` on a link mean the same (other values of them
//! track the link, and they are removed like ours).
//! `data-linktrack-tag="…"` fills [`FoundLink::tag`],
//! `data-linktrack-name="…"` [`FoundLink::name`] (the name a sender gives
//! the link's position), and `data-linktrack-utm="off"` clears
//! [`FoundLink::utm`] (the mailing's UTM tags are not added to this link at
//! the redirect). All of them are ours,
//! not the recipient's, so they are removed (with the whitespace before them)
//! from every element the active step looks at: `<a>`, `<area>`, VML elements
//! when `track_links` is on, `<img>` when `proxy_images` is on. With both steps
//! off the document comes back unchanged.
//!
//! # Comments
//!
//! Only conditional comments (`<!--[if …]>…<![endif]-->`) are rewritten: their
//! text is HTML that Outlook renders. An ordinary comment is not shown to
//! anyone, so a link in it is left alone.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::rc::Rc;

use lol_html::html_content::{Comment, Element};
use lol_html::{doc_comments, element, end_tag, HtmlRewriter, Settings};

use super::address_text;
use super::charref::decode_attribute_value;
use super::start_tag::{self, Quote, RawAttribute};

/// What a found URL is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FoundKind {
    /// `<a href>`, `<area href>` or a VML element's `href`: becomes `/c/{token}`.
    Click,
    /// `<img src>`: becomes `/i/{token}`.
    Image,
}

/// One rewritable URL, as passed to the `replace` callback of [`rewrite`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundLink {
    pub kind: FoundKind,
    /// 1, 2, 3… in document order, counted separately for clicks and images.
    pub position: u32,
    /// The URL a browser would follow: character references decoded, leading
    /// and trailing whitespace/control characters trimmed, tabs and line
    /// breaks removed (as the URL parser does). Never truncated.
    pub url: String,
    /// The element's `data-linktrack-tag`, decoded and trimmed; `None` when
    /// absent or blank.
    pub tag: Option<String>,
    /// The element's `data-linktrack-name`, decoded and trimmed; `None` when
    /// absent or blank.
    pub name: Option<String>,
    /// `false` when the element says `data-linktrack-utm="off"`.
    pub utm: bool,
}

/// What to rewrite.
#[derive(Debug, Clone, Copy)]
pub struct RewriteOptions<'a> {
    /// `false`: leave `<a>`/`<area>`/VML hrefs untouched.
    pub track_links: bool,
    /// `false`: leave `<img src>` untouched.
    pub proxy_images: bool,
    /// Links starting with this (our own `/u/` unsubscribe link etc.) are never
    /// tracked or proxied. Compared ASCII case-insensitively; unless it ends
    /// with `/`, it must be followed by `/`, `?`, `#` or the end of the URL, so
    /// `https://t.example.com` does not match `https://t.example.com.evil.test`.
    /// Empty means "no own links".
    pub own_base_url: &'a str,
    /// Inserted just before the last `</body>`, or appended at the end when the
    /// document has no `</body>` end tag.
    pub pixel_html: Option<&'a str>,
    /// The tracking base URL (`https://click.brand.example`) when the
    /// link-text rule applies (see the module docs): a link whose text shows
    /// an address on another registrable domain is left as written. `None`:
    /// every link is tracked.
    pub shown_address_base: Option<&'a str>,
}

/// The HTML parser gave up. In practice only a memory limit can cause this:
/// the parser runs in non-strict mode and our handlers never fail.
#[derive(thiserror::Error, Debug)]
pub enum RewriteError {
    #[error("HTML parser failed: {0}")]
    Parser(#[from] lol_html::errors::RewritingError),
}

/// Rewrites the links of one letter.
///
/// `replace` is called once per rewritable link, in document order, and
/// returns the new URL (already absolute, e.g. `https://t.example.com/c/0192…`);
/// it is HTML-escaped here for the attribute, written with the attribute's
/// own quote character (an unquoted value becomes double-quoted).
pub fn rewrite(
    html: &str,
    options: &RewriteOptions,
    mut replace: impl FnMut(&FoundLink) -> String,
) -> Result<String, RewriteError> {
    if !options.track_links && !options.proxy_images && options.pixel_html.is_none() {
        return Ok(html.to_owned());
    }
    let edits = find_edits(html, options)?;
    Ok(apply_edits(html, &edits, options.pixel_html, &mut replace))
}

/// The click positions the link-text rule leaves as written in `html` (for
/// the build's summary): the links found with the rule off but not with it
/// on. Empty when `options` has no rule.
pub fn positions_left_as_written(
    html: &str,
    options: &RewriteOptions,
) -> Result<Vec<u32>, RewriteError> {
    if options.shown_address_base.is_none() || !options.track_links {
        return Ok(Vec::new());
    }
    let clicks = |options: &RewriteOptions| -> Result<Vec<u32>, RewriteError> {
        let mut positions = Vec::new();
        let only_links = RewriteOptions {
            proxy_images: false,
            pixel_html: None,
            ..*options
        };
        rewrite(html, &only_links, |found| {
            positions.push(found.position);
            String::new()
        })?;
        Ok(positions)
    };
    let tracked = clicks(options)?;
    let all = clicks(&RewriteOptions {
        shown_address_base: None,
        ..*options
    })?;
    Ok(all.into_iter().filter(|p| !tracked.contains(p)).collect())
}

/// The click links of a creative before it is personalised, numbered as
/// the links of each letter made from it will be: a link whose URL is
/// still a minijinja template (`https://shop.example/u/{{ id }}`, or
/// `{{ url }}` whole) is a tracked link once filled in, so it counts.
/// (A `{% for %}` loop's extra links cannot be counted before rendering.)
pub fn creative_click_links(
    html: &str,
    own_base_url: &str,
) -> Result<Vec<FoundLink>, RewriteError> {
    let options = RewriteOptions {
        track_links: true,
        proxy_images: false,
        own_base_url,
        pixel_html: None,
        shown_address_base: None,
    };
    let edits = find_edits_counting(html, &options, true)?;
    Ok(edits
        .into_iter()
        .filter_map(|edit| match edit.action {
            Action::ReplaceUrl { link, .. } if link.kind == FoundKind::Click => Some(link),
            _ => None,
        })
        .collect())
}

/// The visible text of every `<a href>` of `html` (conditional comments
/// aside), as the link-text rule reads it.
pub(crate) fn link_texts(html: &str) -> Result<Vec<String>, RewriteError> {
    let texts = RefCell::new(Vec::new());
    let handlers = vec![element!("a[href]", |el| {
        let end = el.source_location().bytes().end;
        texts
            .borrow_mut()
            .push(address_text::visible_link_text(html, end));
        Ok(())
    })];
    run_parser(html, handlers, Vec::new())?;
    Ok(texts.into_inner())
}

/// One change to the original bytes.
#[derive(Debug)]
struct Edit {
    /// Byte range of the input that the edit replaces (empty for an insertion).
    range: Range<usize>,
    action: Action,
}

#[derive(Debug)]
enum Action {
    /// Replace an attribute value (the range excludes the quotes).
    ReplaceUrl { link: FoundLink, quote: Quote },
    /// Drop a control attribute (`data-linktrack…`).
    Remove,
    /// Insert the open pixel.
    InsertPixel,
}

/// Collects edits while lol_html walks the document.
struct Finder<'o> {
    options: &'o RewriteOptions<'o>,
    /// The link-text rule's tracking base, parsed once.
    tracking: Option<address_text::TrackingBase>,
    edits: Vec<Edit>,
    clicks: u32,
    images: u32,
    /// Count a URL that is still a minijinja template as a link
    /// ([`creative_click_links`]).
    template_links: bool,
}

fn find_edits(html: &str, options: &RewriteOptions) -> Result<Vec<Edit>, RewriteError> {
    find_edits_counting(html, options, false)
}

fn find_edits_counting(
    html: &str,
    options: &RewriteOptions,
    template_links: bool,
) -> Result<Vec<Edit>, RewriteError> {
    let finder = RefCell::new(Finder {
        template_links,
        options,
        tracking: options
            .shown_address_base
            .map(address_text::TrackingBase::parse),
        edits: Vec::new(),
        clicks: 0,
        images: 0,
    });
    let body_end: Rc<Cell<Option<usize>>> = Rc::new(Cell::new(None));

    let mut element_handlers = link_handlers(html, 0, &finder);
    if options.pixel_html.is_some() {
        let body_end = Rc::clone(&body_end);
        element_handlers.push(element!("body", move |el| {
            let body_end = Rc::clone(&body_end);
            el.on_end_tag(end_tag!(move |end| {
                body_end.set(Some(end.source_location().bytes().start));
                Ok(())
            }))
        }));
    }
    let mut document_handlers = Vec::new();
    if options.track_links || options.proxy_images {
        document_handlers.push(doc_comments!(|comment| {
            visit_comment(comment, html, &finder)?;
            Ok(())
        }));
    }
    run_parser(html, element_handlers, document_handlers)?;

    let mut edits = finder.into_inner().edits;
    if options.pixel_html.is_some() {
        let at = body_end
            .get()
            .filter(|&at| html.get(at..).is_some_and(|rest| rest.starts_with("</")))
            .unwrap_or(html.len());
        edits.push(Edit {
            range: at..at,
            action: Action::InsertPixel,
        });
    }
    // Edits within one tag are found in attribute-scan order, not byte order.
    // The sort is stable, so click positions (assigned in document order) stay
    // in the order `replace` will be called.
    edits.sort_by_key(|edit| edit.range.start);
    Ok(edits)
}

type ElementHandlers<'h> = Vec<(
    Cow<'static, lol_html::Selector>,
    lol_html::ElementContentHandlers<'h>,
)>;
type DocumentHandlers<'h> = Vec<lol_html::DocumentContentHandlers<'h>>;

fn run_parser<'h>(
    source: &str,
    element_content_handlers: ElementHandlers<'h>,
    document_content_handlers: DocumentHandlers<'h>,
) -> Result<(), RewriteError> {
    // Strict mode refuses markup whose parsing is ambiguous without a tree
    // builder; we only locate tags, so the tokenizer's best reading will do.
    let mut settings = Settings::new().with_strict(false);
    for handler in element_content_handlers {
        settings = settings.append_element_content_handler(handler);
    }
    for handler in document_content_handlers {
        settings = settings.append_document_content_handler(handler);
    }
    // The rewritten output is built by splicing, so lol_html's own output is
    // thrown away.
    let mut rewriter = HtmlRewriter::new(settings, |_: &[u8]| {});
    rewriter.write(source.as_bytes())?;
    rewriter.end()?;
    Ok(())
}

/// Handlers for the elements that carry URLs. `source` is the text being
/// parsed (the document, or a conditional comment's text starting at byte
/// `base` of the document).
fn link_handlers<'h, 'o: 'h>(
    source: &'h str,
    base: usize,
    finder: &'h RefCell<Finder<'o>>,
) -> ElementHandlers<'h> {
    let options = finder.borrow().options;
    let mut handlers = Vec::new();
    if options.track_links {
        handlers.push(element!("[href]", move |el| {
            if is_click_element(el) {
                visit_element(el, source, base, FoundKind::Click, finder);
            }
            Ok(())
        }));
    }
    if options.proxy_images {
        handlers.push(element!("img[src]", move |el| {
            visit_element(el, source, base, FoundKind::Image, finder);
            Ok(())
        }));
    }
    handlers
}

/// `<a>`, `<area>` and VML (`<v:roundrect>`, `<v:rect>`, `<v:shape>`…) carry
/// clickable hrefs; `<link>`, `<base>` and the like do not.
fn is_click_element(el: &Element) -> bool {
    let name = el.tag_name();
    name == "a" || name == "area" || name.starts_with("v:")
}

fn visit_element(
    el: &Element,
    source: &str,
    base: usize,
    kind: FoundKind,
    finder: &RefCell<Finder>,
) {
    let tag_range = el.source_location().bytes();
    let Some(tag) = source.get(tag_range.clone()) else {
        return;
    };
    let mut finder = finder.borrow_mut();
    let shown_text =
        (kind == FoundKind::Click && finder.tracking.is_some() && el.tag_name() == "a")
            .then(|| address_text::visible_link_text(source, tag_range.end));
    finder.visit_start_tag(tag, base + tag_range.start, kind, shown_text.as_deref());
}

/// Runs the link finder over the text of an `[if …]` conditional comment.
fn visit_comment(
    comment: &Comment,
    html: &str,
    finder: &RefCell<Finder>,
) -> Result<(), RewriteError> {
    let Some((text, base)) = conditional_comment_text(comment, html) else {
        return Ok(());
    };
    run_parser(text, link_handlers(text, base, finder), Vec::new())
}

/// The text of `<!--[if …]>…<![endif]-->` and its offset in `html`, or `None`
/// for an ordinary comment (or a bogus one such as `<![endif]>`).
fn conditional_comment_text<'h>(comment: &Comment, html: &'h str) -> Option<(&'h str, usize)> {
    let location = comment.source_location().bytes();
    let raw = html.get(location.clone())?;
    let is_conditional = raw.starts_with("<!--")
        && raw
            .get("<!--".len().."<!--[if".len())
            .is_some_and(|opening| opening.eq_ignore_ascii_case("[if"));
    if !is_conditional {
        return None;
    }
    // Only now pay for `text()` (it allocates); its length says where the
    // comment's text ends, whichever closer (`-->`, `--!>`, end of input) ended it.
    let start = location.start + "<!--".len();
    let text = html.get(start..start + comment.text().len())?;
    Some((text, start))
}

impl Finder<'_> {
    /// Looks at one start tag (`tag` is its raw text, found at byte `offset`
    /// of the document) and records the edits it needs. `shown_text`: the
    /// link's visible text, when the link-text rule applies to it.
    fn visit_start_tag(
        &mut self,
        tag: &str,
        offset: usize,
        kind: FoundKind,
        shown_text: Option<&str>,
    ) {
        let url_attribute_name = match kind {
            FoundKind::Click => "href",
            FoundKind::Image => "src",
        };
        let mut url_attribute = None;
        let mut opted_out = None;
        let mut label = None;
        let mut name = None;
        let mut utm_off = None;
        for attribute in start_tag::attributes(tag) {
            if attribute.is_named(url_attribute_name) {
                url_attribute.get_or_insert(attribute);
            } else if attribute.is_named("data-linktrack") {
                opted_out.get_or_insert_with(|| is_off(attribute.raw_value(tag)));
                self.remove_attribute(tag, offset, &attribute);
            } else if attribute.is_named("data-linktrack-tag") {
                label.get_or_insert_with(|| tag_label(attribute.raw_value(tag)));
                self.remove_attribute(tag, offset, &attribute);
            } else if attribute.is_named("data-linktrack-name") {
                name.get_or_insert_with(|| tag_label(attribute.raw_value(tag)));
                self.remove_attribute(tag, offset, &attribute);
            } else if attribute.is_named("data-linktrack-utm") {
                utm_off.get_or_insert_with(|| is_off(attribute.raw_value(tag)));
                self.remove_attribute(tag, offset, &attribute);
            } else if let Some(opts_out) = foreign_opt_out(kind, &attribute, tag) {
                if opts_out {
                    opted_out = Some(true);
                }
                self.remove_attribute(tag, offset, &attribute);
            }
        }
        if opted_out == Some(true) {
            return;
        }
        let Some((value_range, quote)) = url_attribute.and_then(|attribute| attribute.value) else {
            return;
        };
        let Some(raw_value) = tag.get(value_range.clone()) else {
            return;
        };
        let url = browser_url(raw_value);
        let counted = if self.template_links {
            will_be_rewritable(&url, self.options.own_base_url)
        } else {
            is_rewritable(&url, self.options.own_base_url)
        };
        if !counted {
            return;
        }
        let position = self.next_position(kind);
        let shows_foreign_address = self
            .tracking
            .as_ref()
            .zip(shown_text)
            .is_some_and(|(tracking, text)| tracking.is_foreign_address_shown(text));
        if shows_foreign_address {
            return;
        }
        self.edits.push(Edit {
            range: offset + value_range.start..offset + value_range.end,
            action: Action::ReplaceUrl {
                link: FoundLink {
                    kind,
                    position,
                    url: url.into_owned(),
                    tag: label.flatten(),
                    name: name.flatten(),
                    utm: utm_off != Some(true),
                },
                quote,
            },
        });
    }

    fn next_position(&mut self, kind: FoundKind) -> u32 {
        let counter = match kind {
            FoundKind::Click => &mut self.clicks,
            FoundKind::Image => &mut self.images,
        };
        *counter = counter.saturating_add(1);
        *counter
    }

    /// Removes the attribute and the whitespace before it, unless the next
    /// attribute is glued to it (`a="1"b="2"`): then the whitespace stays so
    /// the neighbours do not run together.
    fn remove_attribute(&mut self, tag: &str, offset: usize, attribute: &RawAttribute) {
        let bytes = tag.as_bytes();
        let followed_by_separator = bytes
            .get(attribute.end)
            .is_none_or(|&b| b.is_ascii_whitespace() || b == b'>' || b == b'/');
        let mut start = attribute.name_start;
        if followed_by_separator {
            while start > 0 && bytes[start - 1].is_ascii_whitespace() {
                start -= 1;
            }
        }
        self.edits.push(Edit {
            range: offset + start..offset + attribute.end,
            action: Action::Remove,
        });
    }
}

fn is_off(raw_value: &str) -> bool {
    attribute_value_is(raw_value, "off")
}

fn attribute_value_is(raw_value: &str, expected: &str) -> bool {
    decode_attribute_value(raw_value)
        .trim_matches(|c: char| c.is_ascii_whitespace())
        .eq_ignore_ascii_case(expected)
}

/// Other services' per-link markers, honoured as aliases of
/// `data-linktrack="off"` so templates written for them keep their meaning:
/// SendGrid's `clicktracking="off"` and Mailgun's `disable-tracking="true"`.
/// `None`: not such a marker. `Some(opts_out)`: one of them (removed either
/// way, since it is the sender's, not the recipient's); `opts_out` when its
/// value asks for no tracking. Links only: both services mean click tracking.
fn foreign_opt_out(kind: FoundKind, attribute: &RawAttribute, tag: &str) -> Option<bool> {
    const MARKERS: [(&str, &str); 2] = [("clicktracking", "off"), ("disable-tracking", "true")];
    if kind != FoundKind::Click {
        return None;
    }
    let (_, off_value) = MARKERS.iter().find(|(name, _)| attribute.is_named(name))?;
    Some(attribute_value_is(attribute.raw_value(tag), off_value))
}

fn tag_label(raw_value: &str) -> Option<String> {
    let decoded = decode_attribute_value(raw_value);
    let trimmed = decoded.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

/// The URL a browser follows for this raw attribute value: references decoded,
/// then (as the URL parser does) leading/trailing C0 controls and spaces
/// trimmed and every tab, line feed and carriage return removed.
fn browser_url(raw_value: &str) -> Cow<'_, str> {
    let is_strippable = |c: char| c <= ' ';
    let is_removed_inside = |c: char| matches!(c, '\t' | '\n' | '\r');
    match decode_attribute_value(raw_value) {
        Cow::Borrowed(decoded) => {
            let trimmed = decoded.trim_matches(is_strippable);
            if trimmed.contains(is_removed_inside) {
                Cow::Owned(trimmed.replace(is_removed_inside, ""))
            } else {
                Cow::Borrowed(trimmed)
            }
        }
        Cow::Owned(decoded) => {
            let trimmed = decoded.trim_matches(is_strippable);
            Cow::Owned(trimmed.replace(is_removed_inside, ""))
        }
    }
}

/// Merge tags of the template engines our customers use (minijinja/Jinja,
/// Handlebars, Mailchimp, ERB/ASP, Template Toolkit, Salesforce, JS/Velocity).
/// A URL still carrying one is filled in later by someone else, so tracking
/// it would store a URL that is never followed.
const TEMPLATE_MARKERS: [&str; 7] = ["{{", "{%", "*|", "<%", "[%", "%%", "${"];

fn is_rewritable(url: &str, own_base_url: &str) -> bool {
    has_http_scheme(url)
        && !TEMPLATE_MARKERS.iter().any(|marker| url.contains(marker))
        && !is_own_link(url, own_base_url)
}

/// [`is_rewritable`] once minijinja (the build's personaliser) has filled
/// in the URL's `{{ }}` and `{% %}`; other engines' tags stay as written.
fn will_be_rewritable(url: &str, own_base_url: &str) -> bool {
    let filled_later = ["{{", "{%"];
    let other_engines = TEMPLATE_MARKERS
        .iter()
        .filter(|marker| !filled_later.contains(marker));
    (has_http_scheme(url) || url.starts_with("{{"))
        && !other_engines.into_iter().any(|marker| url.contains(marker))
        && !is_own_link(url, own_base_url)
}

fn has_http_scheme(url: &str) -> bool {
    let starts_with = |prefix: &str| {
        url.get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
    };
    starts_with("http://") || starts_with("https://")
}

fn is_own_link(url: &str, own_base_url: &str) -> bool {
    let base = own_base_url.trim();
    if base.is_empty() {
        return false;
    }
    let Some(head) = url.get(..base.len()) else {
        return false;
    };
    head.eq_ignore_ascii_case(base)
        && (base.ends_with('/')
            || matches!(
                url.as_bytes().get(base.len()),
                None | Some(b'/' | b'?' | b'#')
            ))
}

/// Builds the output: the input with every edit applied, in one pass.
fn apply_edits(
    html: &str,
    edits: &[Edit],
    pixel_html: Option<&str>,
    replace: &mut impl FnMut(&FoundLink) -> String,
) -> String {
    let mut out = String::with_capacity(html.len() + html.len() / 8);
    let mut copied_to = 0;
    for edit in edits {
        // Edits never overlap (they come from disjoint attributes); skipping a
        // broken one keeps the output well-formed rather than panicking.
        if edit.range.start < copied_to || edit.range.end > html.len() {
            debug_assert!(false, "overlapping edit {edit:?}");
            continue;
        }
        out.push_str(&html[copied_to..edit.range.start]);
        match &edit.action {
            Action::ReplaceUrl { link, quote } => write_url(&mut out, &replace(link), *quote),
            Action::Remove => {}
            Action::InsertPixel => out.push_str(pixel_html.unwrap_or("")),
        }
        copied_to = edit.range.end;
    }
    out.push_str(&html[copied_to..]);
    out
}

/// Writes `url` as an attribute value in the original quoting; an unquoted
/// value gains double quotes because a URL may contain characters that end an
/// unquoted value.
fn write_url(out: &mut String, url: &str, quote: Quote) {
    let (open, close, quote_char, quote_escape) = match quote {
        Quote::Double => ("", "", '"', "&quot;"),
        Quote::Single => ("", "", '\'', "&#39;"),
        Quote::Unquoted => ("\"", "\"", '"', "&quot;"),
    };
    out.push_str(open);
    let mut plain_from = 0;
    for (index, c) in url.char_indices() {
        let escaped = match c {
            '&' => "&amp;",
            '<' => "&lt;",
            c if c == quote_char => quote_escape,
            _ => continue,
        };
        out.push_str(&url[plain_from..index]);
        out.push_str(escaped);
        plain_from = index + c.len_utf8();
    }
    out.push_str(&url[plain_from..]);
    out.push_str(close);
}

#[cfg(test)]
mod tests;
