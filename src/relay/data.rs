//! The message after DATA: read up to the `<CRLF>.<CRLF>` that ends it,
//! dot-unstuffed (RFC 5321, section 4.5.2), within the size limit; bare LF
//! line ends and NUL bytes noted, so the message is refused whole (a bare
//! LF is how SMTP smuggling starts). Read to its end whatever happens, so
//! the session goes on with the next command.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// The most bytes of one line read in one go; a longer line is read in
/// pieces.
const PIECE: u64 = 64 * 1024;

/// What came after DATA.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Data {
    Message(Vec<u8>),
    /// Over the limit: `size` bytes came.
    TooBig {
        size: usize,
    },
    /// A line ended in LF alone.
    BareLf,
    /// A NUL byte.
    Nul,
    /// The client went away before the end.
    Closed,
}

/// Read the data up to its end line.
pub(crate) async fn read_data<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    limit: usize,
) -> std::io::Result<Data> {
    let mut message = Vec::new();
    let mut line = Vec::new();
    let mut size = 0usize;
    let (mut bare_lf, mut nul, mut line_start) = (false, false, true);
    loop {
        line.clear();
        let n = (&mut *reader)
            .take(PIECE)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Ok(Data::Closed);
        }
        let complete = line.ends_with(b"\n");
        let at_start = line_start;
        line_start = complete;
        if at_start && (line == b".\r\n" || line == b".\n") {
            bare_lf |= line == b".\n";
            break;
        }
        bare_lf |= complete && !line.ends_with(b"\r\n");
        nul |= memchr::memchr(0, &line).is_some();
        size += n;
        if size <= limit {
            let unstuffed = if at_start && line.starts_with(b".") {
                &line[1..]
            } else {
                &line[..]
            };
            message.extend_from_slice(unstuffed);
        }
    }
    Ok(if size > limit {
        Data::TooBig { size }
    } else if bare_lf {
        Data::BareLf
    } else if nul {
        Data::Nul
    } else {
        Data::Message(message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(input: &[u8], limit: usize) -> Data {
        let mut reader = tokio::io::BufReader::new(input);
        read_data(&mut reader, limit).await.unwrap()
    }

    #[tokio::test]
    async fn data_is_unstuffed_and_checked() {
        assert_eq!(
            read(b"a\r\n..b\r\n.\r\nNEXT", 100).await,
            Data::Message(b"a\r\n.b\r\n".to_vec())
        );
        assert_eq!(read(b"a\nb\r\n.\r\n", 100).await, Data::BareLf);
        assert_eq!(read(b"a\r\n.\n", 100).await, Data::BareLf);
        assert_eq!(read(b"a\0b\r\n.\r\n", 100).await, Data::Nul);
        assert_eq!(
            read(b"0123456789\r\n.\r\n", 5).await,
            Data::TooBig { size: 12 }
        );
        assert_eq!(read(b"a\r\n", 100).await, Data::Closed);
    }

    #[tokio::test]
    async fn the_session_goes_on_after_the_end_line() {
        let mut reader = tokio::io::BufReader::new(&b"x\r\n.\r\nQUIT\r\n"[..]);
        read_data(&mut reader, 100).await.unwrap();
        let mut rest = String::new();
        reader.read_line(&mut rest).await.unwrap();
        assert_eq!(rest, "QUIT\r\n");
    }
}
