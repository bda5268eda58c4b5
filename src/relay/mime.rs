//! A relayed message's HTML parts: found in its MIME tree (mail-parser;
//! multipart/alternative and mixed, any nesting), their bodies decoded
//! (quoted-printable, base64, 7bit and 8bit; the declared charset, read
//! with encoding_rs) and, once rewritten, put back in place of the old
//! ones as UTF-8 encoded as `build` encodes its own parts
//! (`delivery::body::encode_text`). Everything else in the message stays
//! byte for byte as it came. Attachments (a `.html` file sent as one)
//! are never touched.

use super::headers::{header_block_end, without_fields};
use crate::delivery::body::encode_text;
use base64::Engine;
use mail_parser::{Encoding, MessageParser, MimeHeaders};
use std::ops::Range;

/// One HTML part of a message: where it is and its text.
#[derive(Debug, Clone)]
pub(crate) struct HtmlPart {
    /// The part's header block, its blank line included.
    pub header: Range<usize>,
    /// The part's body as it came (transfer-encoded).
    pub body: Range<usize>,
    /// The body decoded into text.
    pub html: String,
}

/// Why a message cannot be read at all.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MimeError {
    #[error("the message has no header fields (RFC 5322: headers, a blank line, the body)")]
    NoHeaders,
}

/// The message's HTML parts that can be rewritten, in order. A part whose
/// body does not decode in its charset is left out (forwarded as it came).
pub(crate) fn html_parts(raw: &[u8]) -> Result<Vec<HtmlPart>, MimeError> {
    if header_block_end(raw).is_none() {
        return Err(MimeError::NoHeaders);
    }
    let Some(message) = MessageParser::default().parse(raw) else {
        return Err(MimeError::NoHeaders);
    };
    let mut found = Vec::new();
    for part in &message.parts {
        let is_html = part.content_type().is_some_and(|t| {
            t.ctype().eq_ignore_ascii_case("text")
                && t.subtype().is_some_and(|s| s.eq_ignore_ascii_case("html"))
        });
        let attached = part
            .content_disposition()
            .is_some_and(|d| d.is_attachment());
        if !is_html || attached {
            continue;
        }
        let header = part.offset_header as usize..part.offset_body as usize;
        let body = part.offset_body as usize..(part.offset_end as usize).min(raw.len());
        if header.end > body.start || body.start > body.end {
            continue;
        }
        let charset = part
            .content_type()
            .and_then(|t| t.attribute("charset"))
            .unwrap_or("utf-8");
        let Some(html) = decode_body(&raw[body.clone()], part.encoding, charset) else {
            continue;
        };
        found.push(HtmlPart { header, body, html });
    }
    Ok(found)
}

/// A body's text: its transfer encoding undone, then its charset.
fn decode_body(body: &[u8], encoding: Encoding, charset: &str) -> Option<String> {
    let bytes = match encoding {
        Encoding::QuotedPrintable => {
            quoted_printable::decode(body, quoted_printable::ParseMode::Robust).ok()?
        }
        Encoding::Base64 => {
            let compact: Vec<u8> = body
                .iter()
                .copied()
                .filter(|b| !b.is_ascii_whitespace())
                .collect();
            base64::engine::general_purpose::STANDARD
                .decode(compact)
                .ok()?
        }
        Encoding::None => body.to_vec(),
    };
    let encoding =
        encoding_rs::Encoding::for_label(charset.trim().as_bytes()).unwrap_or(encoding_rs::UTF_8);
    let (text, had_errors) = encoding.decode_without_bom_handling(&bytes);
    (!had_errors).then(|| text.into_owned())
}

/// `raw` with each part's body replaced by its rewritten HTML (`html`,
/// one per part, in order), encoded as UTF-8 with the transfer encoding
/// `build` would choose; the part's `Content-Type` and
/// `Content-Transfer-Encoding` fields say so, its other fields stay.
pub(crate) fn replace_parts(raw: &[u8], parts: &[HtmlPart], html: &[String]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + raw.len() / 4);
    let mut copied = 0;
    for (part, html) in parts.iter().zip(html) {
        out.extend_from_slice(&raw[copied..part.header.start]);
        let encoded = encode_text(html);
        let block = &raw[part.header.clone()];
        let kept = without_fields(block, &["content-type", "content-transfer-encoding"]);
        // The kept fields, then ours, then the blank line ending the block.
        let fields_end = kept.len() - blank_line_len(&kept);
        out.extend_from_slice(&kept[..fields_end]);
        out.extend_from_slice(b"Content-Type: text/html; charset=utf-8\r\n");
        out.extend_from_slice(b"Content-Transfer-Encoding: ");
        out.extend_from_slice(encoded.encoding.to_string().as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
        out.extend_from_slice(&encoded.bytes);
        let original_ends_in_crlf = raw[part.body.clone()].ends_with(b"\r\n");
        if original_ends_in_crlf && !encoded.bytes.ends_with(b"\r\n") {
            out.extend_from_slice(b"\r\n");
        }
        copied = part.body.end;
    }
    out.extend_from_slice(&raw[copied..]);
    out
}

/// The length of the blank line closing a header block (`\r\n`, or 0 for
/// a block that has none).
fn blank_line_len(block: &[u8]) -> usize {
    if block.ends_with(b"\r\n\r\n") || block == b"\r\n" {
        2
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALTERNATIVE: &str = "From: a@example.com\r\nTo: b@example.org\r\nSubject: hi\r\n\
MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=\"b1\"\r\n\r\n\
--b1\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nsee https://example.com/a\r\n\
--b1\r\nContent-Type: text/html; charset=iso-8859-1\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n\
<p>Caf=E9 <a href=3D\"https://example.com/a\">go</a></p>\r\n\
--b1--\r\n";

    #[test]
    fn the_html_part_is_found_decoded_and_put_back_as_utf8() {
        let raw = ALTERNATIVE.as_bytes();
        let parts = html_parts(raw).unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(
            parts[0].html.trim_end(),
            "<p>Café <a href=\"https://example.com/a\">go</a></p>"
        );
        let new = parts[0]
            .html
            .replace("https://example.com/a", "https://t.example/c/x");
        let out = String::from_utf8(replace_parts(raw, &parts, &[new])).unwrap();
        assert!(
            out.contains("see https://example.com/a\r\n--b1\r\n"),
            "{out}"
        );
        assert!(
            out.contains("Content-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: "),
            "{out}"
        );
        let reparsed = html_parts(out.as_bytes()).unwrap();
        assert_eq!(
            reparsed[0].html.trim_end(),
            "<p>Café <a href=\"https://t.example/c/x\">go</a></p>"
        );
        assert!(out.ends_with("--b1--\r\n"));
    }

    #[test]
    fn attachments_and_plain_text_are_not_html_parts() {
        let raw = "From: a@example.com\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n\
--x\r\nContent-Type: text/plain\r\n\r\nhello\r\n\
--x\r\nContent-Type: text/html\r\nContent-Disposition: attachment; filename=a.html\r\n\r\n<a href=\"https://e.com\">x</a>\r\n--x--\r\n";
        assert!(html_parts(raw.as_bytes()).unwrap().is_empty());
        assert_eq!(
            html_parts(b"no headers at all").unwrap_err(),
            MimeError::NoHeaders
        );
    }
}
