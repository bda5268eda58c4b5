//! Bounces whose writer has its own words for why: an MTA or a provider
//! recognised by its headers (McAfee's `X-NAI-Header`, Zoho's
//! `X-ZohoMail`, IMail's `X-Mailer`, fml's `X-MLServer`, …), with its
//! own table of phrases. Where the writer's phrase is in the bounce, it
//! decides the reason whatever the code or the SMTP stage say: the
//! vendor's words are more precise than the generic reading (McAfee's
//! "No such user" is the address's death even where no command is
//! named; Amazon SES's receiving side says "Mailbox does not exist" of
//! its recipients' filter). The tables follow the vendors' documented
//! wordings, as the reference parser sisimai reads them.

use super::reasons::Reason;
use mail_parser::Message;

/// One writer of bounces: how it is recognised, and its phrases
/// (lowercased), tried in order.
struct Vendor {
    name: &'static str,
    is: fn(&Seen) -> bool,
    phrases: &'static [(Reason, &'static [&'static str])],
}

/// What a vendor is recognised by: the bounce's headers and its text
/// (its text parts, or its raw body when MIME finds none), lowercased.
pub(crate) struct Seen {
    headers: Vec<(String, String)>,
    pub(crate) text: String,
}

impl Seen {
    pub(crate) fn of(message: &Message<'_>) -> Seen {
        let mut text = (0..message.text_body_count())
            .filter_map(|at| message.body_text(at))
            .collect::<Vec<_>>()
            .join("\n")
            .to_lowercase();
        if text.trim().is_empty() {
            let raw = message.raw_message();
            let body = raw
                .get(message.root_part().raw_body_offset() as usize..)
                .unwrap_or_default();
            text = String::from_utf8_lossy(&body[..body.len().min(64 << 10)]).to_lowercase();
        }
        Seen {
            headers: message
                .headers_raw()
                .map(|(name, value)| (name.to_ascii_lowercase(), value.trim().to_ascii_lowercase()))
                .collect(),
            text,
        }
    }

    /// The first value of a header (`name` lowercase).
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn has(&self, name: &str, words: &str) -> bool {
        self.header(name).is_some_and(|v| v.contains(words))
    }

    fn any_has(&self, name: &str, words: &str) -> bool {
        self.headers
            .iter()
            .any(|(n, v)| n == name && v.contains(words))
    }

    fn subject_starts(&self, words: &str) -> bool {
        self.header("subject")
            .is_some_and(|s| s.trim_start().starts_with(words))
    }
}

const VENDORS: &[Vendor] = &[
    Vendor {
        name: "mcafee",
        is: |s| s.header("x-nai-header").is_some(),
        phrases: &[(
            Reason::UserUnknown,
            &[" user not exist", " unknown.", "550 unknown user ", "no such user"],
        )],
    },
    Vendor {
        name: "imailserver",
        is: |s| s.has("x-mailer", "<smtp32 v"),
        phrases: &[
            (Reason::HostUnknown, &["unknown host"]),
            (
                Reason::UserUnknown,
                &["unknown user", "invalid final delivery userid"],
            ),
            (Reason::MailboxFull, &["user mailbox exceeds allowed size"]),
            (
                Reason::VirusDetected,
                &["requested action not taken: virus detected"],
            ),
            (Reason::Expired, &["delivery failed "]),
        ],
    },
    Vendor {
        name: "receivingses",
        is: |s| {
            s.header("x-ses-outgoing").is_some()
                && s.text.contains("this message could not be delivered.")
        },
        phrases: &[
            // Amazon SES's receiving side says so of a recipient its
            // rules refuse, not only of an address that does not exist.
            (Reason::Filtered, &["mailbox does not exist"]),
            (Reason::MesgTooBig, &["message too large"]),
            (Reason::MailboxFull, &["mailbox full"]),
            (Reason::ContentError, &["message content rejected"]),
        ],
    },
    Vendor {
        name: "zoho",
        is: |s| s.header("x-zohomail").is_some(),
        phrases: &[(Reason::Expired, &["host not reachable"])],
    },
    Vendor {
        name: "domino",
        is: |s| s.subject_starts("delivery failure:") || s.subject_starts("delivery_failure:"),
        phrases: &[
            (
                Reason::UserUnknown,
                &[
                    "not listed in domino directory",
                    "not listed in public name & address book",
                    "non répertorié dans l'annuaire domino",
                    "no se encuentra en el directorio de domino",
                    "domino ディレクトリには見つかりません",
                ],
            ),
            (Reason::Filtered, &["cannot route mail to user"]),
            (
                Reason::SystemError,
                &["several matches found in domino directory"],
            ),
        ],
    },
    Vendor {
        name: "biglobe",
        is: |s| s.has("from", "postmaster@") && s.has("from", "biglobe.ne.jp"),
        phrases: &[
            (
                Reason::MailboxFull,
                &["the number of messages in recipient's mailbox exceeded the local limit"],
            ),
            (Reason::Filtered, &["mail delivery failed... user unknown"]),
        ],
    },
    Vendor {
        name: "kddi",
        is: |s| {
            (s.has("from", "no-reply@") && s.has("from", ".dion.ne.jp"))
                || s.has("reply-to", "no-reply@app.auone-net.jp")
        },
        phrases: &[
            (Reason::MailboxFull, &["as their mailbox is full"]),
            (Reason::NoRelaying, &["due to the following smtp relay error"]),
            (Reason::HostUnknown, &["as the remote domain doesnt exist"]),
        ],
    },
    Vendor {
        name: "ezweb",
        is: |s| {
            (s.has("from", "postmaster@ezweb.ne.jp") || s.has("from", "postmaster@au.com"))
                && (s.subject_starts("mail system error - returned mail")
                    || s.any_has("received", "ezweb.ne.jp (ezweb mail) with"))
        },
        phrases: &[
            (
                Reason::MailboxFull,
                &["the user(s) account is temporarily over quota"],
            ),
            (
                Reason::Suspend,
                &[
                    "the user(s) account is disabled.",
                    "the user(s) account is temporarily limited.",
                ],
            ),
            (Reason::Expired, &["your message was not delivered within "]),
            // au's domain filter (the recipient's own reception rules).
            (
                Reason::Filtered,
                &["each of the following recipients was rejected by a remote mail server"],
            ),
        ],
    },
    Vendor {
        name: "fml",
        is: |s| {
            s.header("x-mlserver").is_some()
                && s.has("from", "-admin@")
                && s.has("message-id", ".fml")
        },
        phrases: &[
            (
                Reason::Rejected,
                &[
                    " header may cause mail loop",
                    "not member article from ",
                    "reject mail from ",
                    "reject spammers:",
                    "you are not a member of this mailing list",
                    " are not member",
                    "spam mail from a spammer is rejected",
                ],
            ),
            (
                Reason::SystemError,
                &[
                    " has detected a loop condition so that",
                    "duplicated message-id",
                    "loop back warning:",
                    "loop alert: ",
                    "fml system error message",
                    "warning: unix from loop",
                ],
            ),
            (Reason::SecurityError, &["security alert"]),
        ],
    },
    Vendor {
        name: "verizon",
        is: |s| {
            s.has("from", "post_master@vtext.com")
                || (s.has("from", "sysadmin@") && s.has("from", ".vzwpix.com"))
        },
        phrases: &[(
            Reason::UserUnknown,
            &[
                "550 - requested action not taken: no such user here",
                "no valid recipients for this mm",
            ],
        )],
    },
    Vendor {
        name: "outlook",
        is: |s| {
            s.has("from", "postmaster@hotmail.com") || s.has("from", "postmaster@outlook.com")
        },
        phrases: &[
            (
                Reason::HostUnknown,
                &["the mail could not be delivered to the recipient because the domain is not reachable"],
            ),
            (
                Reason::UserUnknown,
                &["requested action not taken: mailbox unavailable"],
            ),
        ],
    },
    // Known by its subject only: after the others.
    Vendor {
        name: "notes",
        is: |s| s.subject_starts("undeliverable message"),
        phrases: &[
            (
                Reason::UserUnknown,
                &[
                    "user not listed in public name & address book",
                    "ディレクトリのリストにありません",
                ],
            ),
            (Reason::NetworkError, &["message has exceeded maximum hop count"]),
        ],
    },
];

/// The vendor that wrote a bounce, by its name (`mcafee`, `fml`, …).
pub(crate) fn vendor_of(seen: &Seen) -> Option<&'static str> {
    VENDORS.iter().find(|v| (v.is)(seen)).map(|v| v.name)
}

/// The reason a vendor's phrase in `text` (lowercased) names, the
/// vendor being the one [`vendor_of`] found.
pub(crate) fn reason_in(vendor: &str, text: &str) -> Option<Reason> {
    let vendor = VENDORS.iter().find(|v| v.name == vendor)?;
    vendor
        .phrases
        .iter()
        .find(|(_, phrases)| phrases.iter().any(|p| text.contains(p)))
        .map(|(reason, _)| *reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mail_parser::MessageParser;

    fn seen(headers: &str) -> Seen {
        let raw = format!("{headers}\r\n\r\nbody\r\n");
        Seen::of(&MessageParser::default().parse(raw.as_bytes()).unwrap())
    }

    #[test]
    fn a_vendor_is_known_by_its_headers_and_its_words_decide() {
        let mcafee = seen("From: postmaster@example.com\r\nX-NAI-Header: Modified by McAfee");
        assert_eq!(vendor_of(&mcafee), Some("mcafee"));
        assert_eq!(
            reason_in("mcafee", "550 kijitora@example.com... no such user"),
            Some(Reason::UserUnknown)
        );
        let fml = seen(
            "From: list-admin@example.org\r\nX-MLServer: fml [fml 4.0]\r\n\
             Message-ID: <200504292334.FMLAAB0.list@example.org>",
        );
        assert_eq!(vendor_of(&fml), Some("fml"));
        assert_eq!(
            reason_in(
                "fml",
                "you are not a member of this mailing list <l@example.org>."
            ),
            Some(Reason::Rejected)
        );
        // The same words from anyone else decide nothing here.
        let other = seen("From: MAILER-DAEMON@example.com\r\nSubject: Undelivered Mail");
        assert_eq!(vendor_of(&other), None);
        assert_eq!(reason_in("nobody", "no such user"), None);
    }
}
