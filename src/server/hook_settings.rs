//! What the providers' webhooks accept ([`HookSettings`]) and where SNS's
//! certificates may come from ([`TrustedUrls`]): beside `server/hooks/`,
//! not in it, so that the server's settings (`state.rs`) hold them
//! without importing the webhooks' handlers, which take the server's state.

use crate::bounces::SoftPolicy;
use std::time::Duration;
use url::Url;

/// What the webhooks accept; each is off until configured.
#[derive(Clone)]
pub struct HookSettings {
    /// The SNS topics SES publishes to (`TopicArn`); empty: `/hooks/ses`
    /// answers 404. Anyone can sign an SNS message from a topic of their
    /// own, so the topic is what makes it the operator's.
    pub ses_topics: Vec<String>,
    /// Extra places trusted to serve SNS certificates and subscription
    /// confirmations, besides https on `sns.<region>.amazonaws.com`.
    pub sns_trusted: TrustedUrls,
    /// Mailgun's webhook signing key; `None`: `/hooks/mailgun` answers 404.
    pub mailgun_key: Option<String>,
    /// How far a Mailgun signature's timestamp may be from now.
    pub mailgun_max_age: Duration,
    /// When soft bounces suppress, as `bounces ingest --soft-bounces`.
    pub soft: SoftPolicy,
}

/// The default of `--mailgun-max-age`: a genuine post is signed when
/// Mailgun sends it, seconds before it arrives; 15 minutes leaves room for
/// clocks that drift. A post refused as stale is answered 403, so an
/// operator sees it in the counter.
pub const DEFAULT_MAILGUN_MAX_AGE: Duration = Duration::from_secs(15 * 60);

impl Default for HookSettings {
    /// Both webhooks off.
    fn default() -> Self {
        HookSettings {
            ses_topics: Vec::new(),
            sns_trusted: TrustedUrls::default(),
            mailgun_key: None,
            mailgun_max_age: DEFAULT_MAILGUN_MAX_AGE,
            soft: SoftPolicy::default(),
        }
    }
}

impl std::fmt::Debug for HookSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookSettings")
            .field("ses_topics", &self.ses_topics)
            .field("sns_trusted", &self.sns_trusted)
            .field("mailgun_key", &self.mailgun_key.as_ref().map(|_| "(set)"))
            .field("mailgun_max_age", &self.mailgun_max_age)
            .field("soft", &self.soft)
            .finish()
    }
}

/// A `--sns-cert-url-prefix` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PrefixError {
    #[error("--sns-cert-url-prefix {prefix}: {source}")]
    NotUrl {
        prefix: String,
        #[source]
        source: url::ParseError,
    },
    #[error(
        "--sns-cert-url-prefix {prefix}: not an http(s) URL with a host and a path ending in /"
    )]
    NotPrefix { prefix: String },
}

/// Where SNS's certificates and confirmations may be fetched from.
#[derive(Debug, Clone, Default)]
pub struct TrustedUrls {
    /// The operator's extra prefixes (a test's loopback listener, an
    /// internal mirror), parsed: a URL is trusted when its text starts
    /// with one of them.
    pub prefixes: Vec<Url>,
}

impl TrustedUrls {
    /// Parse the operator's prefixes: each an http(s) URL with a host and
    /// a path ending in `/` (so `https://a.example/` never trusts
    /// `https://a.example.evil/`).
    pub fn new(prefixes: &[String]) -> Result<TrustedUrls, PrefixError> {
        let mut parsed = Vec::new();
        for prefix in prefixes {
            let url = Url::parse(prefix).map_err(|source| PrefixError::NotUrl {
                prefix: prefix.clone(),
                source,
            })?;
            let ok = matches!(url.scheme(), "http" | "https")
                && url.host_str().is_some()
                && url.path().ends_with('/')
                && url.query().is_none()
                && url.username().is_empty();
            if !ok {
                return Err(PrefixError::NotPrefix {
                    prefix: prefix.clone(),
                });
            }
            parsed.push(url);
        }
        Ok(TrustedUrls { prefixes: parsed })
    }

    /// Whether `text` is SNS's (https on `sns.<region>.amazonaws.com`,
    /// default port, no user) or under an operator's prefix.
    pub fn trusts(&self, text: &str) -> bool {
        let Ok(url) = Url::parse(text) else {
            return false;
        };
        if self
            .prefixes
            .iter()
            .any(|prefix| url.as_str().starts_with(prefix.as_str()))
        {
            return true;
        }
        url.scheme() == "https"
            && url.port().is_none()
            && url.username().is_empty()
            && url.password().is_none()
            && url.host_str().is_some_and(is_sns_host)
    }
}

/// `sns.<region>.amazonaws.com`, the region one label of lowercase
/// letters, digits and dashes.
fn is_sns_host(host: &str) -> bool {
    let Some(region) = host
        .strip_prefix("sns.")
        .and_then(|rest| rest.strip_suffix(".amazonaws.com"))
    else {
        return false;
    };
    !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}
