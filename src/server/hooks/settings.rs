//! What the providers' webhooks accept ([`HookSettings`]), a file of its
//! own so that the server's settings (`state.rs`) can hold them without
//! importing the webhooks' handlers, which take the server's state.

use super::sns;
use crate::bounces::SoftPolicy;
use std::time::Duration;

/// What the webhooks accept; each is off until configured.
#[derive(Clone)]
pub struct HookSettings {
    /// The SNS topics SES publishes to (`TopicArn`); empty: `/hooks/ses`
    /// answers 404. Anyone can sign an SNS message from a topic of their
    /// own, so the topic is what makes it the operator's.
    pub ses_topics: Vec<String>,
    /// Extra places trusted to serve SNS certificates and subscription
    /// confirmations, besides https on `sns.<region>.amazonaws.com`.
    pub sns_trusted: sns::TrustedUrls,
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
            sns_trusted: sns::TrustedUrls::default(),
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
