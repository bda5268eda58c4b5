//! The mailing commands: `build`, `suppressions`, `erase`, `segment`,
//! `stats rollup`.

use super::{live_layer, pool, EXIT_REJECTED};
use crate::address;
use crate::build::{self, BuildOptions, Output};
use crate::config::{BuildArgs, EraseArgs, RollupArgs, SegmentArgs, SuppressionsCommand};
use crate::live::SegmentQuery;
use crate::store::{self, suppressions};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

pub(super) async fn build(url: &str, args: &BuildArgs) -> anyhow::Result<ExitCode> {
    let pool = pool(url).await?;
    let out = if args.out.as_os_str() == "-" {
        Output::Stdout
    } else {
        Output::File(args.out.clone())
    };
    let rejects = args
        .rejects
        .clone()
        .unwrap_or_else(|| default_rejects_path(&out));
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
            crate::delivery::smtp::SmtpSettings {
                url: args.smtp.clone().unwrap_or_default(),
                connections: args.smtp_connections,
                messages_per_connection: args.smtp_messages_per_connection,
                retries: args.smtp_retries,
                backoff: std::time::Duration::from_millis(args.smtp_backoff_ms),
            }
        }),
        pools: args.pools.clone(),
        return_path: args.return_path.clone(),
        secret: args.secret.clone(),
    };
    let summary = build::run(&pool, &options).await?;
    eprintln!("{summary}");
    if summary.rejected > 0 || summary.suppressed > 0 {
        eprintln!(
            "rejected and suppressed recipients, with line and reason: {}",
            rejects.display()
        );
    }
    Ok(if summary.rejected > 0 {
        ExitCode::from(EXIT_REJECTED)
    } else {
        ExitCode::SUCCESS
    })
}

fn default_rejects_path(out: &Output) -> PathBuf {
    match out {
        Output::Stdout => PathBuf::from("rejects.jsonl"),
        Output::File(path) => {
            let mut name = path.as_os_str().to_owned();
            name.push(".rejects.jsonl");
            PathBuf::from(name)
        }
    }
}

pub(super) async fn suppressions(url: &str, command: SuppressionsCommand) -> anyhow::Result<()> {
    let pool = pool(url).await?;
    match command {
        SuppressionsCommand::Add { addresses, reason } => {
            let addresses =
                valid_addresses(addresses.iter().map(String::as_str).enumerate(), None)?;
            let added = suppressions::add(&pool, &addresses, &reason).await?;
            println!(
                "suppressions: added {added} ({} already listed)",
                addresses.len() as u64 - added
            );
        }
        SuppressionsCommand::Remove { addresses } => {
            let addresses: Vec<String> = addresses.iter().map(|a| address::normalize(a)).collect();
            let removed = suppressions::remove(&pool, &addresses).await?;
            println!(
                "suppressions: removed {removed} ({} were not listed)",
                addresses.len() as u64 - removed
            );
        }
        SuppressionsCommand::Import { file, reason } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let lines = text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
            let addresses = valid_addresses(lines, Some(&file))?;
            let added = suppressions::add(&pool, &addresses, &reason).await?;
            println!(
                "suppressions: imported {} addresses from {}: {added} new, {} already listed",
                addresses.len(),
                file.display(),
                addresses.len() as u64 - added
            );
        }
        SuppressionsCommand::List { limit } => {
            let mut after: Option<String> = None;
            let mut left = limit.unwrap_or(u64::MAX);
            while left > 0 {
                let page =
                    suppressions::list(&pool, after.as_deref(), left.min(1000) as u32).await?;
                let Some(last) = page.last() else { break };
                after = Some(last.email.clone());
                for entry in &page {
                    println!("{}\t{}\t{}", entry.email, entry.reason, entry.created_at);
                }
                left = left.saturating_sub(page.len() as u64);
            }
        }
    }
    Ok(())
}

/// Normalise and check addresses; any invalid one fails the command, naming
/// its position (argument number, or file and line).
fn valid_addresses<'a>(
    items: impl Iterator<Item = (usize, &'a str)>,
    file: Option<&Path>,
) -> anyhow::Result<Vec<String>> {
    let mut valid = Vec::new();
    let mut errors = Vec::new();
    for (index, raw) in items {
        let normalised = address::normalize(raw);
        match address::validate(&normalised) {
            Ok(()) => valid.push(normalised),
            Err(e) => errors.push(match file {
                Some(path) => format!("{}: line {}: {raw:?}: {e}", path.display(), index + 1),
                None => format!("argument {}: {raw:?}: {e}", index + 1),
            }),
        }
    }
    if errors.is_empty() {
        Ok(valid)
    } else {
        anyhow::bail!(
            "nothing was changed; fix these addresses first:\n{}",
            errors.join("\n")
        )
    }
}

pub(super) async fn erase(url: &str, args: &EraseArgs) -> anyhow::Result<()> {
    let pool = pool(url).await?;
    let email = address::normalize(&args.email);
    let report = store::erase::erase(&pool, &email).await?;
    println!("{report}");
    Ok(())
}

pub(super) async fn segment(url: &str, args: &SegmentArgs) -> anyhow::Result<()> {
    let live = live_layer(&args.live)?.context("segments need the live layer: set REDIS_URL")?;
    let pool = pool(url).await?;
    let mut all = args.tag.clone();
    all.extend(args.and.iter().cloned());
    let query = SegmentQuery {
        all,
        any: args.or.clone(),
        none: args.not.clone(),
    };
    let letters = live.segment(&args.mailing, &query).await?;
    for email in store::segments::addresses_of_letters(&pool, &args.mailing, &letters).await? {
        println!("{email}");
    }
    Ok(())
}

pub(super) async fn rollup(url: &str, args: &RollupArgs) -> anyhow::Result<()> {
    let live = live_layer(&args.live)?;
    let pool = pool(url).await?;
    let options = store::rollup::RollupOptions {
        limit: args.batch,
        settle: Duration::from_millis(args.settle_ms),
    };
    if let Some(secs) = args.every {
        let every = Duration::from_secs(secs.max(1));
        let mut workers = crate::server::workers::Workers::new();
        workers.spawn("rollup", move |stopping| {
            crate::rollup::run_worker(pool, live, options, every, stopping)
        });
        crate::server::shutdown_signal().await;
        // The pass in progress commits or rolls back; a minute is plenty.
        workers.shutdown(Duration::from_secs(60)).await;
        return Ok(());
    }
    let report = crate::rollup::roll_and_publish(&pool, live.as_ref(), &options).await?;
    println!("{report}");
    Ok(())
}
