//! Providers' bounce and complaint webhooks (docs/bounces.md, "Provider
//! webhooks"): `POST /hooks/ses` (Amazon SES through SNS, the SNS
//! signature verified in `sns.rs`) and `POST /hooks/mailgun` (Mailgun's
//! HMAC in `mailgun.rs`). An authenticated event is read by
//! `bounces::providers` and decided by the same `bounces::ingest` path as
//! `linktrack bounces ingest`; a post that is unsigned or wrongly signed
//! is refused (401 or 403, the body says why) and counted in
//! `linktrack_webhook_refused_total{provider, reason}`.

mod mailgun;
pub mod sns;

pub use super::hook_settings::{HookSettings, DEFAULT_MAILGUN_MAX_AGE};

use super::state::AppState;
use crate::bounces::ingest::{event_key, Ingest, Outcome};
use crate::bounces::providers::{self, EventError};
use crate::bounces::SoftPolicy;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use std::sync::Arc;

#[derive(Clone)]
struct Hooks(Arc<Shared>);

struct Shared {
    app: AppState,
    /// Where the decisions' `email.bounced` / `email.complained` go.
    outbound: crate::outbound::Outbound,
    ses_topics: Vec<String>,
    certificates: sns::Certificates,
    mailgun: Option<mailgun::Verifier>,
    soft: SoftPolicy,
}

/// The routes, on the public listener (providers post from the internet);
/// decisions go out as events to `outbound`'s endpoints.
pub(crate) fn router(
    app: AppState,
    outbound: crate::outbound::Outbound,
) -> Result<Router, reqwest::Error> {
    let settings = app.settings.hooks.clone();
    let certificates = sns::Certificates::new(settings.sns_trusted.clone())?;
    let mailgun = settings
        .mailgun_key
        .as_deref()
        .map(|key| mailgun::Verifier::new(key, settings.mailgun_max_age));
    let hooks = Hooks(Arc::new(Shared {
        app,
        outbound,
        ses_topics: settings.ses_topics,
        certificates,
        mailgun,
        soft: settings.soft,
    }));
    Ok(Router::new()
        .route("/hooks/ses", post(ses))
        .route("/hooks/mailgun", post(mailgun_post))
        .with_state(hooks))
}

type Answer = (StatusCode, String);

/// A refused post: counted by provider and reason, answered with why.
fn refused(
    provider: &'static str,
    reason: &'static str,
    status: StatusCode,
    why: String,
) -> Answer {
    metrics::counter!("linktrack_webhook_refused_total",
        "provider" => provider, "reason" => reason)
    .increment(1);
    tracing::warn!(provider, reason, %why, "webhook post refused");
    (status, format!("refused: {why}\n"))
}

fn not_configured(what: &str) -> Answer {
    (
        StatusCode::NOT_FOUND,
        format!("{what} is not configured on this server\n"),
    )
}

fn bad_event(provider: &'static str, err: EventError) -> Answer {
    refused(
        provider,
        "bad_event",
        StatusCode::BAD_REQUEST,
        format!("the event: {}", crate::error_report::chain(&err)),
    )
}

/// `POST /hooks/ses`: an SNS message from one of the configured topics.
async fn ses(State(hooks): State<Hooks>, body: Bytes) -> Answer {
    const SES: &str = "ses";
    if hooks.0.ses_topics.is_empty() {
        return not_configured("/hooks/ses (--ses-topic-arn)");
    }
    let message: sns::SnsMessage = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(err) => {
            return refused(
                SES,
                "bad_request",
                StatusCode::BAD_REQUEST,
                format!("the body is not an SNS message (JSON with Type, MessageId, TopicArn, Message, Timestamp): {err}"),
            )
        }
    };
    // The topic first: a post from anyone else's topic fetches no
    // certificate.
    if !hooks.0.ses_topics.contains(&message.topic_arn) {
        return refused(
            SES,
            "unknown_topic",
            StatusCode::FORBIDDEN,
            format!(
                "TopicArn {} is not one of --ses-topic-arn",
                message.topic_arn
            ),
        );
    }
    if let Err(refusal) = hooks.0.certificates.verify(&message).await {
        let status = match refusal {
            sns::Refusal::Unsigned => StatusCode::UNAUTHORIZED,
            // Our side or SNS's may be down: SNS retries on a 5xx.
            sns::Refusal::Certificate(_) => StatusCode::SERVICE_UNAVAILABLE,
            sns::Refusal::Incomplete(..) => StatusCode::BAD_REQUEST,
            _ => StatusCode::FORBIDDEN,
        };
        return refused(SES, refusal.reason(), status, refusal.to_string());
    }
    match message.kind.as_str() {
        "SubscriptionConfirmation" => confirm(&hooks, &message).await,
        "UnsubscribeConfirmation" => {
            tracing::warn!(topic = %message.topic_arn, "SNS says this endpoint was unsubscribed");
            (StatusCode::OK, "unsubscribe noted\n".into())
        }
        "Notification" => match providers::ses(&message.message) {
            Ok(event) => act(&hooks, SES, event).await,
            Err(err) => bad_event(SES, err),
        },
        other => refused(
            SES,
            "bad_request",
            StatusCode::BAD_REQUEST,
            format!("Type {other:?} is not an SNS message type"),
        ),
    }
}

/// Confirm a subscription by fetching its SubscribeURL, trusted as a
/// certificate URL is.
async fn confirm(hooks: &Hooks, message: &sns::SnsMessage) -> Answer {
    let url = message.subscribe_url.as_deref().unwrap_or_default();
    if !hooks.0.certificates.trusted.trusts(url) {
        return refused(
            "ses",
            "untrusted_subscribe_url",
            StatusCode::FORBIDDEN,
            format!("SubscribeURL {url} is not on a trusted SNS host"),
        );
    }
    match hooks.0.certificates.fetch(url).await {
        Ok(_) => {
            tracing::info!(topic = %message.topic_arn, "SNS subscription confirmed");
            (StatusCode::OK, "subscription confirmed\n".into())
        }
        Err(err) => (
            StatusCode::BAD_GATEWAY,
            format!("confirming the subscription failed: {err}\n"),
        ),
    }
}

/// A Mailgun webhook post: `signature` and `event-data`.
#[derive(serde::Deserialize)]
struct MailgunPost {
    signature: Option<mailgun::Signature>,
    #[serde(rename = "event-data")]
    event_data: Option<serde_json::Value>,
}

/// `POST /hooks/mailgun`.
async fn mailgun_post(State(hooks): State<Hooks>, body: Bytes) -> Answer {
    const MAILGUN: &str = "mailgun";
    let Some(verifier) = &hooks.0.mailgun else {
        return not_configured("/hooks/mailgun (--mailgun-signing-key)");
    };
    let post: MailgunPost = match serde_json::from_slice(&body) {
        Ok(post) => post,
        Err(err) => {
            return refused(
                MAILGUN,
                "bad_request",
                StatusCode::BAD_REQUEST,
                format!("the body is not a Mailgun webhook post (JSON with signature and event-data): {err}"),
            )
        }
    };
    let Some(signature) = post.signature else {
        let refusal = mailgun::Refusal::Unsigned;
        return refused(
            MAILGUN,
            refusal.reason(),
            StatusCode::UNAUTHORIZED,
            refusal.to_string(),
        );
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let checked = match verifier.check(&signature, now) {
        Ok(()) if verifier.used(&signature.token).await => Err(mailgun::Refusal::Replayed),
        other => other,
    };
    if let Err(refusal) = checked {
        return refused(
            MAILGUN,
            refusal.reason(),
            StatusCode::FORBIDDEN,
            refusal.to_string(),
        );
    }
    let Some(event_data) = post.event_data else {
        return bad_event(MAILGUN, EventError::Field("event-data"));
    };
    let event = match providers::mailgun(&event_data) {
        Ok(event) => event,
        Err(err) => return bad_event(MAILGUN, err),
    };
    if let Err(answer) = bind_token(&hooks, MAILGUN, verifier, &signature.token, &event.id).await {
        return answer;
    }
    let answer = act(&hooks, MAILGUN, event).await;
    if answer.0.is_success() {
        verifier.spend(&signature.token).await;
    }
    answer
}

/// Bind a post's signature token to the event it carries, in the database
/// every server shares: the signature covers only the timestamp and the
/// token, so the same token with another event (a captured signature on
/// a forged body, on this server or another) is refused. The provider's
/// own retry (same token, same event) goes on to be decided once.
async fn bind_token(
    hooks: &Hooks,
    provider: &'static str,
    verifier: &mailgun::Verifier,
    token: &str,
    event_id: &str,
) -> Result<(), Answer> {
    use crate::store::provider_tokens::{self, TokenUse};
    let pool = &hooks.0.app.pool;
    let key = event_key(event_id);
    let bound = provider_tokens::bind(pool, provider, token, &key);
    match hooks.0.app.bounded(bound).await {
        Ok(TokenUse::First) => {
            // Tokens past twice the accepted age are refused as stale first.
            let prune = provider_tokens::prune(pool, verifier.max_age().saturating_mul(2), 100);
            if let Err(err) = prune.await {
                tracing::debug!(%err, "provider tokens not pruned");
            }
            Ok(())
        }
        Ok(TokenUse::SameEvent) => Ok(()),
        Ok(TokenUse::OtherEvent) => {
            let refusal = mailgun::Refusal::Replayed;
            Err(refused(
                provider,
                refusal.reason(),
                StatusCode::FORBIDDEN,
                refusal.to_string(),
            ))
        }
        Err(err) => Err((
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the database failed: {err}; nothing decided, try again\n"),
        )),
    }
}

/// Decide an authenticated event as `bounces ingest` decides a message;
/// count what was decided now. 200 with the decision's line, also for an
/// event that names no letter of ours (a provider would retry anything
/// else for days); 503 when the database or the seal keys are not there
/// (the provider retries).
async fn act(hooks: &Hooks, provider: &'static str, event: providers::Event) -> Answer {
    let app = &hooks.0.app;
    let Some(ring) = app.seal() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "the seal keys are not loaded yet (database unavailable); try again\n".into(),
        );
    };
    let ingest = Ingest {
        pool: app.pool.clone(),
        ring: ring.clone(),
        soft: hooks.0.soft,
        max_bytes: crate::bounces::ingest::DEFAULT_MAX_BYTES,
        events_out: Arc::new(hooks.0.outbound.clone()),
    };
    let outcome = ingest.report(&event.report, &event_key(&event.id)).await;
    match outcome {
        Ok(outcome) => {
            count(provider, &outcome);
            if outcome.needs_look {
                tracing::warn!(provider, event = %event.id, line = %outcome.line, "provider event needs a look");
            }
            (StatusCode::OK, format!("{}: {}\n", event.id, outcome.line))
        }
        Err(err) => {
            tracing::warn!(provider, event = %event.id, %err, "provider event not decided");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the database failed: {err}; nothing decided, try again\n"),
            )
        }
    }
}

/// The decisions stored now, by kind: `linktrack_bounces_total{source,
/// class}` and `linktrack_complaints_total{source}`.
fn count(provider: &'static str, outcome: &Outcome) {
    for kind in &outcome.decided {
        match *kind {
            "complaint" => {
                metrics::counter!("linktrack_complaints_total", "source" => provider).increment(1)
            }
            class => metrics::counter!("linktrack_bounces_total",
                "source" => provider, "class" => class)
            .increment(1),
        }
    }
}
