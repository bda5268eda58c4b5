//! The link-text rule's two questions: what does a link's visible text
//! say, and does it show an address on another site than the tracking
//! host's (docs/domains.md, "What a filter sees")?
//!
//! Filters compare a link's text with its href: `<a href="https://t.example/c/…">www.acme.com</a>`
//! is what phishing looks like (rspamd `PHISHING`, SpamAssassin
//! `HTTPS_HTTP_MISMATCH`). Registrable domains are compared (the public
//! suffix list, `psl`): `click.acme.com` may stand in for `www.acme.com`,
//! as filters accept it.

use super::charref::decode_attribute_value;

/// The tracking base URL as the rule needs it.
#[derive(Debug, Clone)]
pub(crate) struct TrackingBase {
    /// Its registrable domain (lowercase), or the whole host when it has none
    /// (an IP address, `localhost`).
    site: String,
    /// The base is `https://`: an `https://` text may point at it.
    https: bool,
}

impl TrackingBase {
    pub(crate) fn parse(base_url: &str) -> TrackingBase {
        let base = base_url.trim();
        let https = starts_with_ignore_case(base, "https://");
        let host = host_of_url(base).unwrap_or_default();
        TrackingBase {
            site: registrable_domain(&host),
            https,
        }
    }

    /// `text` shows a URL or domain that a tracked link would contradict:
    /// another registrable domain, or an `https://` URL when the base is
    /// plain `http://`.
    pub(crate) fn is_foreign_address_shown(&self, text: &str) -> bool {
        shown_addresses(text).any(|shown| {
            registrable_domain(&shown.host) != self.site || (shown.https && !self.https)
        })
    }
}

/// An address a text shows.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ShownAddress {
    /// Lowercase host name.
    host: String,
    /// Written as an `https://` URL.
    https: bool,
}

/// The addresses shown in `text`: `http(s)://` URLs, and words that are a
/// host name under a known public suffix (`www.acme-inc.com`,
/// `HTMLemail.io/path`). E-mail addresses are not web addresses.
fn shown_addresses(text: &str) -> impl Iterator<Item = ShownAddress> + '_ {
    text.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '<' | '>'
                    | '('
                    | ')'
                    | '['
                    | ']'
                    | '"'
                    | '\''
                    | ','
                    | ';'
                    | '|'
                    | '«'
                    | '»'
                    | '“'
                    | '”'
            )
    })
    .filter_map(shown_address)
}

fn shown_address(word: &str) -> Option<ShownAddress> {
    let word = word.trim_matches(|c: char| matches!(c, '.' | ':' | '!' | '?' | '*' | '→'));
    if word.is_empty() {
        return None;
    }
    let https = starts_with_ignore_case(word, "https://");
    if https || starts_with_ignore_case(word, "http://") {
        let host = host_of_url(word)?;
        return Some(ShownAddress { host, https });
    }
    if word.contains('@') {
        return None;
    }
    let host = word
        .split(['/', '?', '#'])
        .next()?
        .split(':')
        .next()?
        .to_ascii_lowercase();
    is_public_host_name(&host).then_some(ShownAddress { host, https: false })
}

/// A host name (ASCII labels of letters, digits and hyphens) with at least
/// one label under a suffix of the public suffix list.
fn is_public_host_name(host: &str) -> bool {
    let labels_ok = host.split('.').all(|label| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
    });
    if !labels_ok || !host.contains('.') {
        return false;
    }
    let known_suffix = psl::suffix(host.as_bytes()).is_some_and(|suffix| suffix.is_known());
    known_suffix && psl::domain(host.as_bytes()).is_some()
}

/// The lowercase host of an `http(s)://` URL, without user info or port.
fn host_of_url(url: &str) -> Option<String> {
    let after_scheme = url.split_once("://")?.1;
    let authority = after_scheme.split(['/', '?', '#', '\\']).next()?;
    let host_port = authority.rsplit('@').next()?;
    let host = if host_port.starts_with('[') {
        host_port.split_inclusive(']').next()?
    } else {
        host_port.split(':').next()?
    };
    (!host.is_empty()).then(|| host.trim_end_matches('.').to_ascii_lowercase())
}

/// The registrable domain ("eTLD+1") of a host, lowercase; the host itself
/// when it has none (an address, `localhost`, a bare suffix).
pub fn registrable_domain(host: &str) -> String {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let is_address = host.parse::<std::net::IpAddr>().is_ok() || host.starts_with('[');
    if is_address {
        return host;
    }
    psl::domain_str(&host).map_or_else(|| host.clone(), str::to_owned)
}

fn starts_with_ignore_case(text: &str, prefix: &str) -> bool {
    text.get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
}

/// The visible text of the link whose start tag ends at byte `from` of
/// `source`: up to its `</a>` (or the next `<a`, which closes it), tags and
/// comments dropped, character references decoded, white space collapsed.
pub(crate) fn visible_link_text(source: &str, from: usize) -> String {
    let rest = source.get(from..).unwrap_or("");
    let inner = &rest[..anchor_content_end(rest)];
    let mut text = String::with_capacity(inner.len().min(256));
    let mut remaining = inner;
    while let Some(open) = remaining.find('<') {
        text.push_str(&remaining[..open]);
        let markup = &remaining[open..];
        if breaks_text(markup) {
            text.push(' ');
        }
        let close = if markup.starts_with("<!--") {
            markup.find("-->").map(|at| at + 3)
        } else {
            markup.find('>').map(|at| at + 1)
        };
        remaining = close.map_or("", |close| &markup[close..]);
    }
    text.push_str(remaining);
    let decoded = decode_attribute_value(&text);
    decoded.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Block-level and line-breaking tags separate words; inline ones
/// (`<b>`, `<span>`, `<font>`) do not: `www.<b>acme</b>.com` reads as one
/// address.
fn breaks_text(markup: &str) -> bool {
    const BREAKING: [&str; 16] = [
        "br", "p", "div", "td", "th", "tr", "table", "li", "ul", "ol", "h1", "h2", "h3", "h4",
        "hr", "img",
    ];
    let name: String = markup
        .trim_start_matches(['<', '/'])
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect::<String>()
        .to_ascii_lowercase();
    BREAKING.contains(&name.as_str())
}

/// Where an anchor's content ends in `rest`: its `</a>`, the next `<a`
/// start tag (anchors do not nest), or the end.
fn anchor_content_end(rest: &str) -> usize {
    let bytes = rest.as_bytes();
    let ends_tag_name = |at: usize| {
        bytes
            .get(at)
            .is_none_or(|&b| b.is_ascii_whitespace() || b == b'>' || b == b'/')
    };
    let mut at = 0;
    while let Some(found) = memchr::memchr(b'<', &bytes[at..]) {
        let open = at + found;
        let after = &bytes[open + 1..];
        let closing = after.first() == Some(&b'/');
        let name_at = open + 1 + usize::from(closing);
        let is_anchor = bytes
            .get(name_at)
            .is_some_and(|b| b.eq_ignore_ascii_case(&b'a'))
            && ends_tag_name(name_at + 1);
        if is_anchor {
            return open;
        }
        at = open + 1;
    }
    rest.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shows_foreign(base: &str, text: &str) -> bool {
        TrackingBase::parse(base).is_foreign_address_shown(text)
    }

    #[test]
    fn a_domain_or_url_on_another_site_is_foreign() {
        let base = "https://t.example.test";
        assert!(shows_foreign(base, "www.acme-inc.com"));
        assert!(shows_foreign(base, "Visit HTMLemail.io today."));
        assert!(shows_foreign(base, "www.YourSiteName.com"));
        assert!(shows_foreign(base, "https://shop.example.com/a?b=1"));
        assert!(shows_foreign(base, "(http://10.0.0.1/x)"));
    }

    #[test]
    fn ordinary_words_emails_and_file_names_are_no_address() {
        let base = "https://t.example.test";
        for text in [
            "Read more",
            "e.g. this",
            "version 3.5",
            "report.pdf",
            "news@acme.com",
            "",
            "Click here…",
        ] {
            assert!(!shows_foreign(base, text), "{text:?}");
        }
    }

    #[test]
    fn the_same_registrable_domain_is_not_foreign() {
        let base = "https://click.brand.co.uk";
        assert!(!shows_foreign(base, "www.brand.co.uk"));
        assert!(!shows_foreign(base, "https://BRAND.co.uk/shop"));
        assert!(shows_foreign(base, "www.other.co.uk"));
        // An https:// text behind a plain-http base is a mismatch filters see.
        assert!(shows_foreign(
            "http://click.brand.co.uk",
            "https://brand.co.uk/"
        ));
        assert!(!shows_foreign(
            "http://click.brand.co.uk",
            "http://brand.co.uk/"
        ));
    }

    #[test]
    fn visible_text_drops_tags_comments_and_decodes_references() {
        let html = r#"<a href="x"><span>www.<b>acme</b>&#46;com</span><!-- hi --></a> after"#;
        let from = html.find('>').unwrap() + 1;
        // Inline tags join, block tags separate.
        assert_eq!(visible_link_text(html, from), "www.acme.com");
        let html = "<a href=x>www.a.com<br>b.test</a>";
        assert_eq!(visible_link_text(html, 10), "www.a.com b.test");
        let html = "<A HREF=x>Copy:\r\n  https://a.test/&amp;x</A>";
        let from = html.find('>').unwrap() + 1;
        assert_eq!(visible_link_text(html, from), "Copy: https://a.test/&x");
        let html = "<a href=x>one<a href=y>two</a>";
        assert_eq!(visible_link_text(html, 10), "one");
        let html = "<a href=x>one <abbr>two</abbr></a>";
        assert_eq!(visible_link_text(html, 10), "one two");
    }
}
