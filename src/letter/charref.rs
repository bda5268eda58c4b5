//! Decoding character references in an attribute value the way a browser does.
//!
//! `html-escape` only decodes references that end in `;`. Browsers also accept
//! numeric references without `;` (`&#38`), map `&#128;`–`&#159;` through
//! Windows-1252, replace invalid code points with U+FFFD, and accept the
//! 106 "legacy" named references without `;` (`&amp`, `&copy`) unless, inside
//! an attribute, the next character is `=` or alphanumeric. That last rule is
//! what keeps `?a=1&copy=2` or `&section=news` intact in a URL, so it matters
//! for the URLs we store. This module implements the tokenizer's rules for
//! attribute values (WHATWG HTML, "character reference state") and takes only
//! the table of named references from `html-escape`.

use std::borrow::Cow;

/// Decodes every character reference in the raw text of an attribute value.
///
/// Borrows the input when it contains no `&` (the common case: no allocation).
pub(crate) fn decode_attribute_value(raw: &str) -> Cow<'_, str> {
    let Some(first_ampersand) = raw.find('&') else {
        return Cow::Borrowed(raw);
    };
    let mut decoded = String::with_capacity(raw.len());
    decoded.push_str(&raw[..first_ampersand]);
    let mut rest = &raw[first_ampersand..];
    while let Some(ampersand) = rest.find('&') {
        decoded.push_str(&rest[..ampersand]);
        let after_ampersand = &rest[ampersand + 1..];
        match decode_reference(after_ampersand, &mut decoded) {
            Some(consumed) => rest = &after_ampersand[consumed..],
            None => {
                // Not a reference: the `&` stays as it is.
                decoded.push('&');
                rest = after_ampersand;
            }
        }
    }
    decoded.push_str(rest);
    Cow::Owned(decoded)
}

/// Decodes the reference that starts right after an `&`, appending the result
/// to `out`. Returns how many bytes of `text` it consumed, or `None` when the
/// `&` does not start a reference.
fn decode_reference(text: &str, out: &mut String) -> Option<usize> {
    match text.as_bytes().first()? {
        b'#' => decode_numeric_reference(&text[1..], out).map(|consumed| consumed + 1),
        _ => decode_named_reference(text, out),
    }
}

/// `text` starts after `&#`.
fn decode_numeric_reference(text: &str, out: &mut String) -> Option<usize> {
    let bytes = text.as_bytes();
    let (radix, prefix_len) = match bytes.first() {
        Some(b'x' | b'X') => (16, 1),
        _ => (10, 0),
    };
    let digits_len = bytes[prefix_len..]
        .iter()
        .take_while(|b| char::from(**b).is_digit(radix))
        .count();
    if digits_len == 0 {
        return None;
    }
    let digits = &text[prefix_len..prefix_len + digits_len];
    // Saturate instead of overflowing: any value above 0x10FFFF is invalid anyway.
    let code = digits.chars().fold(0u32, |acc, digit| {
        let value = digit.to_digit(radix).unwrap_or(0);
        acc.saturating_mul(radix).saturating_add(value)
    });
    out.push(numeric_reference_char(code));
    let mut consumed = prefix_len + digits_len;
    if bytes.get(consumed) == Some(&b';') {
        consumed += 1;
    }
    Some(consumed)
}

/// The "numeric character reference end state" of the HTML tokenizer.
fn numeric_reference_char(code: u32) -> char {
    if code == 0 || code > 0x10FFFF || (0xD800..=0xDFFF).contains(&code) {
        return char::REPLACEMENT_CHARACTER;
    }
    if let Some(mapped) = windows_1252_c1(code) {
        return mapped;
    }
    char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// Browsers read `&#128;`–`&#159;` as Windows-1252 bytes (`&#128;` is `€`).
fn windows_1252_c1(code: u32) -> Option<char> {
    const TABLE: [(u32, char); 27] = [
        (0x80, '\u{20AC}'),
        (0x82, '\u{201A}'),
        (0x83, '\u{0192}'),
        (0x84, '\u{201E}'),
        (0x85, '\u{2026}'),
        (0x86, '\u{2020}'),
        (0x87, '\u{2021}'),
        (0x88, '\u{02C6}'),
        (0x89, '\u{2030}'),
        (0x8A, '\u{0160}'),
        (0x8B, '\u{2039}'),
        (0x8C, '\u{0152}'),
        (0x8E, '\u{017D}'),
        (0x91, '\u{2018}'),
        (0x92, '\u{2019}'),
        (0x93, '\u{201C}'),
        (0x94, '\u{201D}'),
        (0x95, '\u{2022}'),
        (0x96, '\u{2013}'),
        (0x97, '\u{2014}'),
        (0x98, '\u{02DC}'),
        (0x99, '\u{2122}'),
        (0x9A, '\u{0161}'),
        (0x9B, '\u{203A}'),
        (0x9C, '\u{0153}'),
        (0x9E, '\u{017E}'),
        (0x9F, '\u{0178}'),
    ];
    TABLE
        .iter()
        .find(|(from, _)| *from == code)
        .map(|(_, to)| *to)
}

/// `text` starts after `&` and is not `#`.
fn decode_named_reference(text: &str, out: &mut String) -> Option<usize> {
    let name_len = text
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric())
        .count();
    if name_len == 0 {
        return None;
    }
    let name = &text[..name_len];
    if text.as_bytes().get(name_len) == Some(&b';') {
        if let Some(value) = named_reference(name) {
            out.push_str(value);
            return Some(name_len + 1);
        }
    }
    // Without `;` only a legacy name counts, matched as the longest prefix.
    // In an attribute it is left alone when followed by `=` or an
    // alphanumeric (`&copy=`, `&section`), which is what keeps query strings
    // intact.
    let (legacy_len, value) = longest_legacy_prefix(name)?;
    let next = text.as_bytes().get(legacy_len).copied();
    if next.is_some_and(|b| b == b'=' || b.is_ascii_alphanumeric()) {
        return None;
    }
    out.push(value);
    Some(legacy_len)
}

fn named_reference(name: &str) -> Option<&'static str> {
    html_escape::NAMED_ENTITIES
        .binary_search_by(|(entry, _)| (*entry).cmp(name.as_bytes()))
        .ok()
        .map(|index| html_escape::NAMED_ENTITIES[index].1)
}

/// The named references browsers accept without a `;`: the Latin-1 set
/// (U+00A0–U+00FF, in code point order) plus a few ASCII ones and their
/// uppercase spellings.
const LATIN1_LEGACY_NAMES: [&str; 96] = [
    "nbsp", "iexcl", "cent", "pound", "curren", "yen", "brvbar", "sect", "uml", "copy", "ordf",
    "laquo", "not", "shy", "reg", "macr", "deg", "plusmn", "sup2", "sup3", "acute", "micro",
    "para", "middot", "cedil", "sup1", "ordm", "raquo", "frac14", "frac12", "frac34", "iquest",
    "Agrave", "Aacute", "Acirc", "Atilde", "Auml", "Aring", "AElig", "Ccedil", "Egrave", "Eacute",
    "Ecirc", "Euml", "Igrave", "Iacute", "Icirc", "Iuml", "ETH", "Ntilde", "Ograve", "Oacute",
    "Ocirc", "Otilde", "Ouml", "times", "Oslash", "Ugrave", "Uacute", "Ucirc", "Uuml", "Yacute",
    "THORN", "szlig", "agrave", "aacute", "acirc", "atilde", "auml", "aring", "aelig", "ccedil",
    "egrave", "eacute", "ecirc", "euml", "igrave", "iacute", "icirc", "iuml", "eth", "ntilde",
    "ograve", "oacute", "ocirc", "otilde", "ouml", "divide", "oslash", "ugrave", "uacute", "ucirc",
    "uuml", "yacute", "thorn", "yuml",
];

const ASCII_LEGACY_NAMES: [(&str, char); 10] = [
    ("amp", '&'),
    ("AMP", '&'),
    ("lt", '<'),
    ("LT", '<'),
    ("gt", '>'),
    ("GT", '>'),
    ("quot", '"'),
    ("QUOT", '"'),
    ("COPY", '\u{A9}'),
    ("REG", '\u{AE}'),
];

fn longest_legacy_prefix(name: &str) -> Option<(usize, char)> {
    let latin1 = LATIN1_LEGACY_NAMES
        .iter()
        .zip(0xA0u32..)
        .filter_map(|(legacy, code)| Some((*legacy, char::from_u32(code)?)));
    latin1
        .chain(ASCII_LEGACY_NAMES.iter().copied())
        .filter(|(legacy, _)| name.starts_with(legacy))
        .max_by_key(|(legacy, _)| legacy.len())
        .map(|(legacy, value)| (legacy.len(), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(raw: &str) -> String {
        decode_attribute_value(raw).into_owned()
    }

    #[test]
    fn text_without_ampersand_is_borrowed() {
        assert!(matches!(
            decode_attribute_value("https://x.test/a"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn named_references_with_semicolon() {
        assert_eq!(decode("a=1&amp;b=2"), "a=1&b=2");
        assert_eq!(decode("&lt;&gt;&quot;&apos;"), "<>\"'");
        assert_eq!(decode("caf&eacute;&hellip;"), "café…");
        assert_eq!(decode("&NotAnEntity;"), "&NotAnEntity;");
    }

    #[test]
    fn numeric_references_with_and_without_semicolon() {
        assert_eq!(decode("a&#38;b"), "a&b");
        assert_eq!(decode("a&#x26;b&#X26;c"), "a&b&c");
        assert_eq!(decode("a&#38b"), "a&b");
        assert_eq!(decode("&#x;&#;&#xZ"), "&#x;&#;&#xZ");
    }

    #[test]
    fn invalid_numeric_references_become_replacement_characters() {
        assert_eq!(decode("&#0;"), "\u{FFFD}");
        assert_eq!(decode("&#xD800;"), "\u{FFFD}");
        assert_eq!(decode("&#x110000;"), "\u{FFFD}");
        assert_eq!(decode("&#99999999999999999999;"), "\u{FFFD}");
        assert_eq!(decode("&#128;&#x99;"), "€™");
    }

    #[test]
    fn legacy_names_without_semicolon_follow_the_attribute_rule() {
        assert_eq!(decode("a=1&amp"), "a=1&");
        assert_eq!(decode("a=1&amp&b=2"), "a=1&&b=2");
        assert_eq!(decode("?a=1&copy=2"), "?a=1&copy=2");
        assert_eq!(decode("?x=1&section=news"), "?x=1&section=news");
        assert_eq!(decode("?x=1&notit;"), "?x=1&notit;");
        assert_eq!(decode("&copy-2024"), "©-2024");
        assert_eq!(decode("&lang=en"), "&lang=en");
    }

    #[test]
    fn legacy_table_agrees_with_the_named_reference_table() {
        for (name, code) in LATIN1_LEGACY_NAMES.iter().zip(0xA0u32..) {
            let expected = char::from_u32(code).unwrap().to_string();
            assert_eq!(named_reference(name), Some(expected.as_str()), "{name}");
        }
        for (name, value) in ASCII_LEGACY_NAMES {
            assert_eq!(
                named_reference(name),
                Some(value.to_string().as_str()),
                "{name}"
            );
        }
    }

    #[test]
    fn lone_and_trailing_ampersands_stay() {
        assert_eq!(decode("&"), "&");
        assert_eq!(decode("a & b &&"), "a & b &&");
        assert_eq!(decode("é&é"), "é&é");
    }
}
