//! A batch of letters composed on every core, in input order, each with
//! its output line; a letter that panics is that letter's rejection alone.

use super::compose::{build_letter, letter_mode, Built};
use super::error::BuildError;
use super::letter_tokens::{ImageTokens, StoredTokens};
use super::mailing_context::MailingContext;
use super::output;
use super::recipient_fields::Recipient;
use super::reject::Reject;
use super::track_mode::TrackMode;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A recipient's line and address, and its letter with the letter's output
/// line, or why it has none.
pub(super) type BuiltEntry = (u64, String, Result<(Built, Vec<u8>), Reject>);

/// Build a batch of letters on `workers` threads, in input order, each
/// with its output line: the JSON line is half a planned letter's CPU, so
/// it is made here on every core rather than by the one thread that
/// writes the output.
pub(super) async fn build_batch(
    ctx: Arc<MailingContext>,
    jobs: Vec<(Recipient, u64)>,
    stored: HashMap<u64, StoredTokens>,
    images: Arc<ImageTokens>,
    opted_out: HashSet<String>,
    workers: usize,
    keep_letters: bool,
) -> Result<Vec<BuiltEntry>, BuildError> {
    let made_at = chrono::Utc::now();
    tokio::task::spawn_blocking(move || {
        let input = PartInput {
            ctx: &ctx,
            stored: &stored,
            images: &images,
            opted_out: &opted_out,
            made_at,
            keep_letters,
        };
        let chunk = jobs.len().div_ceil(workers.max(1)).max(1);
        std::thread::scope(|scope| {
            let handles: Vec<_> = jobs
                .chunks(chunk)
                .map(|part| scope.spawn(move || build_part(input, part)))
                .collect();
            let mut out = Vec::with_capacity(jobs.len());
            for handle in handles {
                let part = handle.join().map_err(|_| {
                    BuildError::Internal("a letter-building thread panicked".into())
                })?;
                out.extend(part);
            }
            Ok(out)
        })
    })
    .await
    .map_err(BuildError::task("letter-building thread"))?
}

/// What every part of a batch reads.
#[derive(Clone, Copy)]
struct PartInput<'a> {
    ctx: &'a MailingContext,
    stored: &'a HashMap<u64, StoredTokens>,
    images: &'a ImageTokens,
    opted_out: &'a HashSet<String>,
    made_at: chrono::DateTime<chrono::Utc>,
    keep_letters: bool,
}

/// One part's letters, in order, each with its output line.
fn build_part(input: PartInput<'_>, part: &[(Recipient, u64)]) -> Vec<BuiltEntry> {
    part.iter()
        .map(|(recipient, letter_id)| {
            let opted_out = input.opted_out.contains(recipient.email.as_str());
            let result = build_one(
                input.ctx,
                recipient,
                *letter_id,
                input.stored.get(letter_id),
                input.images,
                input.made_at,
                letter_mode(&input.ctx.mailing, recipient, opted_out),
            )
            .map(|mut built| {
                let line = output::encoded_line(&built.letter);
                if !input.keep_letters {
                    // Only the line is written out: free the letter's text now.
                    built.letter.html = String::new();
                    built.letter.message = String::new();
                }
                (built, line)
            });
            (recipient.line, recipient.email.as_str().to_owned(), result)
        })
        .collect()
}

/// One letter, a panic included as its rejection. Every field of the input
/// is checked before it reaches the HTML rewriter, the text renderer and
/// the MIME builder, so no input is known to panic them; but they are
/// third-party code fed arbitrary text, and one letter's bug must cost that
/// letter, named in the rejects file, not the mailing of every other row.
/// The shared image-token map survives a panic (see [`ImageTokens`]).
fn build_one(
    ctx: &MailingContext,
    recipient: &Recipient,
    letter_id: u64,
    stored: Option<&StoredTokens>,
    images: &ImageTokens,
    made_at: chrono::DateTime<chrono::Utc>,
    mode: TrackMode,
) -> Result<Built, Reject> {
    let build = || build_letter(ctx, recipient, letter_id, stored, images, made_at, mode);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(build)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        tracing::error!(line = recipient.line, %message, "building a letter panicked");
        Err(Reject::Panicked(message))
    })
}
