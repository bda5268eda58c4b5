//! Where a build writes: the letters (standard output, or `FILE.partial`
//! renamed to `FILE` only when the job is complete) and the rejects file
//! that says what happened to every recipient line left out.

use super::compose;
use super::recipients::{Recipient, Rejection};
use super::reject::Reject;
use super::{BuildError, Output, Summary};
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

    pub(super) fn write(&mut self, letters: &[compose::Letter]) -> Result<(), BuildError> {
        let result = (|| {
            for letter in letters {
                serde_json::to_writer(&mut self.writer, letter)?;
                self.writer.write_all(b"\n")?;
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
