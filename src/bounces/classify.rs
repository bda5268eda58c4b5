//! What a failed delivery means for the address: the classification table
//! of docs/bounces.md, in code. The enhanced status code (RFC 3463) decides
//! when the report has one; the diagnostic text decides otherwise, and
//! overrides a code only where MTAs are known to use the wrong one (a
//! "mailbox full" under 5.x.x, a spam block under 5.1.x). Every rule is a
//! row of the table, tested in this file.

/// What a failure says about the recipient's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// The address is dead (no such user, mailbox disabled, domain with no
    /// mail): suppressed at once, reason `bounce`.
    Hard,
    /// The address may work later (mailbox full, a temporary 4.x.x):
    /// counted; suppressed after [`super::SoftPolicy`]'s soft bounces.
    Soft,
    /// Not the address's fault (a 5.7.x policy or reputation block, DMARC,
    /// the message's size or content, the sender's own configuration):
    /// never suppresses; reported to the operator.
    Policy,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Hard => "hard",
            Class::Soft => "soft",
            Class::Policy => "policy",
        }
    }
}

/// Words that say the address itself does not exist or takes no mail.
const DEAD_ADDRESS: &[&str] = &[
    "user unknown",
    "unknown user",
    "no such user",
    "no such recipient",
    "no such mailbox",
    "unknown recipient",
    "recipient unknown",
    "recipient not found",
    "recipientnotfound",
    "address not found",
    "address couldn't be found",
    "address could not be found",
    "does not exist",
    "doesn't exist",
    "doesn't have a",
    "no mailbox here",
    "mailbox unavailable",
    "mailbox not found",
    "invalid recipient",
    "invalid mailbox",
    "mailbox disabled",
    "mailbox is disabled",
    "account disabled",
    "account is disabled",
    "account has been disabled",
    "account is inactive",
    "user not found",
    "not our customer",
    "unrouteable address",
    "unroutable address",
    "host or domain name not found",
    "domain not found",
    "no mx",
];

/// Words that say the mailbox exists but cannot take mail now.
const FULL_MAILBOX: &[&str] = &[
    "mailbox full",
    "mailbox is full",
    "over quota",
    "quota exceeded",
    "exceeded storage",
    "exceeds its quota",
    "insufficient storage",
    "out of storage",
    "inbox is full",
    "mailbox size limit",
];

/// Words that say the receiver refused the sender or the message, not
/// the address: reputation, spam, authentication, rate limits.
const NOT_THE_ADDRESS: &[&str] = &[
    "spam",
    "blocked",
    "blacklist",
    "block list",
    "blocklist",
    "denylist",
    "reputation",
    "dmarc",
    "spf",
    "dkim",
    "policy",
    "rate limit",
    "too many",
    "message too large",
    "message size exceeds",
    "content rejected",
    "not authorized",
    "access denied",
    "relay",
];

/// Whether `text` (lowercased) has one of `words`.
fn says(text: &str, words: &[&str]) -> bool {
    words.iter().any(|word| text.contains(word))
}

/// The class of one failed recipient: `status` the enhanced status code
/// (`5.1.1`; `None` when the report has none), `diagnostic` the remote
/// MTA's words. `None`: nothing to decide (a code of success, or no code
/// and no words that say anything).
pub fn classify(status: Option<&str>, diagnostic: &str) -> Option<Class> {
    let text = diagnostic.to_ascii_lowercase();
    let Some(code) = status.and_then(StatusCode::parse) else {
        return classify_text(&text);
    };
    match (code.class, code.subject, code.detail) {
        (2, ..) => None,
        // Temporary: never the address's death, whatever the words.
        (4, ..) => Some(Class::Soft),
        // Mailbox full under a permanent code (5.2.2, or "over quota"
        // with another code): it may empty.
        (5, 2, 2) => Some(Class::Soft),
        (5, ..) if says(&text, FULL_MAILBOX) => Some(Class::Soft),
        // 5.7.x is policy; 5.1.7 and 5.1.8 are the sender's own address.
        (5, 7, _) | (5, 1, 7) | (5, 1, 8) => Some(Class::Policy),
        // A spam or reputation block said with an address code (some
        // receivers answer 5.1.1 to senders they block): not the address.
        (5, 1, _) | (5, 2, 1) if says(&text, NOT_THE_ADDRESS) && !says(&text, DEAD_ADDRESS) => {
            Some(Class::Policy)
        }
        // Bad destination mailbox or system, mailbox disabled, no route
        // to the domain: the address is dead.
        (5, 1, _) | (5, 2, 1) | (5, 4, 4) => Some(Class::Hard),
        // Message too big (5.2.3, 5.3.4), content (5.6.x), protocol (5.5.x):
        // the message's or the sender's fault.
        (5, 2, 3) | (5, 3, 4) | (5, 5, _) | (5, 6, _) => Some(Class::Policy),
        // Any other permanent code (5.0.0 above all): the words decide;
        // with none that name the address, it is not suppressed.
        (5, ..) => Some(match classify_text(&text) {
            Some(Class::Hard) => Class::Hard,
            Some(Class::Soft) => Class::Soft,
            _ => Class::Policy,
        }),
        _ => classify_text(&text),
    }
}

/// The class from the words alone (text bounces without a code).
fn classify_text(text: &str) -> Option<Class> {
    if says(text, FULL_MAILBOX) {
        Some(Class::Soft)
    } else if says(text, NOT_THE_ADDRESS) {
        Some(Class::Policy)
    } else if says(text, DEAD_ADDRESS) {
        Some(Class::Hard)
    } else {
        None
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

    /// The table of docs/bounces.md, row by row.
    #[test]
    fn the_documented_table() {
        let rows: &[(&str, &str, Option<Class>)] = &[
            (
                "5.1.1",
                "550 5.1.1 <a@b>: Recipient address rejected: User unknown",
                Some(Class::Hard),
            ),
            (
                "5.1.10",
                "RESOLVER.ADR.RecipientNotFound",
                Some(Class::Hard),
            ),
            ("5.1.2", "Host or domain name not found", Some(Class::Hard)),
            ("5.2.1", "mailbox disabled", Some(Class::Hard)),
            ("5.4.4", "Unrouteable address", Some(Class::Hard)),
            ("5.0.0", "unknown user: \"nobody\"", Some(Class::Hard)),
            ("4.2.2", "mailbox full", Some(Class::Soft)),
            ("5.2.2", "Mailbox full", Some(Class::Soft)),
            ("5.0.0", "user is over quota", Some(Class::Soft)),
            ("4.7.1", "greylisted, try again", Some(Class::Soft)),
            ("4.4.1", "connection timed out", Some(Class::Soft)),
            (
                "5.7.1",
                "Message rejected due to DMARC policy",
                Some(Class::Policy),
            ),
            (
                "5.7.26",
                "unauthenticated email is not accepted",
                Some(Class::Policy),
            ),
            (
                "5.7.1",
                "Service unavailable; client host blocked using Spamhaus",
                Some(Class::Policy),
            ),
            (
                "5.1.8",
                "Sender address rejected: domain not found",
                Some(Class::Policy),
            ),
            (
                "5.1.1",
                "550 5.1.1 blocked due to poor reputation",
                Some(Class::Policy),
            ),
            ("5.3.4", "message too big", Some(Class::Policy)),
            (
                "5.0.0",
                "Remote server said nothing useful",
                Some(Class::Policy),
            ),
            ("2.0.0", "delivered", None),
        ];
        for (status, diagnostic, class) in rows {
            assert_eq!(
                classify(Some(status), diagnostic),
                *class,
                "{status} {diagnostic}"
            );
        }
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
