//! The click map: a copy of the mailing's HTML with a badge (clicks and share
//! of all human clicks) in front of every tracked link, shown in a sandboxed
//! `<iframe srcdoc>`.
//!
//! # Matching links to positions
//!
//! A click's `position` is the builder's numbering: the n-th tracked link in
//! document order, counting VML links inside Outlook conditional comments
//! (`letter::rewrite`). Browsers never render those comments, so counting
//! `<a>` elements in the browser would drift. Instead the copy is made with
//! the builder's own rewriter: every tracked URL is replaced by a marker
//! `https://lt-pos.invalid/{n}/`; then a lol_html pass puts the original URL
//! back on each `<a>`/`<area>` with a marker, adds `data-lt-pos="n"` and a
//! badge: before an `<a>`, after the `</map>` of an `<area>`, after the
//! conditional comment (`<![endif]-->`) of a VML link. Markers left in
//! comments get their URL back textually. Positions therefore match the builder exactly for the
//! HTML given; the saved creative is the template before personalisation,
//! so a template that makes links in a loop can number differently.

use crate::letter::{rewrite, FoundKind, FoundLink, RewriteError, RewriteOptions};
use lol_html::html_content::ContentType;
use lol_html::{doc_comments, element, end, end_tag, rewrite_str, RewriteStrSettings};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

const MARKER: &str = "https://lt-pos.invalid/";

/// The style of one badge, inline so the copy needs no `<style>` element
/// (inserting one before a doctype would switch the page to quirks mode).
/// Colour and size come from [`heat`].
const BADGE_STYLE: &str = "display:inline-block;margin:0 4px 0 0;padding:1px 6px;\
border-radius:9px;font-family:Arial,sans-serif;font-weight:bold;color:#fff;\
box-shadow:0 0 0 2px #fff;vertical-align:middle;text-decoration:none;white-space:nowrap";

/// Badge grades, from "no click" to "the most clicked link": background and
/// font size. A link without clicks is a small grey pill, the hottest a
/// large deep red one, so the eye finds the hot links first.
const GRADES: [(&str, u32); 5] = [
    ("#a0aec0", 10),
    ("#f6ad55", 11),
    ("#ed8936", 12),
    ("#dd6b20", 14),
    ("#c53030", 16),
];

/// The grade (index into [`GRADES`]) of a link with `clicks`, against the
/// most clicked link's `max`: 0 for no click, 1 to 4 by quarter of `max`.
fn heat(clicks: u64, max: u64) -> usize {
    if clicks == 0 || max == 0 {
        return 0;
    }
    let quarters = (clicks * 4).div_ceil(max);
    quarters.clamp(1, 4) as usize
}

/// The copy of `html` with a badge per link: `clicks` is human clicks by
/// position.
pub(crate) fn render(html: &str, clicks: &BTreeMap<u32, u64>) -> Result<String, RewriteError> {
    let total: u64 = clicks.values().sum();
    let max = clicks.values().copied().max().unwrap_or(0);
    let mut urls: BTreeMap<u32, String> = BTreeMap::new();
    let options = RewriteOptions {
        track_links: true,
        proxy_images: false,
        own_base_url: "",
        pixel_html: None,
        shown_address_base: None,
    };
    let marked = rewrite(html, &options, |found: &FoundLink| match found.kind {
        FoundKind::Click => {
            urls.insert(found.position, found.url.clone());
            format!("{MARKER}{}/", found.position)
        }
        FoundKind::Image => found.url.clone(),
    })?;
    let badge_for = |position: u32| {
        let n = clicks.get(&position).copied().unwrap_or(0);
        badge(position, n, total, max)
    };
    // An `<area>` is not drawn, its `<map>` lays over an image: the badges
    // of a map's areas go after its `</map>` (kept here until it closes).
    let area_badges: Rc<RefCell<Vec<String>>> = Rc::default();
    let badged = rewrite_str(
        &marked,
        RewriteStrSettings::new()
            .append_element_content_handler(element!("a[href], area[href]", |el| {
                let Some(position) = el
                    .get_attribute("href")
                    .as_deref()
                    .and_then(marker_position)
                else {
                    return Ok(());
                };
                // lol_html writes the value as given apart from quotes, and a
                // raw `&copy=` in a query would read as `©`: escape it here.
                let url = urls.get(&position).map(String::as_str).unwrap_or_default();
                el.set_attribute("href", &html_escape::encode_double_quoted_attribute(url))?;
                el.set_attribute("data-lt-pos", &position.to_string())?;
                if el.tag_name() == "a" {
                    el.before(&badge_for(position), ContentType::Html);
                } else {
                    area_badges.borrow_mut().push(badge_for(position));
                }
                Ok(())
            }))
            .append_element_content_handler(element!("map", |el| {
                let pending = Rc::clone(&area_badges);
                el.on_end_tag(end_tag!(move |end| {
                    let badges = std::mem::take(&mut *pending.borrow_mut());
                    end.after(&badges.concat(), ContentType::Html);
                    Ok(())
                }))
            }))
            // A VML link lives in an Outlook conditional comment browsers
            // skip: its badge goes right after the comment (`<![endif]-->`).
            .append_document_content_handler(doc_comments!(|comment| {
                let badges: String = comment_markers(&comment.text()).map(&badge_for).collect();
                comment.after(&badges, ContentType::Html);
                Ok(())
            }))
            // A `<map>` left open (closed implicitly, so no end-tag handler
            // ran) still shows its areas' badges, at the end.
            .append_document_content_handler(end!(|end| {
                end.append(&area_badges.borrow_mut().concat(), ContentType::Html);
                Ok(())
            })),
    )
    .map_err(RewriteError::Parser)?;
    Ok(restore_markers(&badged, &urls))
}

/// Longest link name shown (characters).
const MAX_NAME_CHARS: usize = 60;

/// What each tracked link is called in the creative, by position: the
/// text of its `<a>` (spaces collapsed), else its image's `alt` (an image
/// map's `<area>`: its own `alt`), else its `title`; positions without either are left out (the page shows the
/// URL). Numbered as [`render`] numbers them.
pub(crate) fn link_names(html: &str) -> Result<BTreeMap<u32, String>, RewriteError> {
    let options = RewriteOptions {
        track_links: true,
        proxy_images: false,
        own_base_url: "",
        pixel_html: None,
        shown_address_base: None,
    };
    let marked = rewrite(html, &options, |found: &FoundLink| match found.kind {
        FoundKind::Click => format!("{MARKER}{}/", found.position),
        FoundKind::Image => found.url.clone(),
    })?;
    // Per position: (text, an image's alt, the title).
    type Parts = BTreeMap<u32, (String, String, String)>;
    let parts: Rc<RefCell<Parts>> = Rc::default();
    let current: Rc<RefCell<Option<u32>>> = Rc::default();
    let (open_parts, open_current) = (Rc::clone(&parts), Rc::clone(&current));
    let (text_parts, text_current) = (Rc::clone(&parts), Rc::clone(&current));
    let (img_parts, img_current) = (Rc::clone(&parts), Rc::clone(&current));
    let area_parts = Rc::clone(&parts);
    rewrite_str(
        &marked,
        RewriteStrSettings::new()
            .append_element_content_handler(element!("a[href]", move |el| {
                let position = el
                    .get_attribute("href")
                    .as_deref()
                    .and_then(marker_position);
                *open_current.borrow_mut() = position;
                if let Some(p) = position {
                    let title = el.get_attribute("title").unwrap_or_default();
                    open_parts
                        .borrow_mut()
                        .entry(p)
                        .or_default()
                        .2
                        .push_str(&title);
                }
                let done = Rc::clone(&open_current);
                if el.can_have_content() {
                    el.on_end_tag(end_tag!(move |_end| {
                        *done.borrow_mut() = None;
                        Ok(())
                    }))?;
                }
                Ok(())
            }))
            .append_element_content_handler(lol_html::text!("a[href]", move |chunk| {
                if let Some(p) = *text_current.borrow() {
                    let mut parts = text_parts.borrow_mut();
                    parts.entry(p).or_default().0.push_str(chunk.as_str());
                }
                Ok(())
            }))
            .append_element_content_handler(element!("a[href] img[alt]", move |el| {
                if let (Some(p), Some(alt)) = (*img_current.borrow(), el.get_attribute("alt")) {
                    let mut parts = img_parts.borrow_mut();
                    let entry = &mut parts.entry(p).or_default().1;
                    entry.push(' ');
                    entry.push_str(&alt);
                }
                Ok(())
            }))
            // An image map's areas are links with no text: their alt names them.
            .append_element_content_handler(element!("area[href]", move |el| {
                let href = el.get_attribute("href");
                if let Some(p) = href.as_deref().and_then(marker_position) {
                    let mut parts = area_parts.borrow_mut();
                    let entry = parts.entry(p).or_default();
                    entry.1.push(' ');
                    entry
                        .1
                        .push_str(&el.get_attribute("alt").unwrap_or_default());
                    entry
                        .2
                        .push_str(&el.get_attribute("title").unwrap_or_default());
                }
                Ok(())
            })),
    )
    .map_err(RewriteError::Parser)?;
    let parts = std::mem::take(&mut *parts.borrow_mut());
    Ok(parts
        .into_iter()
        .filter_map(|(position, (text, alt, title))| {
            let name = [text, alt, title]
                .iter()
                .map(|part| tidy_name(part))
                .find(|name| !name.is_empty())?;
            Some((position, name))
        })
        .collect())
}

/// Character references decoded, spaces collapsed, cut at
/// [`MAX_NAME_CHARS`].
fn tidy_name(raw: &str) -> String {
    let decoded = html_escape::decode_html_entities(raw);
    let name = decoded.split_whitespace().collect::<Vec<_>>().join(" ");
    match name.char_indices().nth(MAX_NAME_CHARS) {
        Some((at, _)) => format!("{}…", &name[..at]),
        None => name,
    }
}

/// `12 · 34%` in a pill graded by [`heat`]; the title names the position.
fn badge(position: u32, clicks: u64, total: u64, max: u64) -> String {
    let grade = heat(clicks, max);
    let (background, size) = GRADES[grade];
    let share = if total == 0 {
        0.0
    } else {
        clicks as f64 * 100.0 / total as f64
    };
    format!(
        r#"<span class="lt-badge" data-lt-pos="{position}" data-lt-heat="{grade}" title="link {position}: {clicks} clicks" style="{BADGE_STYLE};background:{background};font-size:{size}px;line-height:{line}px">{clicks} · {share:.1}%</span>"#,
        line = size + 4
    )
}

/// The position in a marker URL (`https://lt-pos.invalid/7/` → 7).
fn marker_position(href: &str) -> Option<u32> {
    href.strip_prefix(MARKER)?.strip_suffix('/')?.parse().ok()
}

/// The positions of the markers in a comment's text, in order.
fn comment_markers(text: &str) -> impl Iterator<Item = u32> + '_ {
    text.match_indices(MARKER).filter_map(|(at, _)| {
        let after = &text[at + MARKER.len()..];
        let end = after.find('/')?;
        marker_position(&text[at..at + MARKER.len() + end + 1])
    })
}

/// Put the URL back where a marker is left (inside conditional comments),
/// HTML-escaped since it lands in an attribute.
fn restore_markers(html: &str, urls: &BTreeMap<u32, String>) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(at) = rest.find(MARKER) {
        out.push_str(&rest[..at]);
        let after = &rest[at + MARKER.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let position = after[..digits].parse::<u32>().ok();
        match (position, after[digits..].starts_with('/')) {
            (Some(p), true) => {
                let url = urls.get(&p).map(String::as_str).unwrap_or_default();
                out.push_str(&html_escape::encode_double_quoted_attribute(url));
                rest = &after[digits + 1..];
            }
            _ => {
                out.push_str(MARKER);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_named_by_their_text_then_alt_then_title() {
        let html = concat!(
            "<p><a href=\"https://example.com/a\">Read   the <b>news</b> &amp; more</a>",
            "<a href=\"https://example.com/b\"><img src=\"x.png\" alt=\"Logo\"></a>",
            "<a href=\"https://example.com/c\" title=\"Shop\"> </a>",
            "<a href=\"https://example.com/a\">Read the news</a></p>"
        );
        let names = link_names(html).unwrap();
        assert_eq!(names[&1], "Read the news & more");
        assert_eq!(names[&2], "Logo");
        assert_eq!(names[&3], "Shop");
        assert_eq!(names[&4], "Read the news", "the same URL, its own position");
    }

    #[test]
    fn image_map_areas_are_named_by_their_alt_then_title() {
        let html = concat!(
            "<img src=\"m.png\" usemap=\"#m\"><map name=\"m\">",
            "<area shape=\"rect\" coords=\"0,0,10,10\" href=\"https://example.com/shoes\" alt=\"Shoes\">",
            "<area shape=\"rect\" coords=\"10,0,20,10\" href=\"https://example.com/hats\" title=\"Hats\">",
            "</map>"
        );
        let names = link_names(html).unwrap();
        assert_eq!(
            names.get(&1).map(String::as_str),
            Some("Shoes"),
            "{names:?}"
        );
        assert_eq!(names.get(&2).map(String::as_str), Some("Hats"), "{names:?}");
    }

    const LETTER: &str = concat!(
        "<!DOCTYPE html><html><body>",
        "<!--[if mso]><v:roundrect href=\"https://example.com/vml\">x</v:roundrect><![endif]-->",
        "<a href=\"https://example.com/a?x=1&amp;y=2\">A</a>",
        "<a href=\"mailto:someone@example.com\">mail</a>",
        "<map><area href=\"https://example.com/area\"></map>",
        "<a href='https://example.com/b'>B</a>",
        "</body></html>"
    );

    #[test]
    fn positions_count_vml_and_badges_show_counts_and_shares() {
        let clicks = BTreeMap::from([(1, 5), (2, 30), (4, 10)]);
        let out = render(LETTER, &clicks).unwrap();
        // Position 1 is the VML button, URL restored; its badge follows the
        // conditional comment (browsers skip the comment's content).
        assert!(
            out.contains(r#"<v:roundrect href="https://example.com/vml">"#),
            "{out}"
        );
        assert!(
            out.contains(r#"<![endif]--><span class="lt-badge" data-lt-pos="1""#),
            "{out}"
        );
        assert!(out.contains("5 · 11.1%"), "{out}");
        // The area (position 3, no click) gets its badge after its map.
        assert!(
            out.contains(r#"</map><span class="lt-badge" data-lt-pos="3""#),
            "{out}"
        );
        assert!(out.contains(r#"data-lt-pos="2""#));
        assert!(out.contains("30 · 66.7%"), "{out}");
        assert!(
            out.contains(r#"data-lt-pos="3""#),
            "the area keeps its position"
        );
        assert!(out.contains("10 · 22.2%"), "{out}");
        assert!(out.contains(r#"href="mailto:someone@example.com""#));
        assert!(out.contains("https://example.com/a?x=1&amp;y=2"), "{out}");
        assert!(!out.contains(MARKER), "{out}");
        assert_eq!(out.matches("class=\"lt-badge\"").count(), 4, "{out}");
    }

    #[test]
    fn an_unclosed_map_still_shows_its_area_badges() {
        let letter =
            "<p><map><area href=\"https://example.com/x\"><area href=\"https://example.com/y\">";
        let out = render(letter, &BTreeMap::from([(2, 3)])).unwrap();
        assert_eq!(out.matches("class=\"lt-badge\"").count(), 2, "{out}");
        assert!(out.contains("3 · 100.0%"), "{out}");
    }

    #[test]
    fn badges_are_graded_from_no_click_to_the_hottest_link() {
        assert_eq!(heat(0, 30), 0);
        assert_eq!(heat(1, 30), 1);
        assert_eq!(heat(16, 30), 3);
        assert_eq!(heat(30, 30), 4);
        let out = render(LETTER, &BTreeMap::from([(2, 30), (4, 0)])).unwrap();
        assert!(out.contains(r#"data-lt-heat="4""#), "{out}");
        assert!(out.contains(r#"data-lt-heat="0""#), "{out}");
        assert!(out.contains("background:#a0aec0"), "{out}");
    }

    #[test]
    fn markers_in_text_that_are_not_ours_survive() {
        let urls = BTreeMap::from([(1, "https://e.com/?a=\"b\"".to_owned())]);
        assert_eq!(
            restore_markers(
                "x https://lt-pos.invalid/1/ https://lt-pos.invalid/zz",
                &urls
            ),
            "x https://e.com/?a=&quot;b&quot; https://lt-pos.invalid/zz"
        );
    }
}
