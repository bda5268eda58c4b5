//! What a command prints: `say!` and [`out_line`], its lines to standard
//! output, where a reader that closed the pipe ([`StdoutClosed`]) ends the
//! command quietly; and [`counted`], a count with its noun.

/// `println!` for commands: one line to standard output, as an
/// `anyhow::Result` to `?` (see [`out_line`]), so that a reader closing
/// the pipe (`linktrack suppressions list | head -1`) ends the command
/// quietly instead of panicking.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::output::out_line(format_args!($($arg)*))
    };
}

/// Standard output's reader went away (`EPIPE`): nobody wants the rest.
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
pub struct StdoutClosed;

/// Write one line to standard output. A broken pipe is [`StdoutClosed`],
/// which [`run`](super::run) turns into a quiet exit 0; only the command's
/// own output goes through here, so a broken pipe to the database or an MTA
/// is never mistaken for it.
pub fn out_line(line: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_fmt(line)
        .and_then(|()| stdout.write_all(b"\n"))
    {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(err) => Err(anyhow::Error::new(err).context("writing to standard output")),
    }
}

/// "1 address", "2 addresses": a count with its noun in the right number.
pub(crate) fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
