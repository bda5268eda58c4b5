//! `linktrack bounces ingest`: one line per message, the exit status from
//! the worst of them; `bounces classify`: one line (or JSON object) per
//! message, what it was read as.

use super::args::bounces::{BouncesCommand, ClassifyArgs, IngestArgs};
use super::args::secrets::PreviousSecretsError;
use super::connect::pool;
use super::exit_status::EXIT_REJECTED;
use crate::bounces::ingest::Ingest;
use crate::bounces::reading::Reading;
use crate::bounces::{read, sources, SoftPolicy};
use crate::outbound::{EndpointError, Outbound};
use crate::store::{seal_keys, StoreError};
use std::process::ExitCode;
use std::sync::Arc;

/// EX_TEMPFAIL (sysexits.h): a pipe transport keeps the message and
/// tries again later.
const EXIT_TEMPFAIL: u8 = 75;

/// EX_CONFIG (sysexits.h): a setting is wrong, so trying again cannot
/// help. Postfix's pipe(8) takes it as permanent (5.3.5, "local
/// configuration error") and Exim too (not in its `temp_errors`): the
/// message is returned at once, not retried for days.
const EXIT_CONFIG: u8 = 78;

pub(super) async fn run(url: &str, command: BouncesCommand) -> anyhow::Result<ExitCode> {
    match command {
        BouncesCommand::Ingest(args) => ingest(url, &args).await,
        BouncesCommand::Classify(args) => classify(&args),
    }
}

/// Every message of the source, read and said; nothing stored.
fn classify(args: &ClassifyArgs) -> anyhow::Result<ExitCode> {
    for message in sources::read(args.source.as_deref(), args.max_bytes)? {
        let reading = read_one(&message, args.max_bytes);
        if args.json {
            let mut value = serde_json::to_value(&reading)?;
            if let Some(object) = value.as_object_mut() {
                object.insert("source".into(), message.name.clone().into());
            }
            say!("{value}")?;
        } else {
            say!("{}: {reading}", message.name)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn read_one(message: &sources::Message, max_bytes: usize) -> Reading {
    if message.size > max_bytes {
        return Reading::not_a_bounce(&format!(
            "too big: {} bytes, over --max-bytes {max_bytes}; not read",
            message.size
        ));
    }
    match read::read(&message.raw) {
        Ok(report) => Reading::of(&report),
        Err(err) => Reading::not_a_bounce(&format!("unreadable: {err}")),
    }
}

async fn ingest(url: &str, args: &IngestArgs) -> anyhow::Result<ExitCode> {
    let messages = sources::read(args.source.as_deref(), args.max_bytes)?;
    let intake = match open(url, args).await {
        Ok(intake) => intake,
        Err(err) if is_configuration(&err) => {
            eprintln!(
                "linktrack bounces ingest: {err:#}; nothing decided: a setting is wrong \
                 (exit {EXIT_CONFIG}, not retried)"
            );
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
        Err(err) => {
            eprintln!("linktrack bounces ingest: {err:#}; nothing decided, try again later");
            return Ok(ExitCode::from(EXIT_TEMPFAIL));
        }
    };
    let mut needs_look = false;
    for message in &messages {
        match intake.message(&message.raw, message.size).await {
            Ok(outcome) => {
                needs_look |= outcome.needs_look;
                say!("{}: {}", message.name, outcome.line)?;
            }
            Err(err) => {
                eprintln!(
                    "linktrack bounces ingest: {}: the database failed: {err}; this and the \
                     following messages were not decided, try again later",
                    message.name
                );
                return Ok(ExitCode::from(EXIT_TEMPFAIL));
            }
        }
    }
    Ok(if needs_look {
        ExitCode::from(EXIT_REJECTED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Whether opening the intake failed on a setting (a secret the database
/// does not know or none at all, an unreadable secrets file, a malformed
/// `DATABASE_URL`, a bad endpoint setting), which no retry mends, rather
/// than on a database that is away.
fn is_configuration(err: &anyhow::Error) -> bool {
    if let Some(store) = err.downcast_ref::<StoreError>() {
        return matches!(store, StoreError::SealKey(_) | StoreError::BadUrl(_));
    }
    err.downcast_ref::<PreviousSecretsError>().is_some()
        || err.downcast_ref::<EndpointError>().is_some()
}

async fn open(url: &str, args: &IngestArgs) -> anyhow::Result<Ingest> {
    // The endpoints are checked before the database is touched: a bad
    // setting is an error naming it, not a retry.
    let outbound = Outbound::from_settings(&args.outbound.settings())?;
    let pool = pool(url).await?;
    let secrets = args.seal.secrets()?;
    let purpose = seal_keys::Purpose::Serve {
        keep_days: args.keep_days,
    };
    let opened = seal_keys::open_ring(&pool, &secrets, purpose).await?;
    Ok(Ingest {
        pool,
        ring: opened.ring,
        soft: SoftPolicy {
            count: args.soft_bounces,
            days: args.soft_days,
        },
        max_bytes: args.max_bytes,
        events_out: Arc::new(outbound),
    })
}
