//! How the binary prints a fatal error: each cause once.
//!
//! `thiserror` variants such as `#[error("database error: {0}")]` already
//! include their source's text, and `{:#}` would print that source again,
//! and its source again ("…: Connection refused (os error 111): Connection
//! refused (os error 111)"). The report walks the chain and leaves out a
//! cause whose text has already been said. [`chain`] says the same of
//! any error, for a log line or a record that keeps the whole cause (a
//! typed error's own text names only what failed; its sources say why).

use std::error::Error;

/// The error and its causes, each said once, joined by ": ".
pub fn report(err: &anyhow::Error) -> String {
    said_once(err.chain())
}

/// [`report`] of any error: it and its sources, each said once.
pub fn chain(err: &(dyn Error + 'static)) -> String {
    said_once(std::iter::successors(Some(err), |&e| e.source()))
}

fn said_once<'a>(causes: impl Iterator<Item = &'a (dyn Error + 'static)>) -> String {
    let mut said = String::new();
    for cause in causes {
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

/// `text`, a URL as someone wrote it, with whatever follows a `:` in its
/// user part replaced by `***`, for messages and logs: an error about a
/// settings file or a connection must not print its password. Works on
/// text the URL parser refuses too (the error that says so names it).
pub fn url_without_password(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return text.to_owned();
    };
    let Some((user, _password)) = rest[..at].split_once(':') else {
        return text.to_owned();
    };
    format!("{scheme}://{user}:***@{}", &rest[at + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_urls_password_is_hidden_whether_or_not_it_parses() {
        let hide = url_without_password;
        assert_eq!(
            hide("smtps://user:s3cret@relay.example:465"),
            "smtps://user:***@relay.example:465"
        );
        assert_eq!(
            hide("smtp://u:p@mta example:25"),
            "smtp://u:***@mta example:25"
        );
        assert_eq!(
            hide("imaps://ann@mail.example/"),
            "imaps://ann@mail.example/"
        );
        assert_eq!(hide("smtp://mta.example/a@b"), "smtp://mta.example/a@b");
        assert_eq!(hide("no url"), "no url");
    }

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

    #[derive(Debug, thiserror::Error)]
    #[error("reading the list")]
    struct Context(#[source] std::io::Error);

    #[test]
    fn chain_says_the_context_then_its_cause() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(chain(&Context(io)), "reading the list: connection refused");
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let text = chain(&Wrapping(io));
        assert_eq!(text.matches("refused").count(), 1, "{text}");
    }
}
