//! Where a build writes: the letters (standard output, or `FILE.partial`
//! renamed to `FILE` only when the job is complete) and the rejects file
//! that says what happened to every recipient line left out; the output
//! thread that appends each committed batch and passes its letters on to
//! the hand-over.

use super::compose;
use super::error::BuildError;
use super::options::Output;
use super::recipient_fields::{Recipient, Rejection};
use super::reject::Reject;
use super::summary::Summary;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The output: standard output, or `FILE.partial` renamed to `FILE` at the end.
pub(super) struct LetterSink {
    writer: Box<dyn Write + Send>,
    rename: Option<(PathBuf, PathBuf)>,
}

impl LetterSink {
    pub(super) fn open(out: &Output) -> Result<LetterSink, BuildError> {
        match out {
            Output::Stdout => Ok(LetterSink {
                writer: Box::new(std::io::BufWriter::new(std::io::stdout())),
                rename: None,
            }),
            Output::File(path) => {
                let partial = partial_path(path);
                let file =
                    std::fs::File::create(&partial).map_err(|source| BuildError::Output {
                        path: partial.clone(),
                        source,
                    })?;
                Ok(LetterSink {
                    writer: Box::new(std::io::BufWriter::with_capacity(1 << 20, file)),
                    rename: Some((partial, path.clone())),
                })
            }
        }
    }

    fn path(&self) -> PathBuf {
        self.rename
            .as_ref()
            .map_or_else(|| PathBuf::from("-"), |(partial, _)| partial.clone())
    }

    /// Append letters' lines, each already encoded by [`encoded_line`] on
    /// the thread that built the letter.
    pub(super) fn write(&mut self, lines: &[Vec<u8>]) -> Result<(), BuildError> {
        let result = (|| {
            for line in lines {
                self.writer.write_all(line)?;
            }
            self.writer.flush()
        })();
        result.map_err(|source| BuildError::Output {
            path: self.path(),
            source,
        })
    }

    pub(super) fn finish(mut self) -> Result<(), BuildError> {
        self.writer.flush().map_err(|source| BuildError::Output {
            path: self.path(),
            source,
        })?;
        drop(self.writer);
        if let Some((partial, path)) = self.rename.take() {
            std::fs::rename(&partial, &path)
                .map_err(|source| BuildError::Output { path, source })?;
        }
        Ok(())
    }
}

/// The letter's JSON line with its line end, as the output file holds it.
pub(super) fn encoded_line(letter: &compose::Letter) -> Vec<u8> {
    let mut line = Vec::new();
    letter_line(letter, &mut line);
    line.push(b'\n');
    line
}

/// The letter's JSON line (without its line end) appended to `out`: the
/// bytes `serde_json` writes for [`compose::Letter`], field for field,
/// escaped in one pass into one buffer. `serde_json::to_writer` wrote each
/// run between two escapes (every CRLF of the message, every quote of the
/// HTML) through the boxed writer: a fifth of a planned letter's CPU.
pub(crate) fn letter_line(letter: &compose::Letter, out: &mut Vec<u8>) {
    out.reserve(letter.message.len() + letter.html.len() + letter.html.len() / 8 + 1024);
    out.extend_from_slice(b"{\"letter_id\":");
    out.extend_from_slice(itoa::Buffer::new().format(letter.letter_id).as_bytes());
    for (name, value) in [
        ("mailing_id", letter.mailing_id.as_str()),
        ("email", letter.email.as_str()),
        ("pool", letter.pool.as_str()),
        ("subject", letter.subject.as_str()),
    ] {
        field(out, name, value);
    }
    out.extend_from_slice(b",\"headers\":{");
    for (n, (name, value)) in letter.headers.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        json_string(out, name);
        out.push(b':');
        json_string(out, value);
    }
    out.push(b'}');
    field(out, "html", &letter.html);
    field(out, "message_id", &letter.message_id);
    if let Some(envelope_from) = &letter.envelope_from {
        field(out, "envelope_from", envelope_from);
    }
    field(out, "message", &letter.message);
    out.push(b'}');
}

fn field(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(b',');
    json_string(out, name);
    out.push(b':');
    json_string(out, value);
}

/// `text` as a JSON string, escaped as `serde_json` escapes it: `"` and
/// `\\`, `\b \f \n \r \t`, other control characters as `\u00xx`.
/// Eight bytes at a time are checked for one to escape; a run of words
/// without one (most of a message and its HTML) is copied in one go.
fn json_string(out: &mut Vec<u8>, text: &str) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + bytes.len() / 16 + 2);
    out.push(b'"');
    let mut copied = 0;
    let mut at = 0;
    for word in bytes.chunks_exact(8) {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        let x = u64::from_le_bytes(eight);
        // A byte below 0x20, or equal to `"` or `\\`, sets its high bit
        // here (none is set for bytes of 0x80 and over: `!x` clears them).
        let quote = x ^ (ONES * u64::from(b'"'));
        let backslash = x ^ (ONES * u64::from(b'\\'));
        let found = (x.wrapping_sub(ONES * 0x20) & !x)
            | (quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash);
        if found & HIGHS != 0 {
            out.extend_from_slice(&bytes[copied..at]);
            escape_bytes(out, word);
            copied = at + 8;
        }
        at += 8;
    }
    out.extend_from_slice(&bytes[copied..at]);
    escape_bytes(out, &bytes[at..]);
    out.push(b'"');
}

/// What `serde_json` writes after a backslash for a byte it escapes; 0:
/// written as it is.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0A] = b'n';
    table[0x0C] = b'f';
    table[0x0D] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

fn escape_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &byte in bytes {
        match ESCAPE[usize::from(byte)] {
            0 => out.push(byte),
            b'u' => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xF)],
            ]),
            escape => out.extend_from_slice(&[b'\\', escape]),
        }
    }
}

/// `letters.jsonl` -> `letters.jsonl.partial`
pub fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// Rejected recipients, one JSON line each, counted into the summary.
pub(super) struct RejectsFile {
    path: PathBuf,
    writer: std::io::BufWriter<std::fs::File>,
}

impl RejectsFile {
    pub(super) fn create(path: &Path) -> Result<RejectsFile, BuildError> {
        let file = std::fs::File::create(path).map_err(|source| BuildError::Output {
            path: path.to_owned(),
            source,
        })?;
        Ok(RejectsFile {
            path: path.to_owned(),
            writer: std::io::BufWriter::new(file),
        })
    }

    pub(super) fn write(
        &mut self,
        summary: &mut Summary,
        rejection: &Rejection,
    ) -> Result<(), BuildError> {
        summary.rejected += 1;
        *summary
            .rejected_by_reason
            .entry(rejection.reason.group().to_owned())
            .or_default() += 1;
        tracing::debug!(line = rejection.line, reason = %rejection.reason, "recipient rejected");
        self.append(rejection)
    }

    /// A suppressed recipient: listed in the file too, so it says what
    /// happened to every line, but counted apart from the rejected.
    pub(super) fn skip(
        &mut self,
        summary: &mut Summary,
        recipient: &Recipient,
    ) -> Result<(), BuildError> {
        summary.suppressed += 1;
        let rejection = Rejection {
            line: recipient.line,
            email: Some(recipient.email.as_str().to_owned()),
            reason: Reject::Suppressed,
        };
        self.append(&rejection)
    }

    /// The letters the MTA refused, `(line, address, reply)`: listed in the
    /// file with the reply, but not counted as rejected (they were built;
    /// `delivery_rejected` counts them).
    pub(super) fn refused_by_mta(
        &mut self,
        refused: &[(u64, String, String)],
    ) -> Result<(), BuildError> {
        for (line, email, reply) in refused {
            self.append(&Rejection {
                line: *line,
                email: Some(email.clone()),
                reason: super::reject::Reject::Delivery(reply.clone()),
            })?;
        }
        Ok(())
    }

    fn append(&mut self, rejection: &Rejection) -> Result<(), BuildError> {
        let result = serde_json::to_writer(&mut self.writer, rejection)
            .map_err(std::io::Error::from)
            .and_then(|()| self.writer.write_all(b"\n"));
        result.map_err(|source| BuildError::Output {
            path: self.path.clone(),
            source,
        })
    }

    pub(super) fn finish(mut self) -> Result<(), BuildError> {
        self.writer.flush().map_err(|source| BuildError::Output {
            path: self.path.clone(),
            source,
        })
    }
}

/// A stored batch on its way out: written, then delivered.
pub(super) struct Committed {
    pub(super) lines: Vec<Vec<u8>>,
    pub(super) letters: Vec<compose::Letter>,
}

/// The output thread: appends each committed batch's lines (blocking file
/// or terminal writes, off the runtime's workers and off the inserts'
/// path), then hands the letters to delivery. Returns the sink when every
/// batch sent was written and handed on.
pub(super) fn spawn_output(
    mut sink: LetterSink,
    to_deliver: Option<tokio::sync::mpsc::Sender<Vec<compose::Letter>>>,
) -> (
    tokio::sync::mpsc::Sender<Committed>,
    tokio::task::JoinHandle<Result<LetterSink, BuildError>>,
) {
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<Committed>(1);
    let handle = tokio::task::spawn_blocking(move || {
        while let Some(batch) = receiver.blocking_recv() {
            sink.write(&batch.lines)?;
            drop(batch.lines);
            if let Some(to_deliver) = &to_deliver {
                if to_deliver.blocking_send(batch.letters).is_err() {
                    // Delivery failed; the writer returns its error.
                    return Ok(sink);
                }
            }
        }
        Ok(sink)
    });
    (sender, handle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn letter(text: &str, envelope_from: Option<String>) -> compose::Letter {
        compose::Letter {
            letter_id: 18_446_744_073_709_551_615,
            mailing_id: format!("m{text}"),
            email: crate::address::Email::parse("reader@example.com").unwrap(),
            pool: "bulk".into(),
            subject: text.chars().rev().collect(),
            headers: [
                ("List-Unsubscribe".to_owned(), format!("<{text}>")),
                ("From".to_owned(), "A <a@example.com>".to_owned()),
            ]
            .into(),
            html: format!("<p class=\"x\">{text}</p>"),
            message_id: "<1.m@example.com>".into(),
            envelope_from,
            message: format!("Subject: x\r\n\r\n{text}\r\n"),
            line: 3,
            track: super::super::track_mode::TrackMode::All,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn the_line_is_serde_jsons_byte_for_byte(
            text in "(\\PC|[\\x00-\\x1f\"\\\\\\x7f]){0,80}",
            bounce in any::<bool>(),
        ) {
            let letter = letter(&text, bounce.then(|| format!("b+{text}@x.example")));
            let mut line = Vec::new();
            letter_line(&letter, &mut line);
            let expected = serde_json::to_vec(&letter).unwrap();
            prop_assert_eq!(String::from_utf8_lossy(&line), String::from_utf8_lossy(&expected));
        }
    }
}
