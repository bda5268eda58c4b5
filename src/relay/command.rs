//! One SMTP command line read into a [`Command`] (RFC 5321, section 4.1).

/// A client's command. Paths are kept as given between the angle brackets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    Ehlo(String),
    Helo(String),
    /// `MAIL FROM:<path>`, with the SIZE parameter when given.
    Mail {
        from: String,
        size: Option<u64>,
    },
    Rcpt(String),
    Data,
    Rset,
    Noop,
    Quit,
    Vrfy,
    /// `STARTTLS` (RFC 3207).
    StartTls,
    /// `AUTH MECHANISM [initial-response]`.
    Auth {
        mechanism: String,
        initial: Option<String>,
    },
    /// A command the relay knows but the line is malformed: why.
    Malformed(&'static str),
    /// A verb the relay does not know.
    Unknown,
}

/// Read one command line (without its line end).
pub(crate) fn parse(line: &str) -> Command {
    let (verb, rest) = match line.split_once(' ') {
        Some((verb, rest)) => (verb, rest.trim()),
        None => (line.trim(), ""),
    };
    match verb.to_ascii_uppercase().as_str() {
        "EHLO" if !rest.is_empty() => Command::Ehlo(rest.to_owned()),
        "HELO" if !rest.is_empty() => Command::Helo(rest.to_owned()),
        "EHLO" | "HELO" => Command::Malformed("a domain or address literal after EHLO/HELO"),
        "MAIL" => mail(rest),
        "RCPT" => match path_after(rest, "TO:") {
            Some((path, _)) if !path.is_empty() => Command::Rcpt(path.to_owned()),
            _ => Command::Malformed("RCPT TO:<address>"),
        },
        "DATA" => Command::Data,
        "RSET" => Command::Rset,
        "NOOP" => Command::Noop,
        "QUIT" => Command::Quit,
        "VRFY" => Command::Vrfy,
        "STARTTLS" if rest.is_empty() => Command::StartTls,
        "STARTTLS" => Command::Malformed("STARTTLS takes no parameter"),
        "AUTH" => {
            let mut words = rest.split_whitespace();
            match words.next() {
                Some(mechanism) => Command::Auth {
                    mechanism: mechanism.to_ascii_uppercase(),
                    initial: words.next().map(str::to_owned),
                },
                None => Command::Malformed("AUTH MECHANISM"),
            }
        }
        _ => Command::Unknown,
    }
}

fn mail(rest: &str) -> Command {
    let Some((from, parameters)) = path_after(rest, "FROM:") else {
        return Command::Malformed("MAIL FROM:<address>");
    };
    let mut size = None;
    for parameter in parameters.split_whitespace() {
        if let Some((name, value)) = parameter.split_once('=') {
            if name.eq_ignore_ascii_case("SIZE") {
                match value.parse() {
                    Ok(n) => size = Some(n),
                    Err(_) => return Command::Malformed("SIZE=<number of bytes>"),
                }
            }
        }
    }
    Command::Mail {
        from: from.to_owned(),
        size,
    }
}

/// The path of `FROM:<path> params` (any case, spaces allowed after the
/// colon), and what follows it.
fn path_after<'a>(rest: &'a str, keyword: &str) -> Option<(&'a str, &'a str)> {
    let head = rest.get(..keyword.len())?;
    if !head.eq_ignore_ascii_case(keyword) {
        return None;
    }
    let after = rest[keyword.len()..].trim_start();
    let inner = after.strip_prefix('<')?;
    let end = inner.find('>')?;
    Some((&inner[..end], inner[end + 1..].trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_commands_are_read_with_their_paths() {
        assert_eq!(
            parse("MAIL FROM:<a@example.com> SIZE=1200 BODY=8BITMIME"),
            Command::Mail {
                from: "a@example.com".into(),
                size: Some(1200)
            }
        );
        assert_eq!(
            parse("mail from: <>"),
            Command::Mail {
                from: String::new(),
                size: None
            }
        );
        assert_eq!(
            parse("RCPT TO:<b@example.org>"),
            Command::Rcpt("b@example.org".into())
        );
        assert!(matches!(
            parse("RCPT TO:b@example.org"),
            Command::Malformed(_)
        ));
        assert!(matches!(
            parse("MAIL FROM:<a@x> SIZE=lots"),
            Command::Malformed(_)
        ));
        assert_eq!(
            parse("AUTH plain AGEAYg=="),
            Command::Auth {
                mechanism: "PLAIN".into(),
                initial: Some("AGEAYg==".into())
            }
        );
        assert_eq!(
            parse("EHLO client.example"),
            Command::Ehlo("client.example".into())
        );
        assert_eq!(parse("BDAT 100"), Command::Unknown);
        assert_eq!(parse("starttls"), Command::StartTls);
        assert!(matches!(parse("STARTTLS now"), Command::Malformed(_)));
    }
}
