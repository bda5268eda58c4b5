//! Email addresses: normalisation (the suppression list's key) and a
//! deliberately modest validity check. Full RFC 5322 parsing would accept
//! quoted local parts and comments that no sending pool delivers; this
//! rejects what certainly cannot be sent and names why.

/// Lowercased and trimmed: the form stored in `suppressions` and used to
/// recognise the same recipient twice.
pub fn normalize(address: &str) -> String {
    address.trim().to_lowercase()
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
    #[error("address contains {0:?}, which needs quoting no sender supports")]
    Special(char),
    #[error("address is longer than 254 bytes")]
    TooLong,
}

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
    let labels_ok = domain
        .split('.')
        .all(|label| !label.is_empty() && !label.starts_with('-') && !label.ends_with('-'));
    if !domain.contains('.') || !labels_ok {
        return Err(AddressError::BadDomain(domain.to_owned()));
    }
    Ok(())
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
    fn accepts_ordinary_and_international_addresses() {
        for ok in [
            "a@example.com",
            "ann+news@mail.example.co.uk",
            "山田@例え.jp",
            "o'brien@example.ie",
        ] {
            assert_eq!(validate(ok), Ok(()), "{ok}");
        }
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
}
