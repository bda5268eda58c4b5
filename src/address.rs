//! Email addresses: the one normalisation (the suppression list's key, and
//! how every command recognises the same recipient twice) and a
//! deliberately modest validity check. Full RFC 5322 parsing would accept
//! quoted local parts and comments that no sending pool delivers; this
//! rejects what certainly cannot be sent and names why.
//!
//! [`Email::parse`] is normalisation and validation in one step: build,
//! `suppressions add|import`, the unsubscribe handler and `erase` all go
//! through [`normalize`], so an address written with a byte-order mark, a
//! zero-width space or a non-breaking space is the same address as without.
//!
//! # One identity per address
//!
//! An internationalised domain has two spellings, its Unicode labels
//! (`bücher.example`) and their ASCII form (`xn--bcher-kva.example`, the
//! A-labels of IDNA). [`normalize`] maps every domain to its **A-labels**
//! (UTS #46 processing, as browsers and the `url` crate do), so both
//! spellings are one suppression, one opt-out, one duplicate and one
//! erasure. A-labels because they are what DNS and SMTP use: an address
//! whose local part is ASCII is then deliverable by an MTA without
//! SMTPUTF8. The local part keeps its characters (lowercased, in Unicode
//! NFC, so a composed and a decomposed `é` are the same character).
//!
//! [`AddressKey`] is the installation's keyed hash of a normalised address:
//! what the suppression and opt-out lists keep of an erased address, and
//! what servers compare hits against (docs/privacy.md).

use std::fmt;

/// An address that is normalised and valid: the only way to make one is
/// [`Email::parse`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Email(String);

impl Email {
    /// Normalise `raw` ([`normalize`]) and check the result ([`validate`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use linktrack::address::Email;
    ///
    /// // Spaces trimmed, the domain lowercased (and in its ASCII form).
    /// let email = Email::parse("  Ann.Lee@Example.COM ").unwrap();
    /// assert_eq!(email.as_str(), "ann.lee@example.com");
    /// assert_eq!(Email::parse("Ann@Bücher.example").unwrap().as_str(), "ann@xn--bcher-kva.example");
    ///
    /// // Not an address: the error says why.
    /// let refused = Email::parse("ann.example.com").unwrap_err();
    /// assert!(!refused.to_string().is_empty());
    /// ```
    pub fn parse(raw: &str) -> Result<Email, AddressError> {
        let email = normalize(raw);
        validate(&email)?;
        Ok(Email(email))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for Email {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Serialised as the address itself.
impl serde::Serialize for Email {
    fn serialize<S: serde::Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
        to.serialize_str(&self.0)
    }
}

impl PartialEq<str> for Email {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Email {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl AsRef<str> for Email {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Characters that show as nothing: a byte-order mark (Excel and Notepad
/// start UTF-8 files with one), zero-width spaces and joiners, the word
/// joiner, and the Mongolian vowel separator (white space until Unicode
/// 6.3). None of them is Unicode `White_Space`, so `char::is_whitespace`
/// alone would keep them, and an address carrying one would be a different
/// key from the same address without it.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{feff}' | '\u{200b}' | '\u{200c}' | '\u{200d}' | '\u{2060}' | '\u{180e}'
    )
}

/// `raw` without leading and trailing Unicode white space (`White_Space`:
/// tabs, NBSP U+00A0, ideographic space, …) and invisible characters
/// ([`is_invisible`]). Also how list files tell blank and comment lines.
pub fn trim(raw: &str) -> &str {
    raw.trim_matches(|c: char| c.is_whitespace() || is_invisible(c))
}

/// Trimmed ([`trim`]), lowercased, the local part in Unicode NFC and the
/// domain in A-labels (see the module docs): the form stored in
/// `suppressions` and used to recognise the same recipient twice. Never
/// fails: commands that must act on whatever they are given (`suppressions
/// remove`, `erase`, an unsubscribe) use it directly; [`Email::parse`] adds
/// the check. A domain IDNA refuses is kept lowercased as it was (and
/// [`validate`] refuses it).
pub fn normalize(address: &str) -> String {
    let trimmed = trim(address);
    if is_plain_ascii(trimmed) {
        return trimmed.to_ascii_lowercase();
    }
    normalize_unicode(trimmed)
}

/// ASCII without an `xn--` label: its normal form is its lowercase (NFC
/// leaves ASCII alone, and IDNA either keeps such a domain as it is or
/// refuses it, which keeps it too). Nearly every address is one, and
/// skipping the Unicode work is most of what a server's fingerprint of a
/// clicked letter's address costs (`normalize_unicode` is the reference:
/// a proptest holds them equal).
fn is_plain_ascii(address: &str) -> bool {
    address.is_ascii()
        && !address
            .as_bytes()
            .windows(4)
            .any(|four| four.eq_ignore_ascii_case(b"xn--"))
}

/// [`normalize`] for any address (already trimmed).
fn normalize_unicode(trimmed: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    let lowered = trimmed.to_lowercase();
    let Some((local, domain)) = lowered.rsplit_once('@') else {
        return lowered.nfc().collect();
    };
    let local: String = local.nfc().collect();
    match a_labels(domain) {
        Some(domain) => format!("{local}@{domain}"),
        None => format!("{local}@{domain}"),
    }
}

/// The domain in A-labels (`bücher.example` → `xn--bcher-kva.example`),
/// lowercased; `None` when IDNA refuses it (a bad `xn--` label, a
/// character no domain may hold).
fn a_labels(domain: &str) -> Option<String> {
    idna::domain_to_ascii_cow(domain.as_bytes(), idna::AsciiDenyList::URL)
        .ok()
        .map(std::borrow::Cow::into_owned)
}

/// The domain of a normalised address as people read it (its U-labels),
/// for pages shown to the recipient: `carol@xn--bcher-kva.example` →
/// `carol@bücher.example`. An address IDNA cannot read back is shown as it is.
pub fn for_display(address: &str) -> String {
    let Some((local, domain)) = address.rsplit_once('@') else {
        return address.to_owned();
    };
    match idna::domain_to_unicode(domain) {
        (unicode, Ok(())) => format!("{local}@{unicode}"),
        _ => address.to_owned(),
    }
}

/// Why an address cannot be sent to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("empty address")]
    Empty,
    #[error("address has no @")]
    NoAt,
    #[error("address has more than one @")]
    ManyAt,
    #[error("address has an empty local part")]
    EmptyLocal,
    #[error("address domain {0:?} is not a domain name")]
    BadDomain(String),
    #[error("address contains whitespace or a control character")]
    Whitespace,
    #[error("address contains the invisible character U+{0:04X}")]
    Invisible(u32),
    #[error("address contains {0:?}, which needs quoting no sender supports")]
    Special(char),
    #[error("address is longer than 254 bytes")]
    TooLong,
    #[error("address starts with {0:?}, which a spreadsheet would run as a formula")]
    FormulaStart(char),
}

/// What a spreadsheet opening a CSV or TSV file takes for a formula when a
/// cell starts with it (CSV injection).
const FORMULA_STARTS: &[char] = &['=', '+', '-', '@'];

/// Check a normalised address.
pub fn validate(address: &str) -> Result<(), AddressError> {
    if address.is_empty() {
        return Err(AddressError::Empty);
    }
    if address.len() > 254 {
        return Err(AddressError::TooLong);
    }
    if address.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(AddressError::Whitespace);
    }
    if let Some(c) = address.chars().find(|c| is_invisible(*c)) {
        return Err(AddressError::Invisible(u32::from(c)));
    }
    if let Some(c) = address.chars().find(|c| "<>()[],;:\\\"".contains(*c)) {
        return Err(AddressError::Special(c));
    }
    let (local, domain) = address.split_once('@').ok_or(AddressError::NoAt)?;
    if domain.contains('@') {
        return Err(AddressError::ManyAt);
    }
    if local.is_empty() {
        return Err(AddressError::EmptyLocal);
    }
    // Valid in RFC 5321, but a list is opened in a spreadsheet sooner or
    // later: refused as an address, so none is ever stored.
    if let Some(c) = address
        .chars()
        .next()
        .filter(|c| FORMULA_STARTS.contains(c))
    {
        return Err(AddressError::FormulaStart(c));
    }
    let labels_ok = domain
        .split('.')
        .all(|label| !label.is_empty() && !label.starts_with('-') && !label.ends_with('-'));
    // A normalised domain is its own A-labels: anything else is a spelling
    // IDNA refuses (or an address that was not normalised).
    let idna_ok = a_labels(domain).as_deref() == Some(domain);
    if !domain.contains('.') || !labels_ok || !idna_ok {
        return Err(AddressError::BadDomain(domain.to_owned()));
    }
    Ok(())
}

/// Every spelling of a normalised address a row may hold: as normalised
/// (A-labels) and with its domain's U-labels, the form releases before the
/// A-label rule stored. Each once.
pub fn spellings(address: &str) -> Vec<String> {
    let normalised = normalize(address);
    let unicode = for_display(&normalised);
    if unicode == normalised {
        vec![normalised]
    } else {
        vec![normalised, unicode]
    }
}

/// The forms an address takes in stored text (a personalised URL, an MTA's
/// reply, a payload): each spelling as it is, percent-encoded whole
/// (every byte but `A-Z a-z 0-9 - . _ ~`), and with only `@` and non-ASCII
/// bytes encoded (what most URL builders do).
pub fn text_forms(address: &str) -> Vec<String> {
    let mut forms = Vec::new();
    for spelling in spellings(address) {
        let whole = percent_encode(&spelling, |b| {
            b.is_ascii_alphanumeric() || b"-._~".contains(&b)
        });
        let light = percent_encode(&spelling, |b| b.is_ascii() && b != b'@');
        for form in [spelling, whole, light] {
            if !forms.contains(&form) {
                forms.push(form);
            }
        }
    }
    forms
}

/// `text` with every byte `keep` refuses written as `%XX`.
fn percent_encode(text: &str, keep: impl Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if keep(byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `text` with every form of `address` ([`text_forms`], ASCII case and the
/// case of percent-escapes ignored) removed; `None` when it holds none.
pub fn scrub(text: &str, address: &str) -> Option<String> {
    let forms = text_forms(address);
    let finder = aho_corasick::AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .match_kind(aho_corasick::MatchKind::LeftmostLongest)
        .build(&forms)
        .ok()?;
    if !finder.is_match(text) {
        return None;
    }
    let nothing = vec![""; forms.len()];
    Some(finder.replace_all(text, &nothing))
}

/// A piece of `address` long enough to find the rows that may hold it
/// with a `LIKE '%…%'` (which the text columns' collation makes
/// case-insensitive): its local part's longest run of ASCII letters and
/// digits, which every form of [`text_forms`] contains.
pub fn search_piece(address: &str) -> String {
    let normalised = normalize(address);
    let local = normalised
        .rsplit_once('@')
        .map_or(normalised.as_str(), |(l, _)| l);
    local
        .split(|c: char| !c.is_ascii_alphanumeric())
        .max_by_key(|run| run.len())
        .unwrap_or_default()
        .to_owned()
}

/// The installation's key for hashing addresses (HMAC-SHA256): 32 random
/// bytes made by the first `linktrack migrate` (`privacy_key`). What the
/// suppression and opt-out lists keep of an erased address is its
/// [`AddressKey::digest`]; servers hold [`AddressKey::fingerprint`]s.
/// Without the key a digest cannot be checked against a guessed address.
#[derive(Clone)]
pub struct AddressKey {
    mac: hmac::Hmac<sha2::Sha256>,
}

impl std::fmt::Debug for AddressKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AddressKey(..)")
    }
}

/// The first 8 bytes of an address's [`AddressKey::digest`], as a number:
/// what a server's in-memory opt-out and erasure sets hold (a false match
/// between two of a billion addresses is about one in 2^34).
pub type Fingerprint = u64;

impl AddressKey {
    /// The key from its bytes (any length works for HMAC; the table holds 32).
    pub fn new(key: &[u8]) -> AddressKey {
        use hmac::Mac;
        // HMAC takes keys of every length: this cannot fail.
        let mac = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        AddressKey { mac }
    }

    /// HMAC-SHA256 of the address in its normalised form ([`normalize`]
    /// first, so both spellings of an address give the same digest).
    pub fn digest(&self, address: &str) -> [u8; 32] {
        use hmac::Mac;
        let mut mac = self.mac.clone();
        mac.update(normalize(address).as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// The address's [`Fingerprint`].
    pub fn fingerprint(&self, address: &str) -> Fingerprint {
        fingerprint_of(&self.digest(address))
    }
}

/// The [`Fingerprint`] a digest stands for (a digest of any other length
/// than 32 bytes, which linktrack never writes, is read as far as it goes).
pub fn fingerprint_of(digest: &[u8]) -> Fingerprint {
    let mut first = [0u8; 8];
    for (to, from) in first.iter_mut().zip(digest) {
        *to = *from;
    }
    u64::from_be_bytes(first)
}

/// A value as every CSV or TSV linktrack writes holds it (lists, exports):
/// one that starts with `=`, `+`, `-`, `@`, a tab or a carriage return gets
/// a leading `'`, which spreadsheets show and do not run (OWASP's advice
/// for CSV injection); tabs and line breaks inside become spaces, so a
/// value stays one field on one line.
pub fn csv_safe(value: &str) -> std::borrow::Cow<'_, str> {
    // A lone `-` (the listings' "none") is no formula.
    let starts_like_a_formula = value != "-"
        && value
            .chars()
            .next()
            .is_some_and(|c| FORMULA_STARTS.contains(&c) || c == '\t' || c == '\r');
    let breaks_the_line = value.contains(['\t', '\r', '\n']);
    if !starts_like_a_formula && !breaks_the_line {
        return std::borrow::Cow::Borrowed(value);
    }
    let flat = value.replace(['\t', '\r', '\n'], " ");
    if starts_like_a_formula {
        std::borrow::Cow::Owned(format!("'{flat}"))
    } else {
        std::borrow::Cow::Owned(flat)
    }
}

/// Mailbox providers by the domains of their consumer addresses (for
/// the breakdowns): a recipient's provider is read from the address's
/// domain (normalised: lowercase, A-labels). Other domains are "other"
/// (company mail hosted anywhere cannot be told from the address alone).
pub const MAILBOX_PROVIDERS: &[(&str, &[&str])] = &[
    ("Gmail", &["gmail.com", "googlemail.com"]),
    (
        "Microsoft",
        &[
            "outlook.com",
            "hotmail.com",
            "live.com",
            "msn.com",
            "hotmail.co.uk",
            "hotmail.fr",
            "hotmail.de",
            "hotmail.it",
            "hotmail.es",
            "outlook.fr",
            "outlook.de",
            "live.co.uk",
            "live.fr",
            "live.de",
        ],
    ),
    (
        "Yahoo",
        &[
            "yahoo.com",
            "ymail.com",
            "rocketmail.com",
            "aol.com",
            "yahoo.co.uk",
            "yahoo.fr",
            "yahoo.de",
            "yahoo.it",
            "yahoo.es",
            "yahoo.co.jp",
        ],
    ),
    ("Apple", &["icloud.com", "me.com", "mac.com"]),
];

/// The mailbox provider of an address ([`MAILBOX_PROVIDERS`]), "other"
/// for any other domain, "unknown" without an address.
pub fn mailbox_provider(address: &str) -> &'static str {
    let Some((_, domain)) = address.rsplit_once('@') else {
        return "unknown";
    };
    let domain = domain.to_ascii_lowercase();
    MAILBOX_PROVIDERS
        .iter()
        .find(|(_, domains)| domains.contains(&domain.as_str()))
        .map_or("other", |(provider, _)| provider)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_case_and_space() {
        assert_eq!(normalize("  Ann.Lee@Example.COM \t"), "ann.lee@example.com");
        assert_eq!(normalize("JOSÉ@Example.es"), "josé@example.es");
    }

    #[test]
    fn invisible_and_unicode_space_at_either_end_is_trimmed() {
        for raw in [
            "\u{feff}x@y.com",
            "x@y.com\u{feff}",
            "\u{200b}x@y.com\u{200b}",
            "x@y.com\u{00a0}",
            "\u{00a0}\u{2060}X@Y.com\u{200d}\u{200c}",
            "\u{3000}x@y.com\u{2028}",
            "\u{180e}x@y.com\r\n",
        ] {
            assert_eq!(normalize(raw), "x@y.com", "{raw:?}");
            assert_eq!(
                Email::parse(raw).map(Email::into_string),
                Ok("x@y.com".into())
            );
        }
    }

    #[test]
    fn parse_refuses_what_validate_refuses_and_names_the_invisible_character() {
        assert_eq!(Email::parse(" \u{feff} "), Err(AddressError::Empty));
        assert_eq!(Email::parse("a@b@c.com"), Err(AddressError::ManyAt));
        assert_eq!(Email::parse("no-at.example.com"), Err(AddressError::NoAt));
        assert_eq!(Email::parse("a b@c.com"), Err(AddressError::Whitespace));
        assert_eq!(
            Email::parse("a\u{00a0}b@c.com"),
            Err(AddressError::Whitespace)
        );
        let inside = Email::parse("a\u{200b}b@c.com").unwrap_err();
        assert_eq!(inside, AddressError::Invisible(0x200b));
        assert!(inside.to_string().contains("U+200B"), "{inside}");
    }

    proptest::proptest! {
        /// Whatever invisible or white-space characters surround an
        /// address, it normalises to the same key, so it cannot slip past
        /// a suppression.
        #[test]
        fn padding_never_changes_the_key(
            pad_left in proptest::collection::vec(padding(), 0..4),
            pad_right in proptest::collection::vec(padding(), 0..4),
        ) {
            let raw: String = pad_left
                .iter()
                .copied()
                .chain(std::iter::once("Ann@Example.com"))
                .chain(pad_right.iter().copied())
                .collect();
            proptest::prop_assert_eq!(normalize(&raw), "ann@example.com");
        }
    }

    proptest::proptest! {
        /// The ASCII shortcut gives what the full Unicode path gives, for
        /// any printable ASCII (the characters IDNA refuses included).
        #[test]
        fn the_ascii_shortcut_agrees_with_the_unicode_path(
            local in "[ -~]{0,12}",
            domain in "[ -~]{0,16}",
            labels in proptest::collection::vec("[A-Za-z0-9-]{0,8}", 0..4),
        ) {
            for raw in [
                format!("{local}@{domain}"),
                format!("{local}@{}", labels.join(".")),
                format!("{local}@{domain}.{}", labels.join(".")),
                local.clone(),
            ] {
                let trimmed = trim(&raw);
                if is_plain_ascii(trimmed) {
                    proptest::prop_assert_eq!(normalize(&raw), normalize_unicode(trimmed), "{:?}", raw);
                }
            }
        }
    }

    #[test]
    fn the_ascii_shortcut_leaves_a_labels_and_unicode_to_idna() {
        assert!(!is_plain_ascii("ann@XN--bcher-kva.example"));
        assert!(!is_plain_ascii("zoë@example.com"));
        assert!(is_plain_ascii("ann@example.com"));
        assert_eq!(
            normalize(" Ann@XN--Bcher-KVA.Example "),
            "ann@xn--bcher-kva.example"
        );
        assert_eq!(normalize("Ann@Bücher.Example"), "ann@xn--bcher-kva.example");
    }

    fn padding() -> impl proptest::strategy::Strategy<Value = &'static str> {
        proptest::sample::select(vec![
            " ", "\t", "\r", "\n", "\u{a0}", "\u{feff}", "\u{200b}", "\u{200c}", "\u{200d}",
            "\u{2060}", "\u{2007}", "\u{202f}", "\u{3000}", "\u{85}", "\u{1680}",
        ])
    }

    #[test]
    fn accepts_ordinary_and_international_addresses() {
        for ok in [
            "a@example.com",
            "ann+news@mail.example.co.uk",
            "山田@例え.jp",
            "o'brien@example.ie",
        ] {
            assert_eq!(validate(&normalize(ok)), Ok(()), "{ok}");
        }
    }

    #[test]
    fn both_spellings_of_an_international_domain_are_one_address() {
        for spelling in [
            "carol@bücher.example",
            "carol@xn--bcher-kva.example",
            "Carol@BÜCHER.example",
            "CAROL@XN--BCHER-KVA.EXAMPLE",
            // A full-width dot and letters, mapped by UTS #46.
            "carol@ｂücher．example",
        ] {
            assert_eq!(
                Email::parse(spelling).map(Email::into_string),
                Ok("carol@xn--bcher-kva.example".to_owned()),
                "{spelling}"
            );
        }
        assert_eq!(
            normalize("山田@例え.jp"),
            "山田@xn--r8jz45g.jp",
            "the local part keeps its characters"
        );
        assert_eq!(
            for_display("carol@xn--bcher-kva.example"),
            "carol@bücher.example"
        );
    }

    #[test]
    fn a_composed_and_a_decomposed_accent_are_one_address() {
        assert_eq!(normalize("jose\u{301}@example.es"), "jos\u{e9}@example.es");
        assert_ne!(normalize("josé@example.es"), normalize("jose@example.es"));
    }

    #[test]
    fn a_domain_idna_refuses_is_no_address() {
        for bad in [
            "ann@xn--zz-.example",
            "ann@ex%ample.com",
            "ann@exa mple.com",
        ] {
            assert!(Email::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn scrub_takes_out_every_spelling_and_encoding() {
        let url = "https://shop.example/?u=Carol%40xn--bcher-kva.example&v=carol%40b%C3%BCcher.example&w=carol@bücher.example#x";
        let scrubbed = scrub(url, "carol@bücher.example").unwrap();
        assert_eq!(scrubbed, "https://shop.example/?u=&v=&w=#x");
        assert_eq!(scrub("nothing here", "carol@bücher.example"), None);
        let reply = "550 5.1.1 <O'Brien@Example.ie>: Recipient address rejected";
        assert_eq!(
            scrub(reply, "o'brien@example.ie").as_deref(),
            Some("550 5.1.1 <>: Recipient address rejected")
        );
        assert_eq!(
            scrub("x=o%27brien%40example.ie", "o'brien@example.ie").as_deref(),
            Some("x=")
        );
        assert_eq!(search_piece("o'brien@example.ie"), "brien");
        assert_eq!(
            spellings("carol@xn--bcher-kva.example"),
            ["carol@xn--bcher-kva.example", "carol@bücher.example"]
        );
    }

    #[test]
    fn the_keyed_hash_is_the_same_for_both_spellings_and_differs_by_key() {
        let key = AddressKey::new(&[7; 32]);
        let a = key.digest("carol@bücher.example");
        assert_eq!(a, key.digest(" CAROL@xn--bcher-kva.example "));
        assert_ne!(a, key.digest("carol@bucher.example"));
        assert_ne!(a, AddressKey::new(&[8; 32]).digest("carol@bücher.example"));
        assert_eq!(
            key.fingerprint("carol@bücher.example"),
            u64::from_be_bytes(a[..8].try_into().unwrap())
        );
    }

    #[test]
    fn rejects_what_cannot_be_sent() {
        assert_eq!(validate(""), Err(AddressError::Empty));
        assert_eq!(validate("example.com"), Err(AddressError::NoAt));
        assert_eq!(validate("@example.com"), Err(AddressError::EmptyLocal));
        assert!(matches!(
            validate("a@localhost"),
            Err(AddressError::BadDomain(_))
        ));
        assert_eq!(validate("a@b@c.com"), Err(AddressError::ManyAt));
        assert!(matches!(
            validate("a@-x.com"),
            Err(AddressError::BadDomain(_))
        ));
        assert_eq!(validate("a b@example.com"), Err(AddressError::Whitespace));
        assert_eq!(validate("<a@example.com>"), Err(AddressError::Special('<')));
        assert_eq!(
            validate(&format!("{}@example.com", "a".repeat(250))),
            Err(AddressError::TooLong)
        );
    }

    #[test]
    fn formula_starts_are_refused_and_neutralised() {
        for bad in [
            "=cmd|'/ccalc'!a0@example.com",
            "+1@example.com",
            "-x@example.com",
        ] {
            assert!(
                matches!(validate(bad), Err(AddressError::FormulaStart(_))),
                "{bad}"
            );
        }
        assert_eq!(validate("@example.com"), Err(AddressError::EmptyLocal));
        assert_eq!(
            csv_safe("=cmd|'/ccalc'!a0@example.com"),
            "'=cmd|'/ccalc'!a0@example.com"
        );
        assert_eq!(csv_safe("@SUM(1)"), "'@SUM(1)");
        assert_eq!(csv_safe("a\tb\nc"), "a b c");
        assert_eq!(csv_safe("ann@example.com"), "ann@example.com");
        assert_eq!(csv_safe("-"), "-");
        assert!(matches!(
            csv_safe("plain note"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
