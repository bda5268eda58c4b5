//! Why a delivery failed, in the words the reference bounce parsers use
//! (sisimai's reasons: `userunknown`, `mailboxfull`, `mesgtoobig`,
//! `blocked`, …), and what each means for the address ([`Class`]). The
//! table of docs/bounces.md, "Reasons", in code: each reason has the
//! phrases MTAs and providers write for it, and the status codes of
//! RFC 3463 that name it; `classify.rs` decides which speaks.

/// What a failure says about the recipient's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// The address is dead (no such user, no such domain, the mailbox
    /// moved): suppressed at once, reason `bounce`.
    Hard,
    /// The address may work later (mailbox full, suspended, a temporary
    /// failure, delivery expired): counted; suppressed after
    /// [`super::SoftPolicy`]'s soft bounces.
    Soft,
    /// Not the address's fault (a policy or reputation block, spam,
    /// authentication, the message's size or content, the sender's own
    /// configuration): never suppresses; reported to the operator.
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

/// Why a delivery failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    UserUnknown,
    HostUnknown,
    HasMoved,
    NotAccept,
    MailboxFull,
    Suspend,
    ExceedLimit,
    SystemFull,
    Expired,
    OnHold,
    TooManyConn,
    NetworkError,
    SystemError,
    MailerError,
    Undefined,
    MesgTooBig,
    Filtered,
    Rejected,
    Blocked,
    SpamDetected,
    VirusDetected,
    PolicyViolation,
    SecurityError,
    AuthFailure,
    RequirePtr,
    BadReputation,
    NoRelaying,
    NotCompliantRfc,
    ContentError,
    Speeding,
    SyntaxError,
}

impl Reason {
    /// The reason's name, as the reference parsers spell it.
    pub fn as_str(self) -> &'static str {
        use Reason::*;
        match self {
            UserUnknown => "userunknown",
            HostUnknown => "hostunknown",
            HasMoved => "hasmoved",
            NotAccept => "notaccept",
            MailboxFull => "mailboxfull",
            Suspend => "suspend",
            ExceedLimit => "exceedlimit",
            SystemFull => "systemfull",
            Expired => "expired",
            OnHold => "onhold",
            TooManyConn => "toomanyconn",
            NetworkError => "networkerror",
            SystemError => "systemerror",
            MailerError => "mailererror",
            Undefined => "undefined",
            MesgTooBig => "mesgtoobig",
            Filtered => "filtered",
            Rejected => "rejected",
            Blocked => "blocked",
            SpamDetected => "spamdetected",
            VirusDetected => "virusdetected",
            PolicyViolation => "policyviolation",
            SecurityError => "securityerror",
            AuthFailure => "authfailure",
            RequirePtr => "requireptr",
            BadReputation => "badreputation",
            NoRelaying => "norelaying",
            NotCompliantRfc => "notcompliantrfc",
            ContentError => "contenterror",
            Speeding => "speeding",
            SyntaxError => "syntaxerror",
        }
    }

    /// What the reason means for the address: the address's own death is
    /// hard (as the reference parsers' hard bounces: no such user, no such
    /// domain, moved, a domain that takes no mail); what may pass is soft
    /// (a full mailbox, a message too big for it today, a rate limit, a
    /// delivery that expired); what the sender or the message caused, or
    /// the receiver's filter, is policy.
    pub fn class(self) -> Class {
        use Reason::*;
        match self {
            UserUnknown | HostUnknown | HasMoved | NotAccept => Class::Hard,
            MailboxFull | Suspend | MesgTooBig | ExceedLimit | SystemFull | Expired | OnHold
            | TooManyConn | Speeding | NetworkError | SystemError | MailerError | Undefined => {
                Class::Soft
            }
            Filtered | Rejected | Blocked | SpamDetected | VirusDetected | PolicyViolation
            | SecurityError | AuthFailure | RequirePtr | BadReputation | NoRelaying
            | NotCompliantRfc | ContentError | SyntaxError => Class::Policy,
        }
    }

    /// Whether a code's reason is only a family's default, which the
    /// words may make precise (a 5.7.1 that says "unknown user", a 5.1.1
    /// that says "blocked"): the codes MTAs use loosely.
    pub fn is_loose(self) -> bool {
        use Reason::*;
        matches!(
            self,
            Undefined
                | OnHold
                | SystemError
                | SecurityError
                | Expired
                | Suspend
                | NetworkError
                | HostUnknown
                | UserUnknown
                | Filtered
                | Blocked
                | NotAccept
        )
    }
}

/// The reason an RFC 3463 code names, when it names one precisely.
pub fn by_code(class: u8, subject: u16, detail: u16) -> Option<Reason> {
    use Reason::*;
    let permanent = class == 5;
    Some(match (subject, detail) {
        (1, 0 | 1 | 3) => UserUnknown,
        (1, 2) => HostUnknown,
        (1, 4) => Filtered,
        (1, 6) => HasMoved,
        (1, 7 | 8) => Rejected,
        (1, 10) => NotAccept,
        (2, 1) if permanent => Filtered,
        (2, 1) => Suspend,
        (2, 2) => MailboxFull,
        (2, 3) => ExceedLimit,
        (2, 0 | 4) => Filtered,
        (3, 1) => SystemFull,
        (3, 2) => NotAccept,
        (3, 0 | 3 | 5) => SystemError,
        (3, 4) => MesgTooBig,
        (4, 1) => Expired,
        (4, 4) if permanent => HostUnknown,
        (4, 0 | 2 | 4 | 6 | 8) => NetworkError,
        (4, 3) => SystemError,
        (4, 5) => SystemFull,
        (4, 7) => Expired,
        (5, 3) => TooManyConn,
        (5, 2 | 6) => SyntaxError,
        (5, _) => SystemError,
        (6, _) => ContentError,
        (7, 1 | 2) if !permanent => Blocked,
        (7, 13) => Suspend,
        (7, 16) => MesgTooBig,
        (7, 17 | 18) => HasMoved,
        (7, 20..=24 | 26 | 29) => AuthFailure,
        (7, 25) => RequirePtr,
        (7, 27) => NotAccept,
        (7, 28) => SpamDetected,
        (7, _) => SecurityError,
        _ => return None,
    })
}

/// Phrases, lowercased, in the order they are tried: the most specific
/// reasons first (a "mailbox full" notice also says "mailbox"; a spam
/// block often says "rejected" too).
const PHRASES: &[(Reason, &[&str])] = &[
    // Precise wordings that also contain a broader row's word ("blocked
    // IP" in Tencent's rate limit, "blacklisted" in Exim's guess at an
    // unknown domain, "host not found" in a DNS lookup to try again).
    (
        Reason::TooManyConn,
        &[
            "frequency limited",
            "connection rate limit exceeded",
            "maximum connection limit",
            "per-domain connection limit",
            "max emails per hour",
            "throttling failure",
            "trop de connexions",
            "too many errors from your ip",
            "we have already made numerous attempts to deliver",
        ],
    ),
    (
        Reason::Speeding,
        &["is receiving mail at a rate", "please try again slower"],
    ),
    // qmail's refused HELO, an open relay refused before a word of the
    // message: the sending host, not the recipient.
    (
        Reason::Blocked,
        &["but my name was rejected", "no access from mail server"],
    ),
    (Reason::NoRelaying, &["insecure mail relay"]),
    // Exim's refusal of an address it could not parse.
    (Reason::SyntaxError, &["malformed address:"]),
    (
        Reason::HostUnknown,
        &[
            "the account or domain may not exist",
            "recipient address rejected: unknown domain name",
        ],
    ),
    (
        Reason::NetworkError,
        &[
            "host not found, try again",
            "host name lookup failure",
            "dns records for the destination computer could not be found",
        ],
    ),
    (
        Reason::RequirePtr,
        &["unverifyable sending ip", "unverifiable sending ip"],
    ),
    (
        Reason::UserUnknown,
        &[
            "not listed in domino directory",
            "not listed in public name & address book",
        ],
    ),
    (Reason::PolicyViolation, &["host network not allowed"]),
    (
        Reason::MailerError,
        &[
            "mailer error",
            "procmail:",
            "bin/procmail",
            "command died with status",
            "pipe to |/",
        ],
    ),
    (
        Reason::Suspend,
        &[
            "tried to reach is inactive",
            "tried to reach is disabled",
            "disabled recipient",
            "recipient account is blocked",
            "recipient suspend the service",
        ],
    ),
    (
        Reason::Blocked,
        &["weren't sent. we recommend", "refused to talk to me"],
    ),
    (Reason::NoRelaying, &["not configured to relay mail"]),
    (
        Reason::MailboxFull,
        &[
            "mailbox exceeds allowed size",
            "mailbox full",
            "mailbox is full",
            "mailbox is over quota",
            "mailbox over quota",
            "mailbox quota",
            "over quota",
            "over the allowed quota",
            "quota exceeded",
            "quota exceed",
            "exceeded storage",
            "exceeds its quota",
            "exceeded its quota",
            "exceeding its mailbox quota",
            "exceeding their quota",
            "insufficient storage",
            "insufficient disk space",
            "out of storage",
            "inbox is full",
            "mailfolder is full",
            "full mailbox",
            "mailbox size limit exceeded",
            "exceeded its disk space limit",
            "disk quota",
            "diskspace quota",
            "not enough storage",
            "not enough space",
            "does not have enough space",
            "no space left",
            "user's space has been used up",
            "boite du destinataire pleine",
            "recipient's mailbox is full",
            "mailbox has exceeded",
            "would exceed mailbox quota",
            "user has exceeded",
            "overquota",
            "mailbox is temporarily full",
        ],
    ),
    (
        Reason::MesgTooBig,
        &[
            "message too big",
            "message is too big",
            "line limit exceeded",
            "message too large for",
            "message size exceeds",
            "message length exceeds",
            "max message size exceeded",
            "exceeded maximum inbound message size",
            "exceeds the maximum message size",
            "message file too big",
            "size limit",
            "taille limite du message atteinte",
            "message is too large",
            "size exceeds",
        ],
    ),
    (
        Reason::ExceedLimit,
        &["message too large", "message header size exceeds limit"],
    ),
    (
        Reason::Suspend,
        &[
            "is currently suspended",
            "has been suspended",
            "account suspended",
            "mailbox currently suspended",
            "user suspended",
            "temporarily suspended",
            "mailbox disabled",
            "mailbox is disabled",
            "this mailbox is disabled",
            "account disabled",
            "account is disabled",
            "account has been disabled",
            "account that you tried to reach is disabled",
            "account is inactive",
            "inactive account",
            "inactive user",
            "mailbox is inactive",
            "is a deactivated mailbox",
            "user is terminated",
            "mailbox is frozen",
            "temporarily inactive",
            "archived recipient",
            "no longer accepts mail",
            "user or domain is disabled",
            "account is locked",
            "temporary locked",
            "mailbox unavailable or access denied",
        ],
    ),
    (Reason::HasMoved, &[" has been replaced by "]),
    (
        Reason::NoRelaying,
        &[
            "email address is not verified",
            "relay access denied",
            "relaying denied",
            "relay denied",
            "relaying not permitted",
            "not permitted to relay",
            "relay not permitted",
            "we do not relay",
            "unable to relay",
            "relaying mail to",
            "not allowed to relay",
            "no relaying",
            "relay not allowed",
            "is not permitted to relay",
            "relay prohibited",
            "relaying disallowed",
            "mail server requires authentication when attempting to send to a non-local",
        ],
    ),
    (
        Reason::AuthFailure,
        &[
            "dmarc policy",
            "dmarc",
            "spf check: fail",
            "spf fail",
            "sender policy framework",
            "bad spf records",
            "spf.pobox.com",
            "please inspect your spf settings",
            "dkim",
            "unauthenticated email",
            "not pass authentication",
            "is not allowed to send mail. _401",
            "per it's spf record",
        ],
    ),
    (
        Reason::BadReputation,
        &[
            "poor reputation",
            "poor email reputation",
            "ip reputation",
            "bad reputation",
            "reputation problems",
            "very low reputation",
            "sending mta's poor reputation",
            "unexpected volume or user complaints",
        ],
    ),
    (
        Reason::RequirePtr,
        &[
            "mismatches client ip",
            "ptr record",
            "reverse dns",
            "cannot find your hostname",
            "ip name lookup failed",
            "reverse lookup",
            "unresolvable relay host name",
            "no ptr",
            "rdns",
        ],
    ),
    (
        Reason::Speeding,
        &[
            "rate limit",
            "ratelimit",
            "rate-limit",
            "too many messages",
            "sending too fast",
            "exceeded the rate",
            "temporarily rate limited",
            "sending rate",
        ],
    ),
    (
        Reason::Blocked,
        &[
            "spamhaus",
            "spamcop",
            "dnsbl",
            "blacklist",
            "black list",
            "block list",
            "blocklist",
            "denylist",
            "banned sending ip",
            "not currently accepting mail from your ip",
            "blocked using",
            "invalid ip for sending mail",
            "listed at",
            "listed on",
            "listed in",
        ],
    ),
    (
        Reason::VirusDetected,
        &[
            "virus",
            "malware",
            "infected",
            "harmful attachment",
            "potentially executable content",
        ],
    ),
    (
        Reason::SpamDetected,
        &[
            "spam",
            "unsolicited",
            "junk mail",
            "content filter rejection",
            "message content rejected",
            "message filtered",
            "mail content denied",
            "bulk mail",
            "bulk e-mail",
            "bulk email",
            "message is not accepted",
            "suspicious",
            "phish",
            "blocked by policy: no spam please",
            "message rejected because of unacceptable content",
            "message rejected due to suspected",
            "considered unsolicited",
        ],
    ),
    (
        Reason::NotCompliantRfc,
        &[
            "rfc 5322",
            "rfc5322",
            "rfc 2822",
            "rfc2822",
            "rfc 5321",
            "multiple addresses in from",
            "duplicate header",
            "not rfc",
            "message-id header",
            "bare lf",
            "header is not in compliance",
        ],
    ),
    (
        Reason::PolicyViolation,
        &[
            "local policy",
            "policy violation",
            "policy reasons",
            "denied by policy",
            "organization policy",
            "organizational settings",
            "security policies",
            "members-only list",
            "closed mailing list",
            "illegal attachment",
            "protocol violation",
            "header error",
            "not subscribed to this group",
            "mass mailer",
            "content presents a potential",
            "do not accept messages containing",
        ],
    ),
    (
        Reason::Rejected,
        &[
            "unroutable sender address",
            "purported responsible address",
            "sender address",
            "sender address rejected",
            "sender rejected",
            "sender denied",
            "sender blacklisted",
            "invalid sender",
            "sender domain",
            "domain of sender address",
            "administrative prohibition",
            "batv",
            "null sender",
            "empty envelope sender",
            "bogus mail from",
            "fully qualified email address required",
            "returned mail not accepted here",
            "not a registered gateway user",
            "sender verify failed",
            "sender verification",
            "from: domain is invalid",
        ],
    ),
    (
        Reason::HostUnknown,
        &[
            "host or domain name not found",
            "domain name not found",
            "domain not found",
            "domain does not exist",
            "domain is not reachable",
            "domain must exist",
            "host unknown",
            "unknown host",
            "host not found",
            "host unreachable",
            "no such domain",
            "unknown domain",
            "unrouteable address",
            "unroutable address",
            "name or service not known",
            "mail domain mentioned in email address is unknown",
            "the account or domain may not exist",
            "no mx",
            "invalid domain",
            "domain is invalid",
            "domain isn't in my list of allowed rcpthosts",
            "not in my list of allowed rcpthosts",
            "no valid hosts",
            "dns error",
            "domain name system",
            "nxdomain",
        ],
    ),
    (
        Reason::NotAccept,
        &[
            "couldn't find a mail exchanger",
            "no smtp service",
            "responded with code noerror",
            "does not accept mail",
            "host does not accept mail",
            "mail receiving disabled",
            "no route for current request",
            "nullmx",
            "null mx",
            "smtp protocol returned a permanent error",
            "not accepting mail",
        ],
    ),
    (
        Reason::UserUnknown,
        &[
            "recipient address rejected: user unknown",
            "recipient address rejected: unknown user",
            "recipient address rejected: invalid user",
            "recipient address rejected: userunknown",
            "recipient address rejected: access denied",
            "5.1.0 address rejected",
            "recipient address rejected.",
            "invalid final delivery userid",
            "user unknown",
            "unknown user",
            "unknown recipient",
            "recipient unknown",
            "recipient not found",
            "recipientnotfound",
            "no such user",
            "no such recipient",
            "no such mailbox",
            "no such person",
            "no such address",
            "no such account",
            "no account by that name",
            "no mailbox here",
            "no mailbox by that name",
            "no mailbox found",
            "no mail box available",
            "address not found",
            "address couldn't be found",
            "address could not be found",
            "address unknown",
            "address does not exist",
            "address doesn't exist",
            "email account that you tried to reach does not exist",
            "does not exist",
            "doesn't exist",
            "doesn't have a",
            "not exist",
            "mailbox unavailable",
            "mailbox is unavailable",
            "mailbox not found",
            "mailbox not present",
            "mailbox invalid",
            "invalid mailbox",
            "invalid recipient",
            "invalid address",
            "address invalid",
            "bad address",
            "bad destination mailbox",
            "user not found",
            "user doesn't exist",
            "user does not exist",
            "not a known user",
            "not a valid mailbox",
            "not an active address",
            "is not a valid user",
            "not our customer",
            "unknown local part",
            "unknown address",
            "unknown or illegal alias",
            "account does not exist",
            "account not available",
            "account unavailable",
            "this user doesn't have a",
            "recipient does not exist",
            "recipient rejected",
            "destination addresses were unknown",
            "address not present in directory",
            "can't accept user",
            "user invalid",
            "invalid user",
            "undeliverable address",
            "no longer available",
            "no longer active",
            "is not a valid",
            "unknown or invalid",
            "no such local user",
            "mailbox does not exist",
            "user is unknown",
            "not listed in",
            "disabled or discontinued",
        ],
    ),
    (
        Reason::Expired,
        &[
            "delivery expired",
            "delivery time expired",
            "message expired",
            "connection timed out",
            "timed out",
            "retry timeout exceeded",
            "retry time not reached",
            "giving up on",
            "have been failing for a long time",
            "has been delayed",
            "in the queue too long",
            "could not be delivered for",
            "unable to deliver message after multiple retries",
            "was not reachable within the allowed queue period",
            "server did not respond",
            "delivery attempts will continue",
            "could not find a gateway for",
        ],
    ),
    (
        Reason::Filtered,
        &[
            "only accepting mail from specific email addresses",
            "refuses to receive",
            "refuse to receive",
            "user reject",
            "recipient preferences",
            "resolver.rst.notauthorized",
            "blocked by the recipient",
            "message rejected due to user rules",
            "this account is protected by",
            "restricted sms e-mail",
        ],
    ),
    (
        Reason::Blocked,
        &[
            "not accepting connections",
            "blocked",
            "rbl",
            "bad sender ip",
            "client host rejected",
            "helo command rejected",
            "connection refused",
            "connection reset",
            "connection dropped",
            "go away",
            "dynamic ip",
            "has been temporarily blocked",
            "access denied",
            "not allowed to send mail from",
        ],
    ),
    (
        Reason::TooManyConn,
        &[
            "too many connections",
            "too many simultaneous connections",
            "too many recipients",
            "too many concurrent",
            "too many sessions",
            "connection limit",
        ],
    ),
    (
        Reason::SystemFull,
        &["mail system full", "system full", "mail queue full"],
    ),
    (
        Reason::NetworkError,
        &[
            "mail forwarding loop",
            "routing loop",
            "loop detected",
            "too many hops",
            "malformed or unexpected name server reply",
            "unable to resolve route",
            "could not connect",
            "network is unreachable",
            "no route to host",
            "lost connection",
            "hop count exceeded",
        ],
    ),
    (
        Reason::SystemError,
        &[
            "greylist",
            "system error",
            "internal error",
            "server error",
            "local error",
            "temporary local problem",
            "configuration error",
            "misconfigured",
            "interrupted system call",
            "mail system configuration error",
            "unable to connect to",
            "can't create output",
            "service temporarily unavailable",
            "service unavailable",
            "try again later",
        ],
    ),
    (
        Reason::SecurityError,
        &[
            "unauthenticated senders",
            "smtp authentication",
            "authentication required",
            "authentication failed",
            "authentication credentials invalid",
            "starttls",
            "tls is required",
            "encryption required",
            "not authorized",
            "unauthorized",
        ],
    ),
    (
        Reason::ContentError,
        &["content rejected", "illegal character", "8-bit", "8bit"],
    ),
    (
        Reason::MailerError,
        &[
            "x-unix",
            "command died",
            "exit code",
            "procmail",
            "unknown mailer error",
            "mail delivery agent",
        ],
    ),
];

/// Orange's (France Télécom's) reply codes, the number after a server's
/// tag (`LPN007_416`, `OFR005_505`, `ofr_506`), as Orange documents them.
const ORANGE_CODES: &[(&str, Reason)] = &[
    ("101", Reason::Blocked),
    ("102", Reason::Blocked),
    ("103", Reason::Blocked),
    ("104", Reason::TooManyConn),
    ("305", Reason::SecurityError),
    ("401", Reason::AuthFailure),
    ("402", Reason::SecurityError),
    ("403", Reason::Rejected),
    ("405", Reason::Rejected),
    ("415", Reason::Rejected),
    ("416", Reason::UserUnknown),
    ("417", Reason::MailboxFull),
    ("418", Reason::UserUnknown),
    ("420", Reason::Suspend),
    ("421", Reason::Rejected),
    ("426", Reason::Suspend),
    ("505", Reason::SystemError),
    ("506", Reason::SpamDetected),
    ("510", Reason::Blocked),
    ("514", Reason::MesgTooBig),
    ("517", Reason::AuthFailure),
    ("630", Reason::PolicyViolation),
    ("999", Reason::Blocked),
];

/// Exchange 2000/2003's (IMS's) codes, in parentheses after its words.
const EXCHANGE_CODES: &[(&str, Reason)] = &[
    ("000c05a6", Reason::UserUnknown),
    ("000c0595", Reason::Filtered),
    ("000b099c", Reason::OnHold),
    ("000b09aa", Reason::OnHold),
    ("000b09b6", Reason::OnHold),
    ("00010256", Reason::SystemError),
    ("000d06b5", Reason::SystemError),
    ("00120270", Reason::NetworkError),
    ("00050311", Reason::ContentError),
    ("000502cc", Reason::ContentError),
    ("000b0981", Reason::SecurityError),
];

/// The reason a provider's own code in the words names (`text`
/// lowercased): Orange's, Exchange 2003's, Spectrum's, and KDDI au's "550 : User
/// unknown" (an empty address: the recipient's reception filter, where
/// a mailbox that does not exist is "550 `<address>`: User unknown").
pub fn by_provider_code(text: &str) -> Option<Reason> {
    if text.contains("550 : user unknown") {
        return Some(Reason::Filtered);
    }
    if let Some(reason) = spectrum_code(text) {
        return Some(reason);
    }
    for tag in ["lpn", "ofr", "ouk"] {
        for (at, _) in text.match_indices(tag) {
            let rest = text[at + tag.len()..].trim_start_matches(|c: char| c.is_ascii_digit());
            let Some(number) = rest.strip_prefix('_').and_then(|r| r.get(..3)) else {
                continue;
            };
            if let Some((_, reason)) = ORANGE_CODES.iter().find(|(code, _)| *code == number) {
                return Some(*reason);
            }
        }
    }
    EXCHANGE_CODES
        .iter()
        .find(|(code, _)| text.contains(&format!("({code})")))
        .map(|(_, reason)| *reason)
}

/// Wordings whose parts come in this order with anything between them
/// (`553 <domain> does not exist`: the domain, named in the middle).
const IN_ORDER: &[(Reason, &[&str])] = &[
    (Reason::HostUnknown, &["553 ", " does not exist"]),
    (
        Reason::HostUnknown,
        &["dns lookup failure: host ", " not found"],
    ),
];

/// The reason the words say (`text` lowercased), the first row that has
/// one of its phrases.
pub fn by_words(text: &str) -> Option<Reason> {
    let in_order = |parts: &[&str]| {
        let mut rest = text;
        parts.iter().all(|part| match rest.find(part) {
            Some(at) => {
                rest = &rest[at + part.len()..];
                true
            }
            None => false,
        })
    };
    IN_ORDER
        .iter()
        .find(|(_, parts)| in_order(parts))
        .map(|(reason, _)| *reason)
        .or_else(|| {
            PHRASES
                .iter()
                .find(|(_, phrases)| phrases.iter().any(|phrase| text.contains(phrase)))
                .map(|(reason, _)| *reason)
        })
}

/// Charter Spectrum's acceptable use codes (`AUP#In-1310`, `AUP#CNCT`
/// aside): ranges of numbers and their reasons, as Spectrum documents
/// them ("Understanding email error codes").
const SPECTRUM_CODES: &[(u16, u16, Reason)] = &[
    (1000, 1000, Reason::Blocked),
    (1010, 1080, Reason::Rejected),
    (1090, 1090, Reason::SystemError),
    (1100, 1150, Reason::RequirePtr),
    (1160, 1190, Reason::PolicyViolation),
    (1200, 1250, Reason::Blocked),
    (1260, 1260, Reason::NetworkError),
    (1300, 1340, Reason::TooManyConn),
    (1350, 1490, Reason::Speeding),
    (1500, 1520, Reason::Rejected),
    (1530, 1530, Reason::MesgTooBig),
    (1540, 1550, Reason::Speeding),
    (1560, 1560, Reason::PolicyViolation),
    (1580, 1580, Reason::Speeding),
];

/// The reason of Spectrum's `AUP#…NNNN` code in `text` (lowercased).
fn spectrum_code(text: &str) -> Option<Reason> {
    let at = text.find("aup#")?;
    let rest = text[at + 4..].trim_start_matches(|c: char| c.is_ascii_alphabetic() || c == '-');
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let number: u16 = digits.get(..4)?.parse().ok()?;
    SPECTRUM_CODES
        .iter()
        .find(|(low, high, _)| (*low..=*high).contains(&number))
        .map(|(_, _, reason)| *reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One example of each reason's words, as an MTA writes them.
    #[test]
    fn every_reason_has_an_example() {
        let examples: &[(&str, Reason)] = &[
            ("552 5.2.2 mailbox full", Reason::MailboxFull),
            (
                "552 message size exceeds fixed maximum message size",
                Reason::MesgTooBig,
            ),
            ("552 5.3.4 message too large", Reason::ExceedLimit),
            ("550 this mailbox is disabled", Reason::Suspend),
            (
                "550 5.1.6 old@a has been replaced by new@a",
                Reason::HasMoved,
            ),
            ("554 5.7.1 relay access denied", Reason::NoRelaying),
            (
                "550 5.7.1 rejected due to dmarc policy",
                Reason::AuthFailure,
            ),
            ("550 rejected due to poor reputation", Reason::BadReputation),
            (
                "550 5.7.25 the ip address has no ptr record",
                Reason::RequirePtr,
            ),
            ("421 4.7.0 rate limit exceeded", Reason::Speeding),
            ("554 5.7.1 virus found in message", Reason::VirusDetected),
            ("550 5.7.1 message rejected as spam", Reason::SpamDetected),
            (
                "550 5.7.1 message is not rfc 5322 compliant",
                Reason::NotCompliantRfc,
            ),
            (
                "550 message rejected due to local policy",
                Reason::PolicyViolation,
            ),
            ("host or domain name not found", Reason::HostUnknown),
            (
                "556 5.1.10 domain does not accept mail (nullmx)",
                Reason::NotAccept,
            ),
            (
                "550 5.1.1 <a@b>: recipient address rejected: user unknown",
                Reason::UserUnknown,
            ),
            ("550 user refuses to receive this mail", Reason::Filtered),
            (
                "554 client host blocked using zen.spamhaus.org",
                Reason::Blocked,
            ),
            (
                "553 5.1.8 sender address rejected: domain not found",
                Reason::Rejected,
            ),
            ("retry timeout exceeded", Reason::Expired),
            ("452 4.5.3 too many recipients", Reason::TooManyConn),
            ("452 4.3.1 mail system full", Reason::SystemFull),
            (
                "554 5.4.6 mail forwarding loop for a@b",
                Reason::NetworkError,
            ),
            ("451 4.3.0 temporary local problem", Reason::SystemError),
            (
                "530 5.7.0 must issue a starttls command first",
                Reason::SecurityError,
            ),
            (
                "554 5.6.0 illegal character in headers",
                Reason::ContentError,
            ),
            ("x-unix; procmail: command died", Reason::MailerError),
        ];
        for (text, reason) in examples {
            assert_eq!(by_words(text), Some(*reason), "{text}");
        }
    }

    #[test]
    fn codes_name_their_reasons() {
        assert_eq!(by_code(5, 1, 1), Some(Reason::UserUnknown));
        assert_eq!(by_code(5, 2, 2), Some(Reason::MailboxFull));
        assert_eq!(by_code(5, 3, 4), Some(Reason::MesgTooBig));
        assert_eq!(by_code(5, 7, 26), Some(Reason::AuthFailure));
        assert_eq!(by_code(4, 4, 7), Some(Reason::Expired));
        assert_eq!(by_code(5, 0, 0), None);
    }

    #[test]
    fn the_address_is_dead_only_when_it_is_said_to_be() {
        assert_eq!(Reason::UserUnknown.class(), Class::Hard);
        assert_eq!(Reason::MailboxFull.class(), Class::Soft);
        assert_eq!(Reason::Suspend.class(), Class::Soft);
        assert_eq!(Reason::MesgTooBig.class(), Class::Soft);
        assert_eq!(Reason::SpamDetected.class(), Class::Policy);
    }
}
