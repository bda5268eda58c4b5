//! A letter's plain text part tracked with its HTML's links: each URL of
//! the text that is, byte for byte, one of the HTML's tracked links becomes
//! that link's tracked URL (the same token, so a click from the text counts
//! as one on that link). Nothing else of the text changes: a URL the HTML
//! does not track (`data-linktrack="off"`, the link-text rule, a mode
//! without click tracking, a URL only the text has) stays as written, so
//! the text never tracks what the HTML would not.

/// `text` with each of `links`' originals (as written, as tracked) that
/// stands as a whole URL replaced by its tracked URL; the first pair of an
/// original wins.
pub fn track_text(text: &str, links: &[(String, String)]) -> String {
    // Longest first: of `https://a.example/x` and `https://a.example/x/y`,
    // the text's `https://a.example/x/y` is the second.
    let mut by_length: Vec<&(String, String)> = Vec::with_capacity(links.len());
    for link in links {
        let seen = by_length.iter().any(|(original, _)| original == &link.0);
        if !link.0.is_empty() && !seen {
            by_length.push(link);
        }
    }
    by_length.sort_by_key(|link| std::cmp::Reverse(link.0.len()));
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let at_url_start = out.chars().next_back().is_none_or(|c| !is_url_char(c));
        let found = at_url_start
            .then(|| {
                by_length.iter().find(|(original, _)| {
                    rest.starts_with(original.as_str()) && ends_url(&rest[original.len()..])
                })
            })
            .flatten();
        match found {
            Some((original, tracked)) => {
                out.push_str(tracked);
                rest = &rest[original.len()..];
            }
            None => {
                let next = rest.chars().next().map_or(1, char::len_utf8);
                out.push_str(&rest[..next]);
                rest = &rest[next..];
            }
        }
    }
    out
}

/// Whether a URL may end where `after` begins: the text ends, a space or
/// a closing bracket or quote follows, or sentence punctuation that ends
/// the text or is followed by a space.
fn ends_url(after: &str) -> bool {
    let mut chars = after.chars();
    match chars.next() {
        None => true,
        Some(c) if c.is_whitespace() || "<>\"')]}".contains(c) => true,
        Some(c) if ".,;:!?".contains(c) => chars.next().is_none_or(char::is_whitespace),
        Some(_) => false,
    }
}

/// Characters a URL goes on with: one before an original means it is the
/// middle of another URL (`xhttps://…`), not its start.
fn is_url_char(c: char) -> bool {
    c.is_alphanumeric() || "-._~:/?#[]@!$&*+,;=%".contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links() -> Vec<(String, String)> {
        vec![
            (
                "https://a.example/x".into(),
                "https://t.example/c/ONE".into(),
            ),
            (
                "https://a.example/x/y".into(),
                "https://t.example/c/TWO".into(),
            ),
            (
                "https://a.example/x".into(),
                "https://t.example/c/THREE".into(),
            ),
        ]
    }

    #[test]
    fn whole_urls_become_their_tracked_links_and_the_rest_stays() {
        let text =
            "Read https://a.example/x.\nMore: <https://a.example/x/y> (https://a.example/x)\n";
        assert_eq!(
            track_text(text, &links()),
            "Read https://t.example/c/ONE.\nMore: <https://t.example/c/TWO> (https://t.example/c/ONE)\n"
        );
    }

    #[test]
    fn a_longer_or_different_url_is_left_as_written() {
        for text in [
            "https://a.example/xz",
            "https://a.example/x?utm=1",
            "https://a.example/x.html",
            "xhttps://a.example/x",
            "https://b.example/",
        ] {
            assert_eq!(track_text(text, &links()), text, "{text}");
        }
    }

    #[test]
    fn no_links_no_change_and_unicode_is_kept() {
        let text = "Café — https://a.example/x — ünïcode";
        assert_eq!(track_text(text, &[]), text);
        assert_eq!(
            track_text(text, &links()),
            "Café — https://t.example/c/ONE — ünïcode"
        );
    }
}
