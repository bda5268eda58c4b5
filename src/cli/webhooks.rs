//! The `webhooks` commands: list endpoints, send a test, replay dead letters.

use super::args::webhooks::{OutboundArgs, WebhooksReplayArgs, WebhooksTestArgs};
use super::connect::pool;
use super::output::counted;
use crate::outbound::Outbound;
use crate::store;
use anyhow::Context;
use chrono::Utc;
use std::process::ExitCode;

/// `webhooks list`: every endpoint with its backlog.
pub(super) async fn webhooks_list(url: &str, args: &OutboundArgs) -> anyhow::Result<()> {
    let outbound = Outbound::from_settings(&args.settings())?;
    outbound.check_destinations().await?;
    let pool = pool(url).await?;
    let backlog = store::outbox::backlog(&pool).await?;
    let now = Utc::now().naive_utc();
    say!("endpoint\ttarget\tfilter\tqueued\tlag_secs\tdead")?;
    for line in crate::outbound::list_lines(&outbound, &backlog, now) {
        say!("{line}")?;
    }
    Ok(())
}

/// `webhooks test`: one signed `webhook.test` delivery, now; exit status 1
/// unless the endpoint acknowledged it.
pub(super) async fn webhooks_test(args: &WebhooksTestArgs) -> anyhow::Result<ExitCode> {
    let outbound = Outbound::from_settings(&args.outbound.settings())?;
    outbound.check_destinations().await?;
    let Some(endpoint) = outbound.endpoint(&args.endpoint) else {
        anyhow::bail!(
            "--endpoint {:?}: no such endpoint (configured: {})",
            args.endpoint,
            crate::outbound::names(&outbound)
        );
    };
    let outcome = crate::outbound::send_test(endpoint).await?;
    say!("{}: {outcome:?}", endpoint.name)?;
    Ok(if outcome == crate::outbound::webhook::Outcome::Delivered {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `webhooks replay`: dead letters back into the outbox.
pub(super) async fn webhooks_replay(url: &str, args: &WebhooksReplayArgs) -> anyhow::Result<()> {
    let since = parse_since(&args.since)?;
    let pool = pool(url).await?;
    let queued = store::outbox::replay_dead(&pool, &args.endpoint, since).await?;
    say!(
        "{} of endpoint {:?} since {since} queued again",
        counted(queued, "dead letter", "dead letters"),
        args.endpoint
    )?;
    Ok(())
}

/// `--since`: RFC 3339, or a date (its midnight UTC).
fn parse_since(text: &str) -> anyhow::Result<chrono::NaiveDateTime> {
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc).naive_utc());
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .map(|day| day.and_time(chrono::NaiveTime::MIN))
        .with_context(|| {
            format!("--since {text:?}: not an RFC 3339 time (2026-11-23T10:00:00Z) or a date")
        })
}
