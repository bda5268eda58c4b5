//! What a failed delivery means for the address: the reason
//! (`reasons.rs`, the table of docs/bounces.md) from the enhanced status
//! code (RFC 3463) and the remote MTA's words, and its class. Every rule
//! is a row of the table, tested in this file and in `reasons.rs`.

use super::reasons;
pub use super::reasons::{Class, Reason};

/// The reason of one failed recipient: `status` the enhanced status code
/// (`5.1.1`; `None` when the report has none), `diagnostic` the remote
/// MTA's words. A precise code decides (5.2.2 is a full mailbox whatever
/// the words); a loose one (5.1.1, 5.7.1, 5.0.0: codes MTAs give to many
/// refusals) gives way to the words (a 5.7.1 "unknown user" is an
/// unknown user, a 5.1.1 "blocked" a block). `None`: nothing to decide
/// (a code of success, or no code and no words that say anything).
pub fn reason(status: Option<&str>, diagnostic: &str) -> Option<Reason> {
    let text = diagnostic.to_ascii_lowercase();
    let code = status.and_then(StatusCode::parse);
    if code.is_some_and(|code| code.class == 2) {
        return None;
    }
    // A provider's own code ("LPN007_416") is more precise than the
    // status code it goes with.
    if let Some(provider) = reasons::by_provider_code(&text) {
        return Some(provider);
    }
    let words = reasons::by_words(&text).or_else(|| syntax_refusal(&text));
    let Some(code) = code else {
        return words;
    };
    Some(
        match reasons::by_code(code.class, code.subject, code.detail) {
            Some(precise) if !precise.is_loose() => precise,
            Some(loose) => words.unwrap_or(loose),
            None => words.unwrap_or(Reason::Undefined),
        },
    )
}

/// A refusal whose reply code is one of a command the receiver could not
/// parse or did not expect (RFC 5321: 500 to 504, the reply's first
/// word) and whose words say nothing else: the sender's client spoke wrongly, `syntaxerror`.
fn syntax_refusal(text: &str) -> Option<Reason> {
    let reply = text.trim_start().get(..3)?;
    matches!(reply, "500" | "501" | "502" | "503" | "504").then_some(Reason::SyntaxError)
}

/// The class of one failed recipient (the arguments as [`reason`]'s): the
/// reason's, as the reference parsers class it (a 4.1.1 "user unknown"
/// is hard too: the receiver says the user is unknown, and only asks the
/// sender to try again).
pub fn classify(status: Option<&str>, diagnostic: &str) -> Option<Class> {
    reason(status, diagnostic).map(Reason::class)
}

/// The reason and class of a recipient a bounce says failed: as
/// [`reason`] and [`classify`], except that a failure whose code and
/// words say nothing readable is `undefined`, soft (counted, as the
/// reference parsers count it), unless its code is one of success.
pub fn failed(status: Option<&str>, diagnostic: &str) -> (Option<Reason>, Option<Class>) {
    let success = status
        .and_then(StatusCode::parse)
        .is_some_and(|code| code.class == 2);
    if success {
        return (None, None);
    }
    match reason(status, diagnostic) {
        Some(reason) => (Some(reason), classify(status, diagnostic)),
        None => (Some(Reason::Undefined), Some(Class::Soft)),
    }
}

/// An RFC 3463 enhanced status code, `class.subject.detail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusCode {
    pub class: u8,
    pub subject: u16,
    pub detail: u16,
}

impl StatusCode {
    /// `5.1.1` (padding and a trailing comment allowed: `5.1.1 (user
    /// unknown)`); `None` for anything else.
    pub fn parse(text: &str) -> Option<StatusCode> {
        let code = text.split_whitespace().next()?;
        let mut parts = code.split('.');
        let class = parts.next()?.parse().ok()?;
        let subject = parts.next()?.parse().ok()?;
        let detail = parts.next()?.parse().ok()?;
        (parts.next().is_none() && matches!(class, 2 | 4 | 5)).then_some(StatusCode {
            class,
            subject,
            detail,
        })
    }
}

impl std::fmt::Display for StatusCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.class, self.subject, self.detail)
    }
}

/// The first enhanced status code in free text (`550 5.1.1 <a@b>: …`,
/// qmail's `(#5.1.1)`), for bounces that have no DSN part.
pub fn status_in_text(text: &str) -> Option<StatusCode> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|word| word.len() >= 5)
        .find_map(|word| StatusCode::parse(word.trim_matches('.')))
}

/// The first enhanced status code of a failure (4.x.x or 5.x.x) in free
/// text, past any of success.
pub fn failure_status_in_text(text: &str) -> Option<StatusCode> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|word| word.len() >= 5)
        .filter_map(|word| StatusCode::parse(word.trim_matches('.')))
        .find(|code| code.class != 2)
}

/// The first SMTP reply code in free text (`550`, `452`), as the class of
/// a status code (`5.0.0`, `4.0.0`) when the text has no enhanced code.
pub fn reply_code_in_text(text: &str) -> Option<StatusCode> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter(|word| word.len() == 3)
        .find_map(|word| {
            let class = word.as_bytes()[0] - b'0';
            let rest = &word[1..];
            let reply = matches!(class, 4 | 5) && rest.as_bytes()[0] <= b'5';
            reply.then_some(StatusCode {
                class,
                subject: 0,
                detail: 0,
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of docs/bounces.md, row by row: the code, the words,
    /// the reason and the class.
    #[test]
    fn the_documented_table() {
        use Reason::*;
        let rows: &[(&str, &str, Reason, Class)] = &[
            (
                "5.1.1",
                "550 5.1.1 <a@b>: Recipient address rejected: User unknown",
                UserUnknown,
                Class::Hard,
            ),
            (
                "5.1.10",
                "RESOLVER.ADR.RecipientNotFound",
                UserUnknown,
                Class::Hard,
            ),
            (
                "5.1.2",
                "Host or domain name not found",
                HostUnknown,
                Class::Hard,
            ),
            ("5.4.4", "Unrouteable address", HostUnknown, Class::Hard),
            (
                "5.0.0",
                "unknown user: \"nobody\"",
                UserUnknown,
                Class::Hard,
            ),
            // Exim's 5.7.1 for an unknown user: the words win.
            (
                "5.7.1",
                "550 5.7.1 <nobody@example.org>: unknown user",
                UserUnknown,
                Class::Hard,
            ),
            (
                "4.1.1",
                "450 4.1.1 User unknown in virtual alias table",
                UserUnknown,
                Class::Hard,
            ),
            ("5.1.6", "has moved", HasMoved, Class::Hard),
            (
                "5.1.10",
                "Recipient address has null MX",
                NotAccept,
                Class::Hard,
            ),
            ("5.2.1", "mailbox disabled", Suspend, Class::Soft),
            ("4.2.2", "mailbox full", MailboxFull, Class::Soft),
            ("5.2.2", "Mailbox full", MailboxFull, Class::Soft),
            ("5.0.0", "user is over quota", MailboxFull, Class::Soft),
            // A 5.x.x "mailbox full" (a 5.1.1 from some receivers) is full.
            ("5.1.1", "552 mailbox is full", MailboxFull, Class::Soft),
            ("5.3.4", "message too big", MesgTooBig, Class::Soft),
            (
                "5.2.3",
                "552 5.2.3 message size exceeds fixed limit",
                ExceedLimit,
                Class::Soft,
            ),
            ("4.7.1", "greylisted, try again", SystemError, Class::Soft),
            ("4.4.1", "connection timed out", Expired, Class::Soft),
            ("5.4.7", "delivery time expired", Expired, Class::Soft),
            (
                "5.0.0",
                "Remote server said nothing useful",
                Undefined,
                Class::Soft,
            ),
            (
                "5.7.1",
                "Message rejected due to DMARC policy",
                AuthFailure,
                Class::Policy,
            ),
            (
                "5.7.26",
                "unauthenticated email is not accepted",
                AuthFailure,
                Class::Policy,
            ),
            (
                "5.7.1",
                "Service unavailable; client host blocked using Spamhaus",
                Blocked,
                Class::Policy,
            ),
            (
                "5.7.1",
                "message rejected as spam",
                SpamDetected,
                Class::Policy,
            ),
            (
                "5.1.8",
                "Sender address rejected: domain not found",
                Rejected,
                Class::Policy,
            ),
            (
                "5.1.1",
                "550 5.1.1 blocked due to poor reputation",
                BadReputation,
                Class::Policy,
            ),
            ("5.7.1", "Relay access denied", NoRelaying, Class::Policy),
            ("5.6.0", "conversion failed", ContentError, Class::Policy),
        ];
        for (status, diagnostic, reason_, class) in rows {
            assert_eq!(
                (
                    reason(Some(status), diagnostic),
                    classify(Some(status), diagnostic)
                ),
                (Some(*reason_), Some(*class)),
                "{status} {diagnostic}"
            );
        }
        assert_eq!(classify(Some("2.0.0"), "delivered"), None);
        assert_eq!(
            failed(Some("5.0.0"), ""),
            (Some(Undefined), Some(Class::Soft))
        );
        assert_eq!(failed(None, ""), (Some(Undefined), Some(Class::Soft)));
        assert_eq!(failed(Some("2.0.0"), ""), (None, None));
    }

    #[test]
    fn without_a_code_the_words_decide() {
        assert_eq!(
            classify(None, "Sorry, no mailbox here by that name."),
            Some(Class::Hard)
        );
        assert_eq!(
            classify(None, "The user's mailbox is full"),
            Some(Class::Soft)
        );
        assert_eq!(classify(None, "rejected as spam"), Some(Class::Policy));
        assert_eq!(classify(None, "thanks for your mail"), None);
        assert_eq!(
            classify(Some("not a code"), "user unknown"),
            Some(Class::Hard)
        );
    }

    /// Providers' own codes outrank the status code; a bare 50x reply
    /// with nothing else said is the client's syntax.
    #[test]
    fn provider_codes_and_syntax_replies() {
        use Reason::*;
        let rows: &[(&str, &str, Reason)] = &[
            (
                "5.5.0",
                "550 5.5.0 Adresse destinataire invalide. Invalid recipient. LPN007_416",
                UserUnknown,
            ),
            (
                "5.5.0",
                "550 5.5.0 Le compte du destinataire est bloque. LPN007_426",
                Suspend,
            ),
            (
                "5.2.0",
                "550 5.2.0 Mail rejete. Mail rejected. ofr_506 [506]",
                SpamDetected,
            ),
            (
                "5.0.0",
                "550 Ip frequency limited [x] Blocked IP 192.0.2.1",
                TooManyConn,
            ),
            ("5.0.0", "550 : User unknown", Filtered),
            (
                "5.0.0",
                "The recipient name is not recognized (000C05A6)",
                UserUnknown,
            ),
            ("5.5.0", "503 Improper sequence of commands", SyntaxError),
            (
                "5.0.0",
                "504 Command parameter not implemented",
                SyntaxError,
            ),
            ("5.0.0", "500 Line limit exceeded", MesgTooBig),
            (
                "5.0.0",
                "The account or domain may not exist, they may be blacklisted",
                HostUnknown,
            ),
        ];
        for (status, diagnostic, want) in rows {
            assert_eq!(
                reason(Some(status), diagnostic),
                Some(*want),
                "{diagnostic}"
            );
        }
        // A success found in a transcript is not the failure's code.
        assert_eq!(
            failure_status_in_text("Out: 250 2.1.0 Ok In: 550 5.2.2 full").map(|c| c.to_string()),
            Some("5.2.2".into())
        );
    }

    #[test]
    fn codes_are_found_in_text() {
        assert_eq!(
            status_in_text("550 5.1.1 <a@b>: no").map(|c| c.to_string()),
            Some("5.1.1".into())
        );
        assert_eq!(
            status_in_text("no mailbox here by that name. (#5.1.1)").map(|c| c.to_string()),
            Some("5.1.1".into())
        );
        assert_eq!(status_in_text("version 1.2.3.4 and 10.0.0.1"), None);
        assert_eq!(
            reply_code_in_text("said: 554 delivery error").map(|c| c.class),
            Some(5)
        );
        assert_eq!(reply_code_in_text("port 2525 and 1999"), None);
    }
}
