//! Bounces that carry no `message/delivery-status` part: the recipient
//! and the reason are only in the text. Each MTA writes its own layout
//! (fixtures/bounces/ has one of each, with where its format is
//! documented); what they share is read the same way: the failure
//! section (the text before the copy of the letter), the failed
//! addresses in it, and for each address the lines that follow it, where
//! the status code and the remote MTA's words are.

use super::bare_address::plain_address;
use super::classify::{self, Reason, StatusCode};
use super::reasons;
use super::report::{Failure, Kind};
use mail_parser::Message;

/// Lines that start the copy of the letter (or its headers): the failure
/// section ends before them.
const COPY_MARKERS: &[&str] = &[
    "------ this is a copy of the message",
    "--- below this line is a copy of the message",
    "----- original message -----",
    "----- transcript of session follows -----",
    "original message headers",
    "------ original message",
    "----- unsent message below -----",
    "content-type: message/rfc822",
    "--- the header of the original message is following",
    "----- unsent message follows -----",
    "message headers follow",
    "original message follows",
    "------- returned message --------",
    // fml's notices to a list's poster.
    "original mail as follows:",
    // Zoho's copy of the letter, after its notice without a marker.
    "received:from mail.zoho.com by mx.zohomail.com",
];

/// The transcript of an SMTP session: after the failure section in
/// Sendmail's bounces, the failure section itself in V5 Sendmail's (they
/// have nothing before it).
const TRANSCRIPT: &str = "----- transcript of session follows -----";

/// Which MTA wrote the text, from the words each is documented to use.
const MTAS: &[(&str, &str)] = &[
    (
        "this message was created automatically by mail delivery software",
        "exim",
    ),
    ("this is the qmail-send program", "qmail"),
    (
        "the following addresses had permanent fatal errors",
        "sendmail",
    ),
    (
        "delivery has failed to these recipients or groups",
        "exchange",
    ),
    ("address not found", "gmail"),
    (
        "delivery to the following recipient failed permanently",
        "gmail",
    ),
    ("sorry, we were unable to deliver your message", "yahoo"),
    ("an error occurred while trying to deliver the mail", "ses"),
];

/// The failures a text bounce names; `None` when it names no address.
/// `copy`: whether a bounce whose text names no one may be read as the
/// copy of the letter's `To` (`returned_to`, the returned message's when
/// it is a MIME part, else the `To:` line of a copy in the text).
pub(crate) fn read(message: &Message<'_>, copy: bool, returned_to: Option<&str>) -> Option<Kind> {
    let text = body_text(message);
    let lower = text.to_ascii_lowercase();
    let own = own_addresses(message);
    let end_before = |skip: Option<&str>| {
        COPY_MARKERS
            .iter()
            .filter(|marker| Some(**marker) != skip)
            .filter_map(|marker| lower.find(marker))
            .min()
            .unwrap_or(text.len())
    };
    let mut section_end = end_before(None);
    let mut format = MTAS
        .iter()
        .find(|(words, _)| lower[..section_end].contains(words))
        .map_or("text", |(_, mta)| mta);
    // V5 Sendmail: nothing before the transcript names an address; the
    // transcript is the failure section.
    let before = &text[..section_end];
    if !addresses_in(before)
        .iter()
        .any(|a| !own.iter().any(|o| o.eq_ignore_ascii_case(a)))
    {
        let through = end_before(Some(TRANSCRIPT));
        if lower
            .get(section_end..through)
            .is_some_and(|t| t.starts_with(TRANSCRIPT))
        {
            section_end = through;
            if format == "text" {
                format = "sendmail";
            }
        }
    }
    let section = &text[..section_end];
    let mut named: Vec<String> = message
        .header_raw("X-Failed-Recipients")
        .map(|list| {
            list.split(',')
                .filter_map(|a| plain_address(a.trim()))
                .collect()
        })
        .unwrap_or_default();
    if named.is_empty() {
        // Verizon's and Apache James' notices give the envelope's
        // recipient as `RCPT TO: address` in their "message details",
        // among the letter's other addresses.
        named = rcpt_to_lines(section);
    }
    if named.is_empty() {
        named = addresses_in(section)
            .into_iter()
            .filter(|a| !own.iter().any(|o| o.eq_ignore_ascii_case(a)))
            .collect();
    }
    if named.is_empty() {
        // A bounce whose recipient is also its own `To` (a redacted
        // sample, a message to oneself): only an address the text lists
        // as failed, alone on its line as `address:`.
        named = failed_address_lines(section);
    }
    if named.is_empty() {
        // Or anywhere in the failure section, but for the bounce's
        // sender and our own bounce addresses.
        let senders: Vec<String> = ["From", "Return-Path", "Sender"]
            .iter()
            .filter_map(|name| message.header_raw(*name))
            .flat_map(addresses_in)
            .collect();
        named = addresses_in(section)
            .into_iter()
            .filter(|a| !senders.iter().any(|s| s.eq_ignore_ascii_case(a)))
            .filter(|a| crate::token::token_of_bounce_address(a).is_none())
            .collect();
    }
    named.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
    if named.is_empty() && copy {
        // The text names no one (a report without recipients, a V5
        // Sendmail transcript that names only hosts, a recipient that is
        // a postmaster): the copy of the letter says whom it was to.
        let copy_to = returned_to.map(str::to_owned).or_else(|| {
            text[section_end..].lines().find_map(|line| {
                let (name, value) = line.trim().split_once(':')?;
                name.eq_ignore_ascii_case("to").then(|| value.to_owned())
            })
        });
        named = copy_to
            .iter()
            .flat_map(|to| addresses_or_daemons_in(to))
            .take(1)
            .collect();
    }
    if named.is_empty() {
        return None;
    }
    if named.iter().all(|a| is_google_group(a)) {
        return Some(group_refusal(named));
    }
    // Sendmail's layout: the failed addresses, then the transcript of
    // the session, where the remote MTA's words are.
    let through_transcript = &text[..end_before(Some(TRANSCRIPT)).max(section_end)];
    // V5 Sendmail's transcript is the failure section: each recipient's
    // line ("554 <a@b>... Remote protocol error") follows the host's
    // replies that are why.
    let v5 = lower.trim_start().starts_with(TRANSCRIPT);
    let failures = named
        .iter()
        .map(|recipient| {
            let said = failure(section, recipient, &named, v5);
            if said.reason == Some(Reason::Undefined) && through_transcript.len() > section.len() {
                failure(through_transcript, recipient, &named, v5)
            } else {
                said
            }
        })
        .collect();
    Some(Kind::Bounce { format, failures })
}

fn is_google_group(address: &str) -> bool {
    address
        .rsplit_once('@')
        .is_some_and(|(_, domain)| domain.eq_ignore_ascii_case("googlegroups.com"))
}

/// Google Groups' notice that a group refused the post (it does not
/// exist, or the sender may not post to it), written in the sender's
/// language: the group refused the sender, no reader's address failed.
fn group_refusal(groups: Vec<String>) -> Kind {
    Kind::Bounce {
        format: "googlegroups",
        failures: groups
            .into_iter()
            .map(|recipient| Failure {
                recipient,
                original_recipient: None,
                status: None,
                diagnostic: "the Google group does not exist or refuses posts from the sender"
                    .into(),
                class: Some(Reason::Rejected.class()),
                reason: Some(Reason::Rejected),
            })
            .collect(),
    }
}

/// The addresses of `RCPT TO: address` lines (not a transcript's
/// `>>> RCPT To:<…>`).
fn rcpt_to_lines(section: &str) -> Vec<String> {
    section
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let head = line.get(..8)?;
            head.eq_ignore_ascii_case("rcpt to:")
                .then(|| addresses_in(&line[8..]))
        })
        .flatten()
        .collect()
}

/// Addresses alone on their line and ended by a colon (`a@b:`,
/// `<a@b>:`), as Exim and Postfix list failed recipients.
fn failed_address_lines(section: &str) -> Vec<String> {
    section
        .lines()
        .filter_map(|line| line.trim().strip_suffix(':'))
        .filter(|line| !line.contains(char::is_whitespace))
        .flat_map(addresses_in)
        .collect()
}

/// The whole text of the message's text parts (HTML only when there is no
/// text: Microsoft 365's notices have both; the raw body when MIME finds
/// no text part, as in a multipart whose boundary lines are missing).
fn body_text(message: &Message<'_>) -> String {
    let mut text = String::new();
    for at in 0..message.text_body_count() {
        if let Some(body) = message.body_text(at) {
            text.push_str(&body);
            text.push('\n');
        }
    }
    if text.trim().is_empty() {
        if let Some(html) = message.body_html(0) {
            text = strip_tags(&html);
        }
    }
    if text.trim().is_empty() {
        let raw = message.raw_message();
        let body = raw
            .get(message.root_part().raw_body_offset() as usize..)
            .unwrap_or_default();
        text = String::from_utf8_lossy(body).into_owned();
    }
    text
}

/// HTML to text, enough to find addresses and codes in a notice.
fn strip_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", " ")
}

/// Addresses of the bounce itself (its sender and where it was sent): a
/// text that quotes them does not name them as failed.
fn own_addresses(message: &Message<'_>) -> Vec<String> {
    ["From", "To", "Return-Path", "Delivered-To", "X-Original-To"]
        .iter()
        .filter_map(|name| message.header_raw(*name))
        .flat_map(addresses_in)
        .collect()
}

/// Every address in `text`, in order of appearance (`<a@b>`, `a@b:`,
/// `(a@b)`), without MTA hosts' own mailboxes.
fn addresses_in(text: &str) -> Vec<String> {
    all_addresses_in(text, false)
}

/// Every address in `text`, a `postmaster@` too.
fn addresses_or_daemons_in(text: &str) -> Vec<String> {
    all_addresses_in(text, true)
}

fn all_addresses_in(text: &str, daemons_too: bool) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for word in text.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '<' | '>' | '(' | ')' | '"' | ',' | ';' | '[' | ']' | '\''
            )
    }) {
        let word = word
            .trim_end_matches([':', '.'])
            .trim_start_matches("mailto:");
        let Some((local, domain)) = word.split_once('@') else {
            continue;
        };
        let plausible = !local.is_empty()
            && domain.contains('.')
            && !domain.contains('@')
            && domain
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '.' | '-'));
        let daemon = ["mailer-daemon", "postmaster", "mail-daemon"]
            .iter()
            .any(|d| local.eq_ignore_ascii_case(d));
        if plausible
            && (daemons_too || !daemon)
            && !found.iter().any(|f| f.eq_ignore_ascii_case(word))
        {
            found.push(word.to_owned());
        }
    }
    found
}

/// One address's failure: the lines from its first mention up to the
/// next failed address (or five lines on), where each MTA writes the code
/// and the remote reply; in a V5 Sendmail transcript (`v5`), the
/// recipient's line and the host's replies before it.
fn failure(section: &str, recipient: &str, named: &[String], v5: bool) -> Failure {
    let lines: Vec<&str> = section.lines().collect();
    let lower_recipient = recipient.to_ascii_lowercase();
    let start = lines
        .iter()
        .position(|line| line.to_ascii_lowercase().contains(&lower_recipient))
        .unwrap_or(0);
    let names_other = |line: &str| {
        let lower = line.to_ascii_lowercase();
        named
            .iter()
            .filter(|n| !n.eq_ignore_ascii_case(recipient))
            .any(|n| lower.contains(&n.to_ascii_lowercase()))
    };
    let mut block = Vec::new();
    let own_line = lines.get(start).copied().unwrap_or_default();
    if v5 && is_v5_recipient_line(own_line) {
        // Back to the session's start ("While talking to host:") or the
        // previous recipient's line.
        for line in lines[..start].iter().rev() {
            if names_other(line) || is_v5_recipient_line(line) {
                break;
            }
            block.insert(0, line.trim());
            if line
                .trim()
                .to_ascii_lowercase()
                .starts_with("while talking to")
            {
                break;
            }
        }
        block.push(own_line.trim());
    } else {
        for (at, line) in lines.iter().enumerate().skip(start) {
            if at > start && (names_other(line) || at > start + 8) {
                break;
            }
            block.push(line.trim());
        }
    }
    let mut words = block.join(" ");
    // The code may be said before the address (Gmail's notice, SES's);
    // the reason too, when the block says none (a notice's headline).
    if StatusCode::parse_any(&words).is_none() {
        let whole = format!("{words} {}", section.replace('\n', " "));
        words = if reasons::by_words(&words.to_ascii_lowercase()).is_some() {
            // The block's own words, the notice's code: not another
            // recipient's words.
            match StatusCode::parse_any(&whole) {
                Some(code) => format!("{words} {code}"),
                None => words,
            }
        } else {
            whole
        };
    }
    // A transcript's replies of success ("250 2.1.0 Ok") are not why.
    let status =
        classify::failure_status_in_text(&words).or_else(|| classify::reply_code_in_text(&words));
    let diagnostic = diagnostic_line(&block, &words);
    let (reason, class) = classify::failed(status.map(|s| s.to_string()).as_deref(), &words);
    Failure {
        recipient: recipient.to_owned(),
        original_recipient: None,
        class,
        reason,
        status: status
            .filter(|s| s.subject != 0 || s.detail != 0)
            .map(|s| s.to_string()),
        diagnostic,
    }
}

/// A V5 Sendmail transcript's line for a recipient: `554 <a@b>... why`.
fn is_v5_recipient_line(line: &str) -> bool {
    let line = line.trim();
    line.len() > 5
        && line.as_bytes()[..3].iter().all(u8::is_ascii_digit)
        && line[3..].trim_start().starts_with('<')
        && line.contains(">...")
}

/// The line that says why: the first with a reply code, else the block.
fn diagnostic_line(block: &[&str], words: &str) -> String {
    let said = block
        .iter()
        .find(|line| {
            classify::status_in_text(line).is_some() || classify::reply_code_in_text(line).is_some()
        })
        .map(|line| line.to_string())
        .unwrap_or_else(|| words.to_owned());
    said.chars().take(1000).collect()
}

impl StatusCode {
    /// A status or reply code anywhere in `text`.
    fn parse_any(text: &str) -> Option<StatusCode> {
        classify::status_in_text(text).or_else(|| classify::reply_code_in_text(text))
    }
}
