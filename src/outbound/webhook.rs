//! One Standard Webhooks delivery: a signed POST of the stored body.

use super::signature::Secret;
use crate::destinations::Destinations;
use std::time::Duration;

/// What one attempt came to. A failure is said as text, its causes
/// included: it is what the outbox row records and `webhooks test` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged (2xx, or the broker's confirm).
    Delivered,
    /// Worth trying again: no answer, a timeout, 408, 429, 5xx, 3xx.
    Retry(String),
    /// Refused for good (a 4xx other than 408 and 429): dead-letter it.
    Permanent(String),
}

/// Posts to one endpoint.
#[derive(Debug, Clone)]
pub struct WebhookSink {
    client: reqwest::Client,
    url: reqwest::Url,
    secret: Secret,
    destinations: Destinations,
}

impl WebhookSink {
    /// A client for `url`: no redirects (a receiver's 3xx is a failure to
    /// fix, not a place to send signed events), `timeout` per request, and
    /// only to the addresses `destinations` allows (a name is resolved
    /// through the checking resolver; a literal is checked at each send).
    pub fn new(
        url: reqwest::Url,
        secret: Secret,
        timeout: Duration,
        connections: usize,
        destinations: Destinations,
    ) -> Result<WebhookSink, reqwest::Error> {
        let client = reqwest::Client::builder()
            .dns_resolver(crate::destinations::checked_resolver(destinations.clone()))
            // Environment proxies would connect on our behalf, unchecked.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout)
            .pool_max_idle_per_host(connections)
            .user_agent(concat!("linktrack/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(WebhookSink {
            client,
            url,
            secret,
            destinations,
        })
    }

    pub fn url(&self) -> &reqwest::Url {
        &self.url
    }

    /// POST `body` with the Standard Webhooks headers: `id` is the event's
    /// own id (the same on every retry), the timestamp is this attempt's.
    pub async fn send(&self, id: &str, body: &str) -> Outcome {
        if let Err(refused) = self.destinations.check_literal(&self.url) {
            return Outcome::Retry(refused.to_string());
        }
        let timestamp = chrono::Utc::now().timestamp();
        let signature = self.secret.sign(id, timestamp, body.as_bytes());
        let sent = self
            .client
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body.to_owned())
            .send()
            .await;
        match sent {
            Ok(response) => outcome_of(response.status()),
            // reqwest names the URL in its text: its credentials must not
            // reach the outbox, the log or `webhooks test`.
            Err(err) => Outcome::Retry(crate::error_report::chain(&err.without_url())),
        }
    }
}

/// 2xx delivered; 408, 429, 5xx and anything else retried; other 4xx final.
pub fn outcome_of(status: reqwest::StatusCode) -> Outcome {
    if status.is_success() {
        Outcome::Delivered
    } else if status.is_client_error() && !matches!(status.as_u16(), 408 | 429) {
        Outcome::Permanent(format!("HTTP {status}"))
    } else {
        Outcome::Retry(format!("HTTP {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::StatusCode;

    #[test]
    fn statuses_sort_into_delivered_retry_and_permanent() {
        assert_eq!(outcome_of(StatusCode::OK), Outcome::Delivered);
        assert_eq!(outcome_of(StatusCode::NO_CONTENT), Outcome::Delivered);
        for retry in [408, 429, 500, 503, 302] {
            let status = StatusCode::from_u16(retry).unwrap();
            assert!(matches!(outcome_of(status), Outcome::Retry(_)), "{retry}");
        }
        for permanent in [400, 401, 404, 410, 413] {
            let status = StatusCode::from_u16(permanent).unwrap();
            assert!(
                matches!(outcome_of(status), Outcome::Permanent(_)),
                "{permanent}"
            );
        }
    }
}
