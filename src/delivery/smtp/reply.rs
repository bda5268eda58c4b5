//! SMTP replies (RFC 5321 §4.2): a three-digit code, then text; every line
//! but the last has a hyphen after the code. Read from a buffered stream
//! one whole reply at a time, so replies to pipelined commands (RFC 2920)
//! that arrive in one packet are taken one by one and none is lost.

use std::fmt;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// A reply line longer than this is a broken or hostile server (RFC 5321
/// §4.5.3.1.5 allows 512 octets).
const MAX_LINE: usize = 4096;
/// Lines of one reply (an EHLO lists a few dozen extensions at most).
const MAX_LINES: usize = 128;

/// One whole reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    code: u16,
    /// Each line's text after the code and its separator.
    lines: Vec<String>,
}

/// Why no reply could be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplyError {
    #[error("the connection closed")]
    Closed,
    #[error("reading the reply: {0}")]
    Io(#[from] std::io::Error),
    #[error("a reply that is not SMTP: {0:?}")]
    Malformed(String),
}

impl Reply {
    pub(crate) fn code(&self) -> u16 {
        self.code
    }

    /// 2xx: done.
    pub(crate) fn is_completion(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// 5xx: refused for good.
    pub(crate) fn is_permanent(&self) -> bool {
        (500..600).contains(&self.code)
    }

    pub(crate) fn lines(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().map(String::as_str)
    }

    /// Read one whole reply.
    pub(crate) async fn read<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Reply, ReplyError> {
        let mut line = Vec::with_capacity(128);
        let mut reply: Option<Reply> = None;
        loop {
            line.clear();
            read_line(reader, &mut line).await?;
            let (code, last, text) = parse_line(&line)?;
            let reply = reply.get_or_insert_with(|| Reply {
                code,
                lines: Vec::new(),
            });
            if code != reply.code || reply.lines.len() >= MAX_LINES {
                return Err(ReplyError::Malformed(String::from_utf8_lossy(&line).into()));
            }
            reply.lines.push(text);
            if last {
                return Ok(reply.clone());
            }
        }
    }
}

/// "250 2.0.0 Ok", every line's text joined by a space (the form the
/// delivery ledger and the rejects file have always shown).
impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code)?;
        for line in &self.lines {
            write!(f, " {line}")?;
        }
        Ok(())
    }
}

/// One line up to and without its CRLF (or bare LF), at most [`MAX_LINE`].
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> Result<(), ReplyError> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Err(ReplyError::Closed);
        }
        let (taken, done) = match memchr::memchr(b'\n', available) {
            Some(end) => (end + 1, true),
            None => (available.len(), false),
        };
        line.extend_from_slice(&available[..taken]);
        reader.consume(taken);
        if line.len() > MAX_LINE {
            return Err(ReplyError::Malformed(format!(
                "a line of over {MAX_LINE} bytes"
            )));
        }
        if done {
            while matches!(line.last(), Some(b'\n' | b'\r')) {
                line.pop();
            }
            return Ok(());
        }
    }
}

/// `(code, is the last line, text)` of one line.
fn parse_line(line: &[u8]) -> Result<(u16, bool, String), ReplyError> {
    let malformed = || ReplyError::Malformed(String::from_utf8_lossy(line).into());
    let digits = line.get(..3).ok_or_else(malformed)?;
    if !digits.iter().all(u8::is_ascii_digit) || !(b'2'..=b'5').contains(&digits[0]) {
        return Err(malformed());
    }
    let code = digits
        .iter()
        .fold(0u16, |code, digit| code * 10 + u16::from(digit - b'0'));
    let last = match line.get(3) {
        None | Some(b' ') => true,
        Some(b'-') => false,
        Some(_) => return Err(malformed()),
    };
    let text = line.get(4..).unwrap_or_default();
    Ok((code, last, String::from_utf8_lossy(text).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(input: &[u8]) -> Vec<Result<Reply, String>> {
        let mut reader = tokio::io::BufReader::new(input);
        let mut replies = Vec::new();
        loop {
            match Reply::read(&mut reader).await {
                Ok(reply) => replies.push(Ok(reply)),
                Err(ReplyError::Closed) => return replies,
                Err(e) => {
                    replies.push(Err(e.to_string()));
                    return replies;
                }
            }
        }
    }

    #[tokio::test]
    async fn pipelined_replies_in_one_read_are_taken_one_by_one() {
        let replies =
            read_all(b"250 2.1.0 Ok\r\n550 5.1.1 <x@example.com>: unknown\r\n354 go ahead\r\n")
                .await;
        let shown: Vec<String> = replies
            .into_iter()
            .map(|r| r.map(|r| r.to_string()).unwrap_or_else(|e| e))
            .collect();
        assert_eq!(
            shown,
            [
                "250 2.1.0 Ok",
                "550 5.1.1 <x@example.com>: unknown",
                "354 go ahead"
            ]
        );
    }

    #[tokio::test]
    async fn a_multi_line_reply_is_one_reply_with_its_lines() {
        let replies = read_all(b"250-mta.example\r\n250-PIPELINING\r\n250 CHUNKING\r\n").await;
        let [Ok(reply)] = replies.as_slice() else {
            panic!("{replies:?}");
        };
        assert_eq!(reply.code(), 250);
        assert_eq!(
            reply.lines().collect::<Vec<_>>(),
            ["mta.example", "PIPELINING", "CHUNKING"]
        );
    }

    #[tokio::test]
    async fn a_bare_code_and_a_bare_lf_are_replies_too() {
        let replies = read_all(b"250\n221 bye\n").await;
        assert_eq!(replies.len(), 2, "{replies:?}");
        assert!(replies.iter().all(Result::is_ok));
    }

    #[tokio::test]
    async fn what_is_not_a_reply_is_refused() {
        for input in [
            &b"hello\r\n"[..],
            b"25\r\n",
            b"250x\r\n",
            b"150 ok\r\n",
            b"250-a\r\n251 b\r\n",
        ] {
            let replies = read_all(input).await;
            assert!(
                matches!(replies.last(), Some(Err(_))),
                "{:?}: {replies:?}",
                String::from_utf8_lossy(input)
            );
        }
        let endless = vec![b'2'; MAX_LINE * 2];
        assert!(matches!(read_all(&endless).await.last(), Some(Err(_))));
    }
}
