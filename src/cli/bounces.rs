//! `linktrack bounces ingest`: one line per message, the exit status from
//! the worst of them; `bounces classify`: one line (or JSON object) per
//! message, what it was read as.

use super::args::bounces::{
    AfterArg, BouncesCommand, ClassifyArgs, FetchArgs, IngestArgs, IntakeArgs,
};
use super::args::secrets::PreviousSecretsError;
use super::connect::pool;
use super::exit_status::EXIT_REJECTED;
use crate::bounces::ingest::{Ingest, Outcome};
use crate::bounces::mailbox::{self, After, Disposal, MailboxUrl, PassError, Protocol};
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
        BouncesCommand::Fetch(args) => fetch(url, &args).await,
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
    let messages = sources::read(args.source.as_deref(), args.intake.max_bytes)?;
    let intake = match open(url, &args.intake).await {
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
        return matches!(store, StoreError::SealKey(_)) || store.is_bad_url();
    }
    err.downcast_ref::<PreviousSecretsError>().is_some()
        || err.downcast_ref::<EndpointError>().is_some()
}

async fn open(url: &str, args: &IntakeArgs) -> anyhow::Result<Ingest> {
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

/// `bounces fetch`: one pass over the mailbox, or with `--watch` one
/// every `--poll` seconds until SIGTERM or Ctrl-C.
async fn fetch(url: &str, args: &FetchArgs) -> anyhow::Result<ExitCode> {
    const WHO: &str = "linktrack bounces fetch";
    let config_error = |why: &dyn std::fmt::Display| {
        eprintln!("{WHO}: {why}; nothing read: a setting is wrong (exit {EXIT_CONFIG})");
        Ok(ExitCode::from(EXIT_CONFIG))
    };
    let mailbox_url = match MailboxUrl::parse(&args.mailbox) {
        Ok(parsed) => parsed,
        Err(err) => return config_error(&crate::error_report::chain(&err)),
    };
    let disposal = Disposal {
        after: match (args.after, mailbox_url.protocol) {
            (Some(AfterArg::Move), _) | (None, Protocol::Imap) => After::Move,
            (Some(AfterArg::Seen), _) => After::Seen,
            (Some(AfterArg::Delete), _) | (None, Protocol::Pop3) => After::Delete,
        },
        done_folder: args.done_folder.clone(),
        look_folder: args.look_folder.clone(),
    };
    if let Err(why) = disposal.check(mailbox_url.protocol) {
        return config_error(&why);
    }
    let password = match password(args) {
        Ok(password) => password,
        Err(why) => return config_error(&why),
    };
    let tls = match crate::delivery::smtp::tls_config() {
        Ok(tls) => tls,
        Err(why) => return config_error(&why),
    };
    let intake = match open(url, &args.intake).await {
        Ok(intake) => intake,
        Err(err) if is_configuration(&err) => return config_error(&format!("{err:#}")),
        Err(err) => {
            eprintln!("{WHO}: {err:#}; nothing read, try again later");
            return Ok(ExitCode::from(EXIT_TEMPFAIL));
        }
    };
    let mut say = |name: &str, outcome: &Outcome| say!("{name}: {}", outcome.line);
    if !args.watch {
        let pass = mailbox::pass(&mailbox_url, &password, &disposal, &intake, &tls, &mut say);
        return match pass.await {
            Ok(pass) => {
                say!("{mailbox_url}: {}", summary(&pass, &disposal))?;
                Ok(if pass.looks > 0 {
                    ExitCode::from(EXIT_REJECTED)
                } else {
                    ExitCode::SUCCESS
                })
            }
            Err(err) => Ok(pass_failed(&err)),
        };
    }
    let mut stop = Stop::new()?;
    loop {
        let pass = mailbox::pass(&mailbox_url, &password, &disposal, &intake, &tls, &mut say);
        let result = tokio::select! {
            result = pass => result,
            () = stop.signalled() => return Ok(ExitCode::SUCCESS),
        };
        match result {
            Ok(pass) if pass.listed > 0 => {
                say!("{mailbox_url}: {}", summary(&pass, &disposal))?;
            }
            Ok(_) => {}
            Err(PassError::Said(err)) => return Err(err),
            Err(PassError::Mailbox(err)) if err.is_setting() => {
                return config_error(&crate::error_report::chain(&err))
            }
            Err(err) => {
                pass_failed(&err);
            }
        }
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_secs(args.poll)) => {}
            () = stop.signalled() => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// A pass's end, said: "3 messages read: 2 acted on, 1 to look at".
fn summary(pass: &mailbox::Pass, disposal: &Disposal) -> String {
    let looks = match disposal.after {
        After::Seen => "flagged".to_owned(),
        _ => format!("in {}", disposal.look_folder),
    };
    format!(
        "{} read: {} acted on, {} to look at ({looks})",
        super::output::counted(pass.listed as u64, "message", "messages"),
        pass.done,
        pass.looks
    )
}

/// A pass that stopped, said; its exit status.
fn pass_failed(err: &PassError) -> ExitCode {
    const WHO: &str = "linktrack bounces fetch";
    match err {
        PassError::Mailbox(err) if err.is_setting() => {
            let err = crate::error_report::chain(err);
            eprintln!("{WHO}: {err}; a setting is wrong (exit {EXIT_CONFIG})");
            ExitCode::from(EXIT_CONFIG)
        }
        PassError::Said(_) => ExitCode::SUCCESS,
        _ => {
            eprintln!(
                "{WHO}: {}; what was read before is stored and set aside, the rest \
                 stays in the mailbox for the next pass (exit {EXIT_TEMPFAIL})",
                crate::error_report::chain(err)
            );
            ExitCode::from(EXIT_TEMPFAIL)
        }
    }
}

/// Why there is no mailbox password.
#[derive(Debug, thiserror::Error)]
enum PasswordError {
    #[error("--password-file {}: {source}", path.display())]
    Unreadable {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--password-file {}: its first line is empty", path.display())]
    Empty { path: std::path::PathBuf },
    #[error("no mailbox password: set LINKTRACK_MAILBOX_PASSWORD or --password-file")]
    Missing,
}

/// The mailbox password: --password-file's first line, else
/// LINKTRACK_MAILBOX_PASSWORD.
fn password(args: &FetchArgs) -> Result<String, PasswordError> {
    if let Some(path) = &args.password_file {
        let text = std::fs::read_to_string(path).map_err(|source| PasswordError::Unreadable {
            path: path.clone(),
            source,
        })?;
        let first = text.lines().next().unwrap_or_default();
        if first.is_empty() {
            return Err(PasswordError::Empty { path: path.clone() });
        }
        return Ok(first.to_owned());
    }
    match std::env::var("LINKTRACK_MAILBOX_PASSWORD") {
        Ok(password) if !password.is_empty() => Ok(password),
        _ => Err(PasswordError::Missing),
    }
}

/// SIGTERM or Ctrl-C, for --watch: the pass under way is dropped (a
/// message being decided is either stored or not, and read again).
struct Stop {
    terminate: tokio::signal::unix::Signal,
}

impl Stop {
    fn new() -> anyhow::Result<Stop> {
        let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        Ok(Stop { terminate })
    }

    async fn signalled(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
}
