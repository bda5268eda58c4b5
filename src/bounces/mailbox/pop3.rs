//! One POP3 session (RFC 1939, STLS of RFC 2595), spoken directly: it is
//! a handful of line commands. The messages are listed with their sizes
//! (`LIST`), read (`RETR`), marked for deletion (`DELE`), and the
//! deletions happen only at `QUIT`: a session cut before it deletes
//! nothing, and the next pass reads the same messages again.

use super::address::{MailboxUrl, Security};
use super::connect::{self, within, Listed, TlsStream};
use super::error::{MailboxError, Step};
use std::sync::Arc;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};

/// The longest status line read (RFC 2449 allows 512 bytes).
const LINE: u64 = 4096;

pub(super) struct Pop3 {
    stream: BufReader<TlsStream>,
    server: String,
}

impl Pop3 {
    pub(super) async fn open(
        url: &MailboxUrl,
        password: &str,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Result<Pop3, MailboxError> {
        let server = url.to_string();
        let tcp = connect::tcp(url).await?;
        let stream = match url.security {
            Security::Tls => {
                let mut stream = BufReader::new(connect::tls(tcp, url, tls).await?);
                status(&server, Step::Connect, &mut stream).await?;
                stream
            }
            Security::StartTls => {
                let mut plain = BufReader::new(tcp);
                status(&server, Step::Connect, &mut plain).await?;
                command(&server, Step::Tls, &mut plain, "STLS").await?;
                if !plain.buffer().is_empty() {
                    return Err(MailboxError::new(
                        &server,
                        Step::Tls,
                        "the server sent more after +OK to STLS",
                    ));
                }
                BufReader::new(connect::tls(plain.into_inner(), url, tls).await?)
            }
        };
        let mut pop3 = Pop3 { stream, server };
        let user = format!("USER {}", one_line(&url.user));
        pop3.command(Step::Login, &user).await?;
        let pass = format!("PASS {}", one_line(password));
        pop3.command(Step::Login, &pass)
            .await
            .map_err(|err| err.hinted("check the user and LINKTRACK_MAILBOX_PASSWORD"))?;
        Ok(pop3)
    }

    async fn command(&mut self, step: Step, line: &str) -> Result<String, MailboxError> {
        command(&self.server, step, &mut self.stream, line).await
    }

    /// Every message, with its size (`LIST`).
    pub(super) async fn list(&mut self) -> Result<Vec<Listed>, MailboxError> {
        self.command(Step::Session, "LIST").await?;
        let lines = within(
            &self.server,
            Step::Session,
            multi_line(&mut self.stream, 64 << 20),
        )
        .await?;
        let text = String::from_utf8_lossy(&lines);
        let mut listed = Vec::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(id), Some(size)) = (words.next(), words.next()) else {
                continue;
            };
            match (id.parse(), size.parse()) {
                (Ok(id), Ok(size)) => listed.push(Listed { id, size }),
                _ => {
                    return Err(MailboxError::new(
                        &self.server,
                        Step::Session,
                        format!("LIST answered {line:?}"),
                    ))
                }
            }
        }
        Ok(listed)
    }

    /// The message's bytes (`RETR`), dot-unstuffed; a server sending far
    /// more than `LIST` said is cut off (`limit`).
    pub(super) async fn fetch(&mut self, id: u32, limit: usize) -> Result<Vec<u8>, MailboxError> {
        self.command(Step::Session, &format!("RETR {id}")).await?;
        within(
            &self.server,
            Step::Session,
            multi_line(&mut self.stream, limit as u64),
        )
        .await
    }

    /// Mark the message for deletion at `QUIT`.
    pub(super) async fn delete(&mut self, id: u32) -> Result<(), MailboxError> {
        self.command(Step::Session, &format!("DELE {id}"))
            .await
            .map(|_| ())
    }

    /// `QUIT`: the server deletes what was marked.
    pub(super) async fn quit(mut self) -> Result<(), MailboxError> {
        self.command(Step::Session, "QUIT").await.map(|_| ())
    }
}

/// The text with no line breaks (a command is one line).
fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], "")
}

/// Send `line`, read its status line: the text after `+OK`, or `-ERR`'s
/// text as a failure of `step`.
async fn command<S>(
    server: &str,
    step: Step,
    stream: &mut BufReader<S>,
    line: &str,
) -> Result<String, MailboxError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    within(server, Step::Session, async {
        stream.get_mut().write_all(line.as_bytes()).await?;
        stream.get_mut().write_all(b"\r\n").await?;
        stream.get_mut().flush().await
    })
    .await?;
    status(server, step, stream).await
}

/// One status line: `+OK …` or `-ERR …` (the failure of `step`).
async fn status<S>(server: &str, step: Step, stream: &mut S) -> Result<String, MailboxError>
where
    S: AsyncBufRead + Unpin,
{
    let mut line = Vec::new();
    let read = within(server, Step::Session, async {
        (&mut *stream).take(LINE).read_until(b'\n', &mut line).await
    })
    .await?;
    if read == 0 {
        return Err(MailboxError::new(
            server,
            Step::Session,
            "the connection closed",
        ));
    }
    let text = String::from_utf8_lossy(&line).trim_end().to_owned();
    match text.strip_prefix("+OK") {
        Some(rest) => Ok(rest.trim().to_owned()),
        None => Err(MailboxError::new(
            server,
            step,
            format!("the server answered {text:?}"),
        )),
    }
}

/// A multi-line answer up to its `.` line, dot-unstuffed, CRLF kept;
/// more than `limit` bytes is an error.
async fn multi_line<S>(stream: &mut S, limit: u64) -> std::io::Result<Vec<u8>>
where
    S: AsyncBufRead + Unpin,
{
    let mut out = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut *stream)
            .take(limit.saturating_add(LINE))
            .read_until(b'\n', &mut line)
            .await?;
        if read == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the connection closed in the middle of an answer",
            ));
        }
        if line == b".\r\n" || line == b".\n" {
            return Ok(out);
        }
        let unstuffed = match line.strip_prefix(b".") {
            Some(rest) => rest,
            None => &line[..],
        };
        out.extend_from_slice(unstuffed);
        if out.len() as u64 > limit {
            return Err(std::io::Error::other(format!(
                "the answer is over {limit} bytes, more than the server listed"
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_multi_line_answer_is_unstuffed_and_ends_at_its_dot() {
        let raw: &[u8] = b"Subject: x\r\n\r\n..leading dot\r\nbody\r\n.\r\n+OK next\r\n";
        let mut reader = BufReader::new(raw);
        let message = multi_line(&mut reader, 1000).await.unwrap();
        assert_eq!(message, b"Subject: x\r\n\r\n.leading dot\r\nbody\r\n");
        assert_eq!(
            status("s", Step::Session, &mut reader).await.unwrap(),
            "next"
        );
        let mut cut = BufReader::new(&b"Subject: x\r\n"[..]);
        assert!(multi_line(&mut cut, 1000).await.is_err());
        let mut big = BufReader::new(&b"0123456789\r\n0123456789\r\n.\r\n"[..]);
        assert!(multi_line(&mut big, 15).await.is_err());
        let mut refused = BufReader::new(&b"-ERR [AUTH] no\r\n"[..]);
        let err = status("s", Step::Login, &mut refused).await.unwrap_err();
        assert_eq!(err.step, Step::Login);
    }
}
