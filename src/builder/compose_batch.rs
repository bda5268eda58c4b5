//! A batch of letters composed on every core, in input order, with their
//! output lines; a letter that panics is that letter's rejection alone.

use super::compose::{build_letter, letter_mode, Built};
use super::error::BuildError;
use super::letter_tokens::{ImageTokens, StoredTokens};
use super::mailing_context::MailingContext;
use super::output::{self, LineBuffers};
use super::recipient_fields::Recipient;
use super::reject::Reject;
use super::track_mode::TrackMode;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A recipient's line and address, and its letter, or why it has none.
pub(super) type BuiltEntry = (u64, String, Result<Built, Reject>);

/// A batch composed: its entries in input order, and the output lines of
/// its built letters, in the same order, in one buffer per part.
pub(super) struct BuiltBatch {
    pub(super) entries: Vec<BuiltEntry>,
    pub(super) lines: Vec<Vec<u8>>,
}

/// What every part of a batch reads.
struct BatchInput {
    ctx: Arc<MailingContext>,
    stored: HashMap<u64, StoredTokens>,
    images: Arc<ImageTokens>,
    opted_out: HashSet<String>,
    made_at: chrono::DateTime<chrono::Utc>,
    keep_letters: bool,
}

/// Build a batch of letters in `workers` parts, each on a thread of the
/// runtime's blocking pool, in input order, each built letter's output
/// line appended to its part's buffer: the JSON line is half a planned
/// letter's CPU, so it is made here on every core rather than by the one
/// thread that writes the output. The pool's threads live on from batch
/// to batch (threads started per batch began each batch with an empty
/// heap, so every letter's text landed in pages the kernel had to zero),
/// and the line buffers come back from the output thread once written.
#[allow(clippy::too_many_arguments)]
pub(super) async fn build_batch(
    ctx: Arc<MailingContext>,
    mut jobs: Vec<(Recipient, u64)>,
    stored: HashMap<u64, StoredTokens>,
    images: Arc<ImageTokens>,
    opted_out: HashSet<String>,
    workers: usize,
    keep_letters: bool,
    buffers: &LineBuffers,
) -> Result<BuiltBatch, BuildError> {
    let input = Arc::new(BatchInput {
        ctx,
        stored,
        images,
        opted_out,
        made_at: chrono::Utc::now(),
        keep_letters,
    });
    let letters = jobs.len();
    let chunk = letters.div_ceil(workers.max(1)).max(1);
    let mut parts = Vec::with_capacity(workers.max(1));
    while !jobs.is_empty() {
        let rest = jobs.split_off(chunk.min(jobs.len()));
        let part = std::mem::replace(&mut jobs, rest);
        let (input, mut lines) = (Arc::clone(&input), buffers.take());
        parts.push(tokio::task::spawn_blocking(move || {
            let entries = build_part(&input, part, &mut lines);
            (entries, lines)
        }));
    }
    let mut batch = BuiltBatch {
        entries: Vec::with_capacity(letters),
        lines: Vec::with_capacity(parts.len()),
    };
    for part in parts {
        let (entries, lines) = part
            .await
            .map_err(BuildError::task("letter-building thread"))?;
        batch.entries.extend(entries);
        batch.lines.push(lines);
    }
    Ok(batch)
}

/// One part's letters, in order, each built letter's line appended to
/// `lines`.
fn build_part(
    input: &BatchInput,
    part: Vec<(Recipient, u64)>,
    lines: &mut Vec<u8>,
) -> Vec<BuiltEntry> {
    let ctx = &input.ctx;
    part.into_iter()
        .map(|(recipient, letter_id)| {
            let opted_out = input.opted_out.contains(recipient.email.as_str());
            let result = build_one(
                ctx,
                &recipient,
                letter_id,
                input.stored.get(&letter_id),
                &input.images,
                input.made_at,
                letter_mode(&ctx.mailing, &recipient, opted_out),
            )
            .map(|mut built| {
                output::append_line(&built.letter, lines);
                if !input.keep_letters {
                    // Only the line is written out: free the letter's
                    // text now.
                    built.letter.html = String::new();
                    built.letter.message = String::new();
                }
                built
            });
            (recipient.line, recipient.email.into_string(), result)
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
