//! The mailing commands: `build`, `suppressions`, `tracking-optouts`, `erase`, `segment`,
//! `stats rollup`.

use super::args::mailing::{
    BuildArgs, EraseArgs, RollupArgs, SegmentArgs, SuppressionsCommand, TrackingOptoutsCommand,
};
use super::args::secrets::check_unpadded;
use super::connect::{live_layer, pool};
use super::exit_status::EXIT_REJECTED;
use super::output::counted;
use crate::address;
use crate::builder::{self, BuildOptions, Output};
use crate::live::SegmentQuery;
use crate::store;
use crate::store::address_list::{AddressList, SUPPRESSIONS, TRACKING_OPTOUTS};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

pub(super) async fn build(url: &str, args: &BuildArgs) -> anyhow::Result<ExitCode> {
    check_unpadded("LINKTRACK_SECRET", args.seal.secret.as_deref())?;
    let pool = pool(url).await?;
    let out = if args.out.as_os_str() == "-" {
        Output::Stdout
    } else {
        Output::File(args.out.clone())
    };
    let rejects = args
        .rejects
        .clone()
        .unwrap_or_else(|| beside_out(&out, "rejects.jsonl"));
    let summary_path = args
        .summary
        .clone()
        .unwrap_or_else(|| beside_out(&out, "summary.json"));
    let delivery_log = args
        .delivery_log
        .clone()
        .unwrap_or_else(|| beside_out(&out, "deliveries.jsonl"));
    let workers = args
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let options = BuildOptions {
        mailing: args.mailing.clone(),
        recipients: args.recipients.clone(),
        out,
        rejects: rejects.clone(),
        base_url: args.tracking.base_url.clone(),
        batch_size: args.batch_size.max(1),
        workers,
        id_block: args.id_block.max(1),
        progress: !args.no_progress,
        // With --pools these settings are the template for each pool's MTAs.
        smtp: (args.smtp.is_some() || args.pools.is_some()).then(|| {
            args.smtp_sessions
                .settings(args.smtp.clone().unwrap_or_default())
        }),
        pools: args.pools.clone(),
        return_path: args.return_path.clone(),
        delivery_log: Some(delivery_log),
        bounce_domain: args.bounce_domain.clone(),
        summary: Some(summary_path),
        max_letter_bytes: args.max_letter_bytes,
        secret: args.seal.secret.clone(),
        new_secret: args.seal.new_secret,
        columns: args.column.clone(),
        letter_by_letter: args.letter_by_letter,
    };
    let summary = builder::run(&pool, &options).await?;
    eprintln!("{summary}");
    if summary.rejected > 0 || summary.suppressed > 0 {
        eprintln!(
            "rejected and suppressed recipients, with line and reason: {}",
            rejects.display()
        );
    }
    // Suppressed rows are the list working: exit 0. A rejected row or a
    // letter the MTA refused needs a look: exit 2.
    Ok(if summary.rejected > 0 || summary.delivery_rejected > 0 {
        ExitCode::from(EXIT_REJECTED)
    } else {
        ExitCode::SUCCESS
    })
}

/// `FILE.suffix` beside `--out FILE`, or `suffix` for standard output.
fn beside_out(out: &Output, suffix: &str) -> PathBuf {
    match out {
        Output::Stdout => PathBuf::from(suffix),
        Output::File(path) => {
            let mut name = path.as_os_str().to_owned();
            name.push(".");
            name.push(suffix);
            PathBuf::from(name)
        }
    }
}

pub(super) async fn suppressions(
    url: &str,
    command: SuppressionsCommand,
) -> anyhow::Result<ExitCode> {
    let command = match command {
        SuppressionsCommand::Add { addresses, reason } => ListCommand::Add {
            addresses,
            note: reason.to_string(),
        },
        SuppressionsCommand::Remove { addresses } => ListCommand::Remove { addresses },
        SuppressionsCommand::Import { file, reason } => ListCommand::Import {
            file,
            note: reason.to_string(),
        },
        SuppressionsCommand::List { limit } => ListCommand::List { limit },
    };
    address_list(url, "suppressions", SUPPRESSIONS, command).await
}

/// `linktrack tracking-optouts`: the suppression commands on the other
/// address list (the same normalisation, refusals and listing).
pub(super) async fn tracking_optouts(
    url: &str,
    command: TrackingOptoutsCommand,
) -> anyhow::Result<ExitCode> {
    let command = match command {
        TrackingOptoutsCommand::Add { addresses, source } => ListCommand::Add {
            addresses,
            note: source,
        },
        TrackingOptoutsCommand::Remove { addresses } => ListCommand::Remove { addresses },
        TrackingOptoutsCommand::Import { file, source } => {
            ListCommand::Import { file, note: source }
        }
        TrackingOptoutsCommand::List { limit } => ListCommand::List { limit },
    };
    address_list(url, "tracking-optouts", TRACKING_OPTOUTS, command).await
}

/// What `suppressions` and `tracking-optouts` do; `note` is the reason or
/// the source stored with each address.
enum ListCommand {
    Add {
        addresses: Vec<String>,
        note: String,
    },
    Remove {
        addresses: Vec<String>,
    },
    Import {
        file: PathBuf,
        note: String,
    },
    List {
        limit: Option<u64>,
    },
}

/// Run `command` on `list`; `name` begins each summary line.
async fn address_list(
    url: &str,
    name: &str,
    list: AddressList,
    command: ListCommand,
) -> anyhow::Result<ExitCode> {
    let pool = pool(url).await?;
    match command {
        ListCommand::Add { addresses, note } => {
            let arguments = addresses
                .iter()
                .enumerate()
                .map(|(index, raw)| (format!("argument {}", index + 1), raw.as_str()));
            let checked = CheckedAddresses::of(arguments);
            let added = list.add(&pool, &checked.valid, &note).await?;
            checked.print_refused();
            say!(
                "{name}: added {added} ({} already listed){}",
                checked.valid.len() as u64 - added,
                checked.refused_summary("argument", "arguments")
            )?;
            Ok(checked.exit_code())
        }
        ListCommand::Remove { addresses } => {
            // Not refused when invalid: whatever is on the list can be taken off.
            let addresses: Vec<String> = addresses.iter().map(|a| address::normalize(a)).collect();
            let removed = list.remove(&pool, &addresses).await?;
            let unlisted = addresses.len() as u64 - removed;
            let verb = if unlisted == 1 { "was" } else { "were" };
            say!("{name}: removed {removed} ({unlisted} {verb} not listed)")?;
            Ok(ExitCode::SUCCESS)
        }
        ListCommand::Import { file, note } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let checked = CheckedAddresses::of(list_lines(&text, &file));
            let added = list.add(&pool, &checked.valid, &note).await?;
            checked.print_refused();
            say!(
                "{name}: imported {} from {}: {added} new, {} already listed{}",
                counted(checked.valid.len() as u64, "address", "addresses"),
                file.display(),
                checked.valid.len() as u64 - added,
                checked.refused_summary("line", "lines")
            )?;
            Ok(checked.exit_code())
        }
        ListCommand::List { limit } => {
            let mut after: Option<String> = None;
            let mut left = limit.unwrap_or(u64::MAX);
            while left > 0 {
                let page = list
                    .page(&pool, after.as_deref(), left.min(1000) as u32)
                    .await?;
                let Some(last) = page.last() else { break };
                after = Some(last.email.clone());
                for entry in &page {
                    // Read into spreadsheets: a formula-like value is
                    // neutralised (`address::csv_safe`).
                    say!(
                        "{}\t{}\t{}",
                        crate::address::csv_safe(&entry.email),
                        crate::address::csv_safe(&entry.note),
                        entry.created_at
                    )?;
                }
                left = left.saturating_sub(page.len() as u64);
            }
            let hashed = list.hashed_count(&pool).await?;
            if hashed > 0 {
                // Standard error: the listing's lines stay address, note, time.
                eprintln!(
                    "{name}: and {} of erased addresses, kept as keyed hashes (still honoured, not listable)",
                    counted(hashed, "entry", "entries")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The address lines of a list file, each with its place ("FILE: line N"):
/// blank lines and `#` comments are skipped, after the same trimming as an
/// address gets (a file saved by Excel or Notepad starts with a byte-order
/// mark, which must not turn a comment into an address).
fn list_lines<'a>(text: &'a str, file: &'a Path) -> impl Iterator<Item = (String, &'a str)> + 'a {
    text.lines().enumerate().filter_map(move |(index, line)| {
        let content = address::trim(line);
        (!content.is_empty() && !content.starts_with('#'))
            .then(|| (format!("{}: line {}", file.display(), index + 1), line))
    })
}

/// Addresses given to `suppressions add|import`, each normalised and
/// checked once ([`address::Email::parse`]). One that does not parse is
/// refused, named by its place with the reason; the others are still
/// added, and the command then exits with [`EXIT_REJECTED`].
struct CheckedAddresses {
    /// Normalised, each once, in the order given.
    valid: Vec<String>,
    /// "PLACE: "RAW": REASON", one per refused address.
    refused: Vec<String>,
}

impl CheckedAddresses {
    fn of<'a>(items: impl Iterator<Item = (String, &'a str)>) -> CheckedAddresses {
        let mut seen = std::collections::HashSet::new();
        let mut checked = CheckedAddresses {
            valid: Vec::new(),
            refused: Vec::new(),
        };
        for (place, raw) in items {
            match address::Email::parse(raw) {
                Ok(email) => {
                    if seen.insert(email.clone()) {
                        checked.valid.push(email.into_string());
                    }
                }
                Err(why) => checked.refused.push(format!("{place}: {raw:?}: {why}")),
            }
        }
        checked
    }

    /// Each refused address on standard error, with its place and reason.
    fn print_refused(&self) {
        for line in &self.refused {
            eprintln!("linktrack: refused: {line}");
        }
    }

    /// "; 2 lines refused (…)" for the summary line, or nothing.
    fn refused_summary(&self, one: &str, many: &str) -> String {
        if self.refused.is_empty() {
            return String::new();
        }
        format!(
            "; {} refused (not addresses, listed above)",
            counted(self.refused.len() as u64, one, many)
        )
    }

    fn exit_code(&self) -> ExitCode {
        if self.refused.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_REJECTED)
        }
    }
}

pub(super) async fn erase(url: &str, args: &EraseArgs) -> anyhow::Result<()> {
    let live = live_layer(&args.live)?;
    let pool = pool(url).await?;
    let wait = Duration::from_secs(args.wait_secs);
    for address in args.addresses() {
        let report = crate::privacy::erase(&pool, live.as_ref(), address, wait).await?;
        say!("{report}")?;
    }
    Ok(())
}

pub(super) async fn segment(url: &str, args: &SegmentArgs) -> anyhow::Result<()> {
    let live = live_layer(&args.live)?.context("segments need the live layer: set REDIS_URL")?;
    let pool = pool(url).await?;
    let query = SegmentQuery {
        all: args.tag.clone(),
        any: args.or.clone(),
        none: args.not.clone(),
    };
    let letters = live.segment(args.mailing.as_str(), &query).await?;
    for email in store::segments::addresses_of_letters(&pool, &args.mailing, &letters).await? {
        say!("{email}")?;
    }
    Ok(())
}

pub(super) async fn rollup(url: &str, args: &RollupArgs) -> anyhow::Result<()> {
    let live = live_layer(&args.live)?;
    let pool = pool(url).await?;
    let options = store::rollup::RollupOptions {
        limit: args.batch,
        settle: Duration::from_millis(args.settle_ms),
        verdicts: std::sync::Arc::new(args.verdicts.rules()?),
        recent_hits: Default::default(),
    };
    if let Some(secs) = args.every {
        let every = Duration::from_secs(secs.max(1));
        let mut workers = crate::workers::Workers::new();
        workers.spawn("rollup", move |stopping| {
            crate::rollup_worker::run_worker(pool, live, options, every, None, stopping)
        });
        crate::server::shutdown_signal().await;
        // The pass in progress commits or rolls back; a minute is plenty.
        workers.shutdown(Duration::from_secs(60)).await;
        return Ok(());
    }
    let report = crate::rollup_worker::roll_and_publish(&pool, live.as_ref(), &options).await?;
    say!("{report}")?;
    Ok(())
}
