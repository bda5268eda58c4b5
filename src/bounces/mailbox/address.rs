//! The mailbox a `bounces fetch` reads, from its URL:
//! `imaps://USER@HOST[:PORT]/FOLDER` (TLS from the first byte, port 993),
//! `imap://…` (STARTTLS, required; port 143), `pop3s://USER@HOST[:PORT]`
//! (995) or `pop3://…` (STLS, required; 110). The user and folder are
//! percent-decoded (`bounces%40example.com`); a password in the URL is
//! refused: it would show in the process list and the shell's history.

use percent_encoding::percent_decode_str;

/// Which protocol the mailbox speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Imap,
    Pop3,
}

/// How the connection is encrypted: TLS at once, or STARTTLS (`STLS` in
/// POP3) before anything else is said. Never in the clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    Tls,
    StartTls,
}

/// A mailbox URL, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailboxUrl {
    pub protocol: Protocol,
    pub security: Security,
    pub host: String,
    pub port: u16,
    pub user: String,
    /// The IMAP folder read (`INBOX` when the URL names none); POP3 has
    /// only the one mailbox.
    pub folder: String,
}

/// A mailbox URL that cannot be used, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("mailbox URL {url:?}: {why}")]
pub struct UrlError {
    pub url: String,
    pub why: String,
    /// The URL parser's reason, when it could not read the URL at all.
    #[source]
    pub source: Option<url::ParseError>,
}

impl MailboxUrl {
    pub fn parse(text: &str) -> Result<MailboxUrl, UrlError> {
        let refuse = |why: &str| UrlError {
            url: crate::error_report::url_without_password(text),
            why: why.to_owned(),
            source: None,
        };
        let url = url::Url::parse(text).map_err(|e| UrlError {
            source: Some(e),
            ..refuse("not a URL")
        })?;
        let (protocol, security, default_port) = match url.scheme() {
            "imaps" => (Protocol::Imap, Security::Tls, 993),
            "imap" => (Protocol::Imap, Security::StartTls, 143),
            "pop3s" => (Protocol::Pop3, Security::Tls, 995),
            "pop3" => (Protocol::Pop3, Security::StartTls, 110),
            other => {
                return Err(refuse(&format!(
                    "scheme {other:?} is none of imaps, imap (STARTTLS), pop3s, pop3 (STLS)"
                )))
            }
        };
        if url.password().is_some() {
            return Err(refuse(
                "a password in the URL would show in the process list: give it in \
                 LINKTRACK_MAILBOX_PASSWORD or --password-file",
            ));
        }
        let host = match url.host_str() {
            Some(host) if !host.is_empty() => host.trim_matches(['[', ']']).to_owned(),
            _ => return Err(refuse("no host")),
        };
        let decode = |s: &str| percent_decode_str(s).decode_utf8().map(|c| c.into_owned());
        let user = decode(url.username()).map_err(|_| refuse("the user is not UTF-8"))?;
        if user.is_empty() {
            return Err(refuse("no user: imaps://USER@HOST/FOLDER"));
        }
        let path = url.path().trim_start_matches('/');
        let folder = decode(path).map_err(|_| refuse("the folder is not UTF-8"))?;
        let folder = match (protocol, folder.is_empty()) {
            (_, true) => "INBOX".to_owned(),
            (Protocol::Imap, false) => folder,
            (Protocol::Pop3, false) => {
                return Err(refuse("POP3 has one mailbox: the URL names no folder"))
            }
        };
        if url.query().is_some() || url.fragment().is_some() {
            return Err(refuse("no query or fragment is read; remove them"));
        }
        Ok(MailboxUrl {
            protocol,
            security,
            host,
            port: url.port().unwrap_or(default_port),
            user,
            folder,
        })
    }
}

impl std::fmt::Display for MailboxUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = match (self.protocol, self.security) {
            (Protocol::Imap, Security::Tls) => "imaps",
            (Protocol::Imap, Security::StartTls) => "imap",
            (Protocol::Pop3, Security::Tls) => "pop3s",
            (Protocol::Pop3, Security::StartTls) => "pop3",
        };
        write!(f, "{scheme}://{}@{}:{}", self.user, self.host, self.port)?;
        if self.protocol == Protocol::Imap {
            write!(f, "/{}", self.folder)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_protocol_security_port_user_and_folder() {
        let url = MailboxUrl::parse("imaps://bounces%40example.com@imap.example.com/Bounces%20in")
            .unwrap();
        assert_eq!(
            url,
            MailboxUrl {
                protocol: Protocol::Imap,
                security: Security::Tls,
                host: "imap.example.com".into(),
                port: 993,
                user: "bounces@example.com".into(),
                folder: "Bounces in".into(),
            }
        );
        let plain = MailboxUrl::parse("imap://u@127.0.0.1:1143").unwrap();
        assert_eq!(
            (plain.security, plain.port, plain.folder.as_str()),
            (Security::StartTls, 1143, "INBOX")
        );
        let pop = MailboxUrl::parse("pop3s://u@[::1]").unwrap();
        assert_eq!(
            (pop.protocol, pop.host.as_str(), pop.port),
            (Protocol::Pop3, "::1", 995)
        );
        assert_eq!(pop.to_string(), "pop3s://u@::1:995");
    }

    #[test]
    fn passwords_other_schemes_and_missing_parts_are_refused() {
        let err = MailboxUrl::parse("imaps://u:hunter2@host/INBOX").unwrap_err();
        assert!(err.why.contains("LINKTRACK_MAILBOX_PASSWORD"), "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        for bad in [
            "https://u@host/INBOX",
            "imaps://host/INBOX",
            "pop3s://u@host/INBOX",
            "imaps://u@host/INBOX?x=1",
            "not a url",
        ] {
            assert!(MailboxUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
