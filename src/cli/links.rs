//! `linktrack links list|repoint`: a sent mailing's links, where they lead
//! and who repointed them.

use super::args::links::{ListArgs, RepointArgs};
use super::connect::pool;
use super::output::out_line;
use crate::store::repoint::{self, LinkSelector, RepointRequest};

/// Who a repoint from the command line is recorded as.
const CLI: &str = "cli";

pub(super) async fn list(url: &str, args: &ListArgs) -> anyhow::Result<()> {
    let pool = pool(url).await?;
    let links = repoint::list(&pool, &args.mailing).await?;
    if args.json {
        let json = serde_json::to_string_pretty(&links)?;
        return out_line(format_args!("{json}"));
    }
    for link in &links {
        let name = link
            .name
            .as_deref()
            .map(|n| format!(" {n:?}"))
            .unwrap_or_default();
        let utm = if link.utm { "" } else { " (no UTM tags)" };
        out_line(format_args!(
            "{}{name}{utm}: {} (version {})",
            link.position, link.current, link.version
        ))?;
        if link.version > 0 {
            out_line(format_args!("    built: {}", link.built))?;
        }
        for change in &link.history {
            let letter = change
                .letter_id
                .map(|letter| format!(" letter {letter}"))
                .unwrap_or_default();
            out_line(format_args!(
                "    v{}{letter} {} by {}: {} -> {}",
                change.version,
                change.at.format("%Y-%m-%d %H:%M:%S UTC"),
                change.who,
                change.from,
                change.to
            ))?;
        }
    }
    Ok(())
}

pub(super) async fn repoint(url: &str, args: &RepointArgs) -> anyhow::Result<()> {
    let links = match (&args.position, &args.name, &args.from) {
        (Some(position), _, _) => LinkSelector::Position(*position),
        (_, Some(name), _) => LinkSelector::Name(name.clone()),
        (_, _, Some(from)) => LinkSelector::From(from.clone()),
        _ => anyhow::bail!("name the link: --position N, --name NAME or --from URL"),
    };
    let request = RepointRequest {
        links,
        recipient: args.recipient.clone(),
        to: args.to.clone(),
        who: CLI.to_owned(),
    };
    let pool = pool(url).await?;
    let done = repoint::repoint(&pool, &args.mailing, &request).await?;
    for change in &done {
        let letter = change
            .letter_id
            .map(|letter| format!(" (letter {letter})"))
            .unwrap_or_default();
        out_line(format_args!(
            "repointed position {}{letter} to {} (version {}; was {})",
            change.position, change.to, change.version, change.from
        ))?;
    }
    eprintln!(
        "{} repointed; running servers follow within 10 s",
        super::output::counted(done.len() as u64, "link", "links")
    );
    Ok(())
}
