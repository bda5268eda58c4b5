//! How the binary prints a fatal error: each cause once.
//!
//! `thiserror` variants such as `#[error("database error: {0}")]` already
//! include their source's text, and `{:#}` would print that source again,
//! and its source again ("…: Connection refused (os error 111): Connection
//! refused (os error 111)"). The report walks the chain and leaves out a
//! cause whose text has already been said.

/// The error and its causes, each said once, joined by ": ".
pub fn report(err: &anyhow::Error) -> String {
    let mut said = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || said.contains(&text) {
            continue;
        }
        if !said.is_empty() {
            said.push_str(": ");
        }
        said.push_str(&text);
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("database error: {0}")]
    struct Wrapping(#[from] std::io::Error);

    #[test]
    fn a_cause_already_in_its_parent_message_is_said_once() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let err = anyhow::Error::from(Wrapping(io)).context("migrate");
        let text = report(&err);
        assert_eq!(text.matches("refused").count(), 1, "{text}");
        assert!(text.starts_with("migrate: database error: "), "{text}");
    }

    #[test]
    fn distinct_causes_are_all_kept() {
        let err = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(report(&err), "outer: middle: inner");
    }
}
