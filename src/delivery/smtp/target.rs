//! Where an SMTP URL points and how to talk there:
//! `smtp://[user[:password]@]host[:port][/ehlo-name][?tls=required|opportunistic]`
//! or `smtps://…` (implicit TLS). The same URLs lettre's transport took,
//! with the same default ports (25; 587 with `tls=`; 465 for `smtps`).

use std::fmt;

/// How the connection is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Security {
    /// Plain text (`smtp://`).
    None,
    /// STARTTLS when the server offers it, plain text otherwise.
    Opportunistic,
    /// STARTTLS, or no delivery.
    Required,
    /// TLS from the first byte (`smtps://`).
    Implicit,
}

/// One MTA, from its URL.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) security: Security,
    /// The name said in EHLO: the URL's path, or this machine's name.
    pub(crate) hello_name: String,
    /// AUTH user and password, percent-decoded.
    pub(crate) credentials: Option<(String, String)>,
}

/// The password never reaches a log.
impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("security", &self.security)
            .field("hello_name", &self.hello_name)
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .finish()
    }
}

/// What is wrong with an SMTP URL.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(transparent)]
    Url(#[from] url::ParseError),
    #[error("unknown tls={0:?} (tls=required or tls=opportunistic)")]
    Tls(String),
    #[error("unknown scheme {0:?} (smtp:// or smtps://)")]
    Scheme(String),
    #[error("no host")]
    NoHost,
    #[error("user or password is not UTF-8 once decoded")]
    NotUtf8(#[source] std::str::Utf8Error),
}

impl Target {
    /// Parse an SMTP URL; the error says what is wrong with it.
    pub(crate) fn parse(url: &str) -> Result<Target, TargetError> {
        let parsed = url::Url::parse(url)?;
        let tls = parsed
            .query_pairs()
            .find(|(key, _)| key == "tls")
            .map(|(_, value)| value.into_owned());
        let (security, default_port) = match (parsed.scheme(), tls.as_deref()) {
            ("smtp", None) => (Security::None, 25),
            ("smtp", Some("required")) => (Security::Required, 587),
            ("smtp", Some("opportunistic")) => (Security::Opportunistic, 587),
            ("smtps", None) => (Security::Implicit, 465),
            ("smtp" | "smtps", Some(other)) => return Err(TargetError::Tls(other.to_owned())),
            (scheme, _) => return Err(TargetError::Scheme(scheme.to_owned())),
        };
        let host = match parsed.host() {
            Some(url::Host::Domain(name)) => name.to_owned(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            None => return Err(TargetError::NoHost),
        };
        let hello_name = match parsed.path().trim_matches('/') {
            "" => this_machine(),
            name => name.to_owned(),
        };
        let credentials = match (parsed.username(), parsed.password()) {
            ("", None) => None,
            (user, password) => Some((decode(user)?, decode(password.unwrap_or_default())?)),
        };
        Ok(Target {
            host,
            port: parsed.port().unwrap_or(default_port),
            security,
            hello_name,
            credentials,
        })
    }

    /// `host:port`, for messages.
    pub(crate) fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

fn decode(part: &str) -> Result<String, TargetError> {
    percent_encoding::percent_decode_str(part)
        .decode_utf8()
        .map(|text| text.into_owned())
        .map_err(TargetError::NotUtf8)
}

/// This machine's name for EHLO, or `localhost` when it has none that
/// could be a domain.
fn this_machine() -> String {
    let name = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let usable = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if usable {
        name
    } else {
        "localhost".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error_report::url_without_password;

    #[test]
    fn the_urls_lettre_took_mean_the_same() {
        let plain = Target::parse("smtp://127.0.0.1:2525").unwrap();
        assert_eq!(
            (plain.host.as_str(), plain.port, plain.security),
            ("127.0.0.1", 2525, Security::None)
        );
        assert!(plain.credentials.is_none());
        assert_eq!(Target::parse("smtp://mta.example").unwrap().port, 25);
        let required = Target::parse("smtp://u%40x:p%3Ass@mta.example?tls=required").unwrap();
        assert_eq!(
            (required.port, required.security),
            (587, Security::Required)
        );
        assert_eq!(
            required.credentials,
            Some(("u@x".to_owned(), "p:ss".to_owned()))
        );
        let implicit = Target::parse("smtps://relay.example/sender.example").unwrap();
        assert_eq!(
            (
                implicit.port,
                implicit.security,
                implicit.hello_name.as_str()
            ),
            (465, Security::Implicit, "sender.example")
        );
        assert_eq!(
            Target::parse("smtp://[::1]:25").unwrap().address(),
            "[::1]:25"
        );
    }

    #[test]
    fn a_bad_url_says_what_is_wrong() {
        assert!(Target::parse("http://mta.example")
            .unwrap_err()
            .to_string()
            .contains("unknown scheme"));
        assert!(Target::parse("smtp://mta.example?tls=always")
            .unwrap_err()
            .to_string()
            .contains("tls=\"always\""));
        assert!(matches!(
            Target::parse("smtp://u:%FF@mta.example"),
            Err(TargetError::NotUtf8(_))
        ));
        assert!(matches!(
            Target::parse("not a url"),
            Err(TargetError::Url(url::ParseError::RelativeUrlWithoutBase))
        ));
    }

    #[test]
    fn the_password_is_not_in_the_debug_form_nor_in_messages() {
        let url = "smtp://user:s3cret@mta.example?tls=required";
        let target = Target::parse(url).unwrap();
        assert!(!format!("{target:?}").contains("s3cret"));
        assert_eq!(
            url_without_password(url),
            "smtp://user:***@mta.example?tls=required"
        );
        assert_eq!(
            url_without_password("smtp://mta.example"),
            "smtp://mta.example"
        );
        assert_eq!(
            url_without_password("smtp://user:s3cret@mta example:25"),
            "smtp://user:***@mta example:25",
            "a text the parser refuses"
        );
    }
}
