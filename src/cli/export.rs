//! `linktrack export recipients`: the recipients export to standard output.

use super::args::export::{ExportFormat, RecipientsArgs};
use super::connect::pool;
use super::output::{counted, StdoutClosed};
use crate::export::{self, Format};
use crate::store::engagement;
use anyhow::Context;
use futures_util::TryStreamExt;
use std::io::Write;

pub(super) async fn recipients(url: &str, args: &RecipientsArgs) -> anyhow::Result<()> {
    let pool = pool(url).await?;
    if !engagement::mailing_known(&pool, &args.mailing).await? {
        anyhow::bail!("mailing {:?} not found", args.mailing);
    }
    let format = match args.format {
        ExportFormat::Csv => Format::Csv,
        ExportFormat::Jsonl => Format::Jsonl,
    };
    let chunks = match &args.with {
        None => futures_util::future::Either::Left(export::recipients(
            pool,
            args.mailing.clone(),
            format,
        )),
        Some(path) => {
            let input = export::InputColumns::read(path, args.column.clone())
                .with_context(|| format!("reading {}", path.display()))?;
            eprintln!(
                "{}: {} to join by address ({}), {} line(s) without a usable address, {} \
                 repeated address(es) (the first line of each is used)",
                path.display(),
                counted(input.addresses() as u64, "address", "addresses"),
                if input.names.is_empty() {
                    "no other column".to_owned()
                } else {
                    input.names.join(", ")
                },
                input.unusable_lines,
                input.repeated,
            );
            futures_util::future::Either::Right(export::recipients_with(
                pool,
                args.mailing.clone(),
                format,
                std::sync::Arc::new(input),
            ))
        }
    };
    let mut chunks = std::pin::pin!(chunks);
    let (mut rows, mut withheld) = (0, 0);
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    while let Some(chunk) = chunks.try_next().await? {
        write_out(&mut stdout, &chunk.bytes)?;
        rows += chunk.rows;
        withheld += chunk.withheld;
    }
    match stdout.flush() {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed)?,
        other => other.context("writing to standard output")?,
    }
    eprintln!(
        "exported {} of mailing {}; {} left out (no address that may be shown)",
        counted(rows, "letter", "letters"),
        args.mailing,
        withheld
    );
    Ok(())
}

/// Write to standard output; a closed pipe is [`StdoutClosed`] (a quiet exit).
fn write_out(out: &mut impl Write, bytes: &[u8]) -> anyhow::Result<()> {
    match out.write_all(bytes) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(err) => Err(anyhow::Error::new(err).context("writing to standard output")),
    }
}
