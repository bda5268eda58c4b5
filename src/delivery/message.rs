//! One letter as a complete RFC 5322 message: headers, a text/plain part
//! made from the personalised, tracked HTML, and the HTML part, in
//! `multipart/alternative`. Assembled by `lettre`'s message builder (never
//! hand-written MIME), which picks quoted-printable or base64 per part so no
//! line exceeds 998 octets, and RFC 2047-encodes non-ASCII headers. A
//! planned letter's bodies come already encoded, the same bytes, from
//! [`super::body`].

use super::body::EncodedBody;
use lettre::address::AddressError;
use lettre::message::header::{HeaderName, HeaderValue, InvalidHeaderName};
use lettre::message::{Mailbox, MultiPart, SinglePart};
use lettre::Message;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::SystemTime;
use unicode_width::UnicodeWidthStr;

/// What a message is made of; everything else is derived.
#[derive(Debug)]
pub struct MessageParts<'a> {
    pub letter_id: u64,
    pub mailing_id: &'a str,
    pub pool: &'a str,
    /// `From` as the mailing gives it (`Name <addr>` or `addr`).
    pub from: &'a str,
    pub to_email: &'a str,
    /// The recipient's display name (the recipients file's `name`).
    pub to_name: Option<&'a str>,
    pub reply_to: Option<&'a str>,
    /// The letter's own envelope sender (its VERP bounce address), written
    /// as `Return-Path` so that whoever hands the message over from the
    /// letters file uses it too; `None`: no `Return-Path` header.
    pub return_path: Option<&'a str>,
    /// The letter's sealed bounce token (as its VERP address carries it),
    /// the left part of its Message-ID: a returned Message-ID then proves
    /// which letter it was, and no one can guess another letter's.
    /// `None`: the letter id instead, which proves nothing.
    pub letter_token: Option<&'a str>,
    pub subject: &'a str,
    pub html: &'a str,
    /// The text/plain part: [`text_part`] of `html` (or the same text
    /// filled in from a mailing's plan).
    pub text: &'a str,
    /// `html` already encoded (from a mailing's plan, `super::body`), the
    /// bytes lettre would make of it; `None`: lettre encodes `html`.
    pub html_body: Option<EncodedBody>,
    /// The same for `text`.
    pub text_body: Option<EncodedBody>,
    /// `List-Unsubscribe` and `List-Unsubscribe-Post` (RFC 8058), as built.
    pub list_headers: &'a BTreeMap<String, String>,
    pub date: SystemTime,
}

/// A built message and its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltMessage {
    /// `<letter.mailing@domain>`, the same on every re-run of the job, so a
    /// receiver can drop a duplicate.
    pub message_id: String,
    /// The whole message, CRLF line ends.
    pub message: String,
}

/// Why a letter cannot become a message; each names the field.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error("`from` {text:?} is not an address (`Name <addr@example.com>` or `addr@example.com`)")]
    From {
        text: String,
        #[source]
        source: AddressError,
    },
    #[error("`reply_to` {text:?} is not an address")]
    ReplyTo {
        text: String,
        #[source]
        source: AddressError,
    },
    #[error("the recipient address {text:?} cannot be used in a message")]
    To {
        text: String,
        #[source]
        source: AddressError,
    },
    #[error("the {0} holds a control character (U+{1:04X}), which no header may carry")]
    ControlCharacter(&'static str, u32),
    #[error("the message cannot be assembled: header name {name:?}")]
    HeaderName {
        name: String,
        #[source]
        source: InvalidHeaderName,
    },
    #[error("the message cannot be assembled")]
    Build(#[source] lettre::error::Error),
}

/// Letters are wrapped at this width in the text part: short enough that a
/// text part in ASCII is sent as it is (7bit), readable without decoding
/// and with no encoding work per letter; lettre (email-encoding's chooser)
/// quoted-printable-encodes a body with any line of 75 bytes or more, CR
/// included (we hand it CRLF line ends).
const TEXT_WIDTH: usize = 73;

/// Build the message of one letter.
pub fn build(parts: MessageParts<'_>) -> Result<BuiltMessage, MessageError> {
    check_header_text(&parts)?;
    let from: Mailbox = parts.from.parse().map_err(|source| MessageError::From {
        text: parts.from.to_owned(),
        source,
    })?;
    let to_address = parts.to_email.parse().map_err(|source| MessageError::To {
        text: parts.to_email.to_owned(),
        source,
    })?;
    let to = Mailbox::new(parts.to_name.map(str::to_owned), to_address);
    let domain = from.email.domain().to_owned();
    let letter_part = match parts.letter_token {
        Some(token) => token.to_owned(),
        None => parts.letter_id.to_string(),
    };
    let message_id = format!("<{letter_part}.{}@{domain}>", id_part(parts.mailing_id));
    let mut builder = Message::builder();
    if let Some(return_path) = parts.return_path {
        builder = builder.raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("Return-Path"),
            format!("<{return_path}>"),
        ));
    }
    let mut builder = builder
        .from(from)
        .to(to)
        .subject(parts.subject)
        .date(parts.date)
        .message_id(Some(message_id.clone()));
    if let Some(reply_to) = parts.reply_to {
        let reply_to: Mailbox = reply_to.parse().map_err(|source| MessageError::ReplyTo {
            text: reply_to.to_owned(),
            source,
        })?;
        builder = builder.reply_to(reply_to);
    }
    let list_id = format!(
        "<{}.{}.{domain}>",
        id_part(parts.mailing_id),
        id_part(parts.pool)
    );
    // Gmail's Feedback-ID: campaign:customer:mail type:sender id.
    let feedback_id = format!(
        "{}:{}:newsletter:linktrack",
        id_part(parts.mailing_id),
        id_part(parts.pool)
    );
    for (name, value) in parts
        .list_headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .chain([("List-Id", list_id), ("Feedback-ID", feedback_id)])
    {
        // `From` is set above; only the list headers are copied.
        if name.eq_ignore_ascii_case("From") {
            continue;
        }
        let name = HeaderName::new_from_ascii(name.to_owned()).map_err(|source| {
            MessageError::HeaderName {
                name: name.to_owned(),
                source,
            }
        })?;
        builder = builder.raw_header(HeaderValue::new(name, value));
    }
    // The bodies come encoded from the plan when the letter was planned:
    // lettre then writes their bytes as given (`Body::dangerous_pre_encoded`
    // with the encoding `super::body` chose by lettre's own rules).
    let text = match parts.text_body {
        Some(encoded) => SinglePart::plain(encoded.into_lettre()),
        None => SinglePart::plain(crlf_line_ends(parts.text)),
    };
    let html = match parts.html_body {
        Some(encoded) => SinglePart::html(encoded.into_lettre()),
        None => SinglePart::html(crlf_line_ends(parts.html)),
    };
    let body = MultiPart::alternative()
        .boundary(boundary(&message_id))
        .singlepart(text)
        .singlepart(html);
    let message = builder.multipart(body).map_err(MessageError::Build)?;
    // Our bodies and lettre's headers are ASCII: no copy to make it UTF-8.
    let message = String::from_utf8(message.formatted())
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    Ok(BuiltMessage {
        message_id,
        message,
    })
}

/// Header text with CR, LF or another control character would add a header
/// or break the message (lettre panics writing such a display name), so it
/// is refused here, naming the field, whatever the caller checked before.
fn check_header_text(parts: &MessageParts<'_>) -> Result<(), MessageError> {
    let fields = [
        ("from", Some(parts.from)),
        ("recipient address", Some(parts.to_email)),
        ("recipient name", parts.to_name),
        ("reply_to", parts.reply_to),
        ("return path", parts.return_path),
        ("subject", Some(parts.subject)),
    ];
    for (field, text) in fields {
        if let Some(c) = text.and_then(|t| t.chars().find(|c| c.is_control())) {
            return Err(MessageError::ControlCharacter(field, u32::from(c)));
        }
    }
    for (name, value) in parts.list_headers {
        if let Some(c) = name.chars().chain(value.chars()).find(|c| c.is_control()) {
            return Err(MessageError::ControlCharacter("list header", u32::from(c)));
        }
    }
    Ok(())
}

/// The text/plain part: the HTML as a reader sees it, with its CSS applied
/// (a hidden preheader stays hidden); links appear as their tracked URLs,
/// so clicks from the text part are tracked too; the pixel has no text.
/// Paragraphs are wrapped at 73 columns.
pub fn text_part(html: &str) -> String {
    wrap_text(&text_unwrapped(html))
}

/// Wider than any paragraph: html2text then never wraps.
const NO_WRAP: usize = 1 << 24;

/// [`text_part`] before wrapping: one line per paragraph. Wrapping is a
/// separate step so that a mailing's plan (`letter::plan`) can fill the
/// reader's values into this text and wrap afterwards, with the same result.
pub fn text_unwrapped(html: &str) -> String {
    // Newsletters lay out with tables: drawn as text they become rows of
    // box characters and padding, so tables are read as plain blocks.
    html2text::config::plain()
        .use_doc_css()
        .raw_mode(true)
        .no_table_borders()
        .string_from_read(html.as_bytes(), NO_WRAP)
        .unwrap_or_default()
}

/// Wraps each line longer than 73 columns at spaces (a word longer than
/// that, such as a tracked URL, stays whole on its own line), continuing at
/// the line's own indentation; spaces at a break are dropped.
///
/// A greedy wrap of our own rather than `textwrap`: it runs on every
/// letter's text, and `textwrap::wrap`'s general machinery (Unicode width,
/// word splitting options) was a large share of the planned builder's CPU.
pub fn wrap_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 32);
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        if body.len() <= TEXT_WIDTH || (!body.is_ascii() && body.width() <= TEXT_WIDTH) {
            out.push_str(line);
        } else {
            wrap_line(body, &mut out);
            out.push_str(end);
        }
    }
    out
}

fn wrap_line(body: &str, out: &mut String) {
    let words = body.trim_start_matches(' ');
    let indent = &body[..body.len() - words.len()];
    let mut column = 0;
    let mut gap = 0;
    let mut started = false;
    for word in words.split(' ') {
        gap += 1;
        if word.is_empty() {
            continue;
        }
        // ASCII (almost every word) is one column per byte.
        let width = if word.is_ascii() {
            word.len()
        } else {
            word.width()
        };
        if !started {
            started = true;
            out.push_str(indent);
            column = indent.len();
        } else if column + gap + width <= TEXT_WIDTH {
            out.extend(std::iter::repeat_n(' ', gap));
            column += gap;
        } else {
            out.push('\n');
            out.push_str(indent);
            column = indent.len();
        }
        out.push_str(word);
        column += width;
        gap = 0;
    }
}

/// `text` with a CR before every LF that lacks one: the rule lettre
/// applies to a body, in one pass. lettre's own pass inserts each CR into
/// the string in place, moving the rest of it every time: quadratic in a
/// letter's lines, and a large share of the planned builder's work.
/// Given CRLF already, lettre finds nothing to insert.
fn crlf_line_ends(text: &str) -> String {
    super::body::crlf_line_ends(text).into_owned()
}

/// The MIME boundary: derived from the message's id (unique per letter and
/// mailing), so a re-run of the job produces the same bytes. `=_` never
/// occurs in a quoted-printable or base64 body, so the boundary cannot
/// collide with the content, whatever the content (hashing the HTML as
/// well would read every letter once more and buy nothing).
fn boundary(message_id: &str) -> String {
    let digest = Sha256::digest(message_id.as_bytes());
    format!("=_lt_{}", hex::encode(&digest[..16]))
}

/// Letters, digits, `.`, `-` and `_` of an id, the rest as `-`: safe inside
/// a Message-ID, List-Id or Feedback-ID.
/// What a Message-ID this module wrote with a letter token carries: the
/// token (still to be opened: only a key of ours seals one) and the
/// mailing id as written in it (`<0192…abcd.spring-2026@zeitung.example>`
/// -> `(token, "spring-2026")`); `None` for anyone else's id, and for the
/// letter-id form, which proves nothing. The mailing part is
/// [`mailing_id_part`] of the mailing id, so compare it with that.
pub fn letter_token_of_message_id(message_id: &str) -> Option<(crate::token::Token, &str)> {
    let inner = message_id
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>');
    let (left, _domain) = inner.rsplit_once('@')?;
    let (token, mailing) = left.split_once('.')?;
    if token.len() != 32 || mailing.is_empty() {
        return None;
    }
    Some((crate::token::Token::parse(token).ok()?, mailing))
}

/// A mailing id as the Message-ID and List-Id carry it.
pub fn mailing_id_part(mailing_id: &str) -> String {
    id_part(mailing_id)
}

fn id_part(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts<'a>(headers: &'a BTreeMap<String, String>, html: &'a str) -> MessageParts<'a> {
        MessageParts {
            letter_id: 42,
            mailing_id: "spring 2026",
            pool: "bulk",
            from: "Die Zeitung <news@zeitung.example>",
            to_email: "jose@example.es",
            to_name: Some("José Müller"),
            reply_to: None,
            return_path: None,
            letter_token: None,
            subject: "Grüße, José – this week",
            html,
            // Tests keep parts for the whole test: leaking one string each is fine.
            text: Box::leak(text_part(html).into_boxed_str()),
            html_body: None,
            text_body: None,
            list_headers: headers,
            date: SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_790_000_000),
        }
    }

    const HTML: &str = concat!(
        "<html><body><div style=\"display:none\">hidden preheader</div>",
        "<p>Hello José, read <a href=\"https://t.example/c/0123\">the story</a>.</p>",
        "<img src=\"https://t.example/o/0123.gif\" width=\"1\" height=\"1\" alt=\"\"></body></html>"
    );

    #[test]
    fn a_letter_becomes_a_complete_multipart_message() {
        let headers = BTreeMap::from([
            (
                "List-Unsubscribe".to_owned(),
                "<https://t.example/u/9>".to_owned(),
            ),
            (
                "List-Unsubscribe-Post".to_owned(),
                "List-Unsubscribe=One-Click".to_owned(),
            ),
        ]);
        let built = build(parts(&headers, HTML)).unwrap();
        assert_eq!(built.message_id, "<42.spring-2026@zeitung.example>");
        let m = &built.message;
        assert!(
            m.contains("Message-ID: <42.spring-2026@zeitung.example>\r\n"),
            "{m}"
        );
        assert!(
            m.contains("List-Unsubscribe: <https://t.example/u/9>\r\n"),
            "{m}"
        );
        assert!(
            m.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"),
            "{m}"
        );
        assert!(
            m.contains("List-Id: <spring-2026.bulk.zeitung.example>\r\n"),
            "{m}"
        );
        assert!(
            m.contains("Feedback-ID: spring-2026:bulk:newsletter:linktrack\r\n"),
            "{m}"
        );
        assert!(m.contains("MIME-Version: 1.0\r\n"), "{m}");
        assert!(m.contains("Content-Type: multipart/alternative;"), "{m}");
        assert!(
            m.contains("Subject: =?utf-8?"),
            "non-ASCII subject is RFC 2047: {m}"
        );
        assert!(m.lines().all(|line| line.len() <= 998));
        assert!(!m.replace("\r\n", "").contains('\n'), "bare LF in {m}");
    }

    #[test]
    fn a_bounce_address_is_the_return_path_and_our_message_ids_name_their_letter() {
        let headers = BTreeMap::new();
        let without = build(parts(&headers, HTML)).unwrap();
        assert!(
            !without.message.contains("Return-Path"),
            "{}",
            without.message
        );
        let verp = "bounces+0123@bounces.zeitung.example";
        let token = "0192f5a0c0de7000800000000000abcd";
        let with = build(MessageParts {
            return_path: Some(verp),
            letter_token: Some(token),
            ..parts(&headers, HTML)
        })
        .unwrap();
        assert!(
            with.message
                .contains("\r\nReturn-Path: <bounces+0123@bounces.zeitung.example>\r\n")
                || with
                    .message
                    .starts_with("Return-Path: <bounces+0123@bounces.zeitung.example>\r\n"),
            "{}",
            with.message
        );
        assert_eq!(
            letter_token_of_message_id(&with.message_id),
            Some((
                crate::token::Token::parse(token).unwrap(),
                mailing_id_part("spring 2026").as_str()
            ))
        );
        assert_eq!(
            with.message_id,
            format!("<{token}.spring-2026@zeitung.example>")
        );
        // The letter id alone (sequential, guessable) names nothing.
        assert_eq!(letter_token_of_message_id(&without.message_id), None);
        assert_eq!(
            letter_token_of_message_id("<42.spring-2026@zeitung.example>"),
            None
        );
        assert_eq!(letter_token_of_message_id("<CAF=abc@mail.gmail.com>"), None);
        assert_eq!(letter_token_of_message_id("<.x@y>"), None);
    }

    #[test]
    fn the_text_part_keeps_tracked_links_and_drops_hidden_text_and_the_pixel() {
        let text = text_part(HTML);
        assert!(text.contains("https://t.example/c/0123"), "{text}");
        assert!(text.contains("Hello José"), "{text}");
        assert!(!text.contains("hidden preheader"), "{text}");
        assert!(!text.contains("0123.gif"), "{text}");
    }

    #[test]
    fn long_lines_wrap_at_73_columns_at_their_own_indentation_and_urls_stay_whole() {
        let long = format!("  {}", "word ".repeat(40));
        let url = format!("https://t.example/c/{}", "0".repeat(90));
        let text = wrap_text(&format!("{long}\nshort\n{url} end\n"));
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines
                .iter()
                .all(|l| l.len() <= 73 || l.starts_with("https://")),
            "{text}"
        );
        assert!(lines[..3].iter().all(|l| l.starts_with("  word")), "{text}");
        assert!(lines.contains(&"short"), "{text}");
        assert!(lines.contains(&url.as_str()), "{text}");
        assert_eq!(text.split_whitespace().filter(|w| *w == "word").count(), 40);
    }

    #[test]
    fn line_ends_become_crlf_once() {
        assert_eq!(crlf_line_ends("a\nb\r\nc\n"), "a\r\nb\r\nc\r\n");
        assert_eq!(crlf_line_ends("\n\nx"), "\r\n\r\nx");
        assert_eq!(crlf_line_ends("é\r\n"), "é\r\n");
        assert_eq!(crlf_line_ends("no line end"), "no line end");
    }

    #[test]
    fn an_ascii_text_part_is_sent_7bit() {
        let paragraph = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(30);
        let html = format!("<html><body><p>{paragraph}</p><p>{paragraph}</p></body></html>");
        let headers = BTreeMap::new();
        let mut p = parts(&headers, &html);
        p.subject = "ASCII";
        let message = build(p).unwrap().message;
        let text_part = message
            .split("Content-Type: text/plain")
            .nth(1)
            .and_then(|rest| rest.split("\r\n\r\n").next())
            .unwrap_or_default();
        assert!(
            text_part.contains("Content-Transfer-Encoding: 7bit"),
            "{text_part}"
        );
    }

    #[test]
    fn the_same_letter_gives_the_same_bytes_on_every_run() {
        let headers = BTreeMap::new();
        let a = build(parts(&headers, HTML)).unwrap();
        let b = build(parts(&headers, HTML)).unwrap();
        assert_eq!(a, b);
        assert!(a.message.contains("boundary=\"=_lt_"), "{}", a.message);
    }

    #[test]
    fn a_bad_from_is_refused_naming_the_field() {
        let headers = BTreeMap::new();
        let mut p = parts(&headers, HTML);
        p.from = "not an address";
        let err = build(p).unwrap_err();
        assert!(
            matches!(&err, MessageError::From { text, .. } if text == "not an address"),
            "{err:?}"
        );
        let said = crate::error_report::chain(&err);
        assert!(
            said.starts_with("`from` \"not an address\" is not an address"),
            "{said}"
        );
        assert!(
            said.len() > err.to_string().len(),
            "the parser's reason follows: {said}"
        );
    }
}
