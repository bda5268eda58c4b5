//! Finding attributes inside the raw text of one start tag.
//!
//! lol_html tells us where a start tag is (`source_location()`), but rewriting
//! an attribute through it re-serialises the whole tag (single spaces, double
//! quotes, no line breaks), which breaks the byte-exactness contract, and it
//! gives no location for valueless attributes. So the rewriter splices into the
//! original bytes, and this scanner says where each attribute's name and
//! value are. It follows the HTML tokenizer's states from "before attribute
//! name" to the end of the tag (WHATWG HTML 13.2.5.32–13.2.5.40), so
//! `href = "x"`, `HREF='x'`, `href=x`, `a="x"href="y"` and a value that
//! contains the text `href=` are read exactly as a browser reads them.
//!
//! All delimiters are ASCII, so every offset it returns is a char boundary.

use std::ops::Range;

/// How an attribute value was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quote {
    Double,
    Single,
    Unquoted,
}

/// One attribute as written in a start tag; ranges are byte offsets into the
/// tag text given to [`attributes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawAttribute<'t> {
    /// The name as written (compare with `eq_ignore_ascii_case`).
    pub name: &'t str,
    pub name_start: usize,
    /// The value between the quotes (or the unquoted value); `None` for a
    /// valueless attribute such as `<a href>`.
    pub value: Option<(Range<usize>, Quote)>,
    /// One past the attribute's last byte (closing quote included).
    pub end: usize,
}

impl<'t> RawAttribute<'t> {
    /// The raw (still entity-encoded) value, or `""` for a valueless attribute.
    pub(super) fn raw_value<'a>(&self, tag: &'a str) -> &'a str {
        self.value
            .as_ref()
            .and_then(|(range, _)| tag.get(range.clone()))
            .unwrap_or("")
    }

    pub(super) fn is_named(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
    }
}

/// Iterates over the attributes of `tag`, the raw text of one start tag
/// beginning with `<`. Stops at the tag's `>` (or at the end of the text).
pub(crate) fn attributes(tag: &str) -> Attributes<'_> {
    let bytes = tag.as_bytes();
    // Skip `<` and the tag name.
    let mut position = 1.min(bytes.len());
    while position < bytes.len() && !is_tag_name_end(bytes[position]) {
        position += 1;
    }
    Attributes { tag, position }
}

pub(crate) struct Attributes<'t> {
    tag: &'t str,
    position: usize,
}

impl<'t> Iterator for Attributes<'t> {
    type Item = RawAttribute<'t>;

    fn next(&mut self) -> Option<RawAttribute<'t>> {
        let bytes = self.tag.as_bytes();
        // Before attribute name: whitespace and stray `/` are skipped.
        self.skip_while(|b| is_whitespace(b) || b == b'/');
        if self.position >= bytes.len() || bytes[self.position] == b'>' {
            self.position = bytes.len();
            return None;
        }
        let name_start = self.position;
        // A leading `=` belongs to the name ("unexpected equals sign").
        self.position += 1;
        self.skip_while(|b| !(is_whitespace(b) || b == b'/' || b == b'>' || b == b'='));
        let name = &self.tag[name_start..self.position];
        let name_end = self.position;
        // After attribute name.
        self.skip_while(is_whitespace);
        if bytes.get(self.position) != Some(&b'=') {
            // Valueless; whatever follows is the next attribute (or the end).
            return Some(RawAttribute {
                name,
                name_start,
                value: None,
                end: name_end,
            });
        }
        self.position += 1;
        // Before attribute value.
        self.skip_while(is_whitespace);
        let (value, end) = self.read_value();
        Some(RawAttribute {
            name,
            name_start,
            value,
            end,
        })
    }
}

impl Attributes<'_> {
    fn skip_while(&mut self, keep_going: impl Fn(u8) -> bool) {
        let bytes = self.tag.as_bytes();
        while self.position < bytes.len() && keep_going(bytes[self.position]) {
            self.position += 1;
        }
    }

    /// Reads a value starting at `self.position`; returns it and the
    /// attribute's end.
    fn read_value(&mut self) -> (Option<(Range<usize>, Quote)>, usize) {
        let bytes = self.tag.as_bytes();
        let quote = match bytes.get(self.position) {
            Some(b'"') => Quote::Double,
            Some(b'\'') => Quote::Single,
            // `href=>`: missing value; the tag ends here, value is empty.
            Some(b'>') | None => {
                return (
                    Some((self.position..self.position, Quote::Unquoted)),
                    self.position,
                )
            }
            Some(_) => Quote::Unquoted,
        };
        match quote {
            Quote::Unquoted => {
                let start = self.position;
                self.skip_while(|b| !(is_whitespace(b) || b == b'>'));
                (Some((start..self.position, quote)), self.position)
            }
            Quote::Double | Quote::Single => {
                let quote_byte = bytes[self.position];
                let start = self.position + 1;
                self.position = start;
                self.skip_while(|b| b != quote_byte);
                let value_end = self.position;
                // Step over the closing quote (absent only at end of text).
                self.position = (self.position + 1).min(bytes.len());
                (Some((start..value_end, quote)), self.position)
            }
        }
    }
}

fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b'\t' | b'\n' | b'\x0C' | b'\r' | b' ')
}

fn is_tag_name_end(byte: u8) -> bool {
    is_whitespace(byte) || byte == b'/' || byte == b'>'
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first attribute called `name` (browsers ignore later duplicates).
    fn find<'t>(tag: &'t str, name: &str) -> Option<RawAttribute<'t>> {
        attributes(tag).find(|attribute| attribute.is_named(name))
    }

    fn value_of<'t>(tag: &'t str, name: &str) -> Option<(&'t str, Quote)> {
        let attribute = find(tag, name)?;
        let (range, quote) = attribute.value?;
        Some((&tag[range], quote))
    }

    #[test]
    fn quoting_styles() {
        assert_eq!(
            value_of(r#"<a href="x">"#, "href"),
            Some(("x", Quote::Double))
        );
        assert_eq!(value_of("<a href='x'>", "href"), Some(("x", Quote::Single)));
        assert_eq!(value_of("<a href=x>", "href"), Some(("x", Quote::Unquoted)));
        assert_eq!(
            value_of("<a href=x/>", "href"),
            Some(("x/", Quote::Unquoted))
        );
    }

    #[test]
    fn spacing_case_and_line_breaks() {
        let tag = "<A\r\n  class=\"c\"\r\n  HREF = 'http://x.test/'\r\n>";
        assert_eq!(
            value_of(tag, "href"),
            Some(("http://x.test/", Quote::Single))
        );
        assert_eq!(
            value_of("<a\thref\t=\tx\t>", "href"),
            Some(("x", Quote::Unquoted))
        );
    }

    #[test]
    fn similar_names_and_values_that_contain_href() {
        let tag = r#"<a data-href="http://wrong.test" title='href="no"' href="http://right.test">"#;
        assert_eq!(
            value_of(tag, "href"),
            Some(("http://right.test", Quote::Double))
        );
        let tag = r#"<a title=href=x href=y>"#;
        assert_eq!(value_of(tag, "href"), Some(("y", Quote::Unquoted)));
    }

    #[test]
    fn first_duplicate_wins() {
        assert_eq!(
            value_of("<a href=1 href=2>", "href"),
            Some(("1", Quote::Unquoted))
        );
    }

    #[test]
    fn attributes_glued_together_and_slashes() {
        let tag = r#"<a class="c"href="h"/ id=i/>"#;
        let names: Vec<_> = attributes(tag).map(|a| a.name).collect();
        assert_eq!(names, ["class", "href", "id"]);
        assert_eq!(value_of(tag, "id"), Some(("i/", Quote::Unquoted)));
        let tag = "<img/src=x>";
        assert_eq!(value_of(tag, "src"), Some(("x", Quote::Unquoted)));
    }

    #[test]
    fn valueless_and_empty_values() {
        let tag = "<a href data-linktrack>";
        let found: Vec<_> = attributes(tag).collect();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].value, None);
        assert_eq!(&tag[found[1].name_start..found[1].end], "data-linktrack");
        assert_eq!(
            value_of(r#"<a href="">"#, "href"),
            Some(("", Quote::Double))
        );
        assert_eq!(value_of("<a href=>", "href"), Some(("", Quote::Unquoted)));
    }

    #[test]
    fn attribute_ends_include_the_closing_quote() {
        let tag = r#"<a x="1" y='2' z=3>"#;
        let spans: Vec<_> = attributes(tag).map(|a| &tag[a.name_start..a.end]).collect();
        assert_eq!(spans, [r#"x="1""#, "y='2'", "z=3"]);
    }

    #[test]
    fn odd_names() {
        let tag = r#"<a ="x" "q=1 href=ok>"#;
        let names: Vec<_> = attributes(tag).map(|a| a.name).collect();
        assert_eq!(names, ["=\"x\"", "\"q", "href"]);
        assert_eq!(value_of(tag, "href"), Some(("ok", Quote::Unquoted)));
    }

    #[test]
    fn truncated_tags_do_not_panic() {
        for tag in [
            "",
            "<",
            "<a",
            "<a href",
            "<a href=",
            "<a href=\"x",
            "<a href='",
            "<a é=é",
        ] {
            let _ = attributes(tag).count();
        }
        assert_eq!(value_of("<a href=\"x", "href"), Some(("x", Quote::Double)));
    }

    #[test]
    fn non_ascii_values() {
        let tag = "<a title=\"日本語\" href=\"https://例え.jp/パス\">";
        assert_eq!(
            value_of(tag, "href"),
            Some(("https://例え.jp/パス", Quote::Double))
        );
    }

    /// lol_html (3) reports where each attribute value is; on every start
    /// tag of the real corpus the scanner must agree with it.
    #[test]
    fn agrees_with_lol_html_on_the_corpus() {
        use lol_html::{element, HtmlRewriter, Settings};
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/email-corpus");
        let mut compared = 0;
        for entry in std::fs::read_dir(&dir).expect("email corpus missing") {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|ext| ext != "html") {
                continue;
            }
            let html = std::fs::read_to_string(&path).unwrap();
            let settings = Settings::new()
                .with_strict(false)
                .append_element_content_handler(element!("*", |el| {
                    let tag_range = el.source_location().bytes();
                    let tag = &html[tag_range.clone()];
                    let scanned: Vec<_> = attributes(tag).collect();
                    assert_eq!(scanned.len(), el.attributes().len(), "{tag}");
                    for (ours, theirs) in scanned.iter().zip(el.attributes()) {
                        assert!(ours.name.eq_ignore_ascii_case(&theirs.name()), "{tag}");
                        if let Some(location) = theirs.value_source_location() {
                            let (range, _) = ours.value.clone().expect("value");
                            let ours = tag_range.start + range.start..tag_range.start + range.end;
                            assert_eq!(ours, location.bytes(), "{}: {tag}", path.display());
                            compared += 1;
                        }
                    }
                    Ok(())
                }));
            let mut rewriter = HtmlRewriter::new(settings, |_: &[u8]| {});
            rewriter.write(html.as_bytes()).unwrap();
            rewriter.end().unwrap();
        }
        assert!(compared > 1000, "only {compared} attribute values compared");
    }
}
