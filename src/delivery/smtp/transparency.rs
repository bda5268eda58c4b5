//! The message as `DATA` carries it (RFC 5321 §4.5.2): a line that starts
//! with a period gets one more, and the data ends with `.` on a line of its
//! own. The periods are found with `memchr`'s substring search and the
//! runs between them copied whole, so the cost is a copy of the message,
//! not a step per byte.

use memchr::memmem;

/// Append `message`, dot-stuffed and terminated, to `out`.
pub(crate) fn append_data(message: &[u8], out: &mut Vec<u8>) {
    out.reserve(message.len() + message.len() / 512 + 5);
    let mut start = 0;
    if message.first() == Some(&b'.') {
        out.push(b'.');
    }
    // Each "\n." is a line that starts with a period: copy up to and with
    // the LF, add the extra period; the message's period follows in the
    // next run.
    for at in memmem::find_iter(message, b"\n.") {
        out.extend_from_slice(&message[start..=at]);
        out.push(b'.');
        start = at + 1;
    }
    out.extend_from_slice(&message[start..]);
    if !message.is_empty() && !message.ends_with(b"\r\n") {
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b".\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn data(message: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        append_data(message, &mut out);
        out
    }

    /// The obvious byte-by-byte rule, to check the fast one against.
    fn data_by_byte(message: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut at_line_start = true;
        for &byte in message {
            if at_line_start && byte == b'.' {
                out.push(b'.');
            }
            out.push(byte);
            at_line_start = byte == b'\n';
        }
        if !message.is_empty() && !message.ends_with(b"\r\n") {
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b".\r\n");
        out
    }

    /// What a receiver does: undo the stuffing, drop the terminator.
    fn received(data: &[u8]) -> Vec<u8> {
        let body = data.strip_suffix(b".\r\n").expect("terminated");
        let mut out = Vec::new();
        let mut at_line_start = true;
        let mut bytes = body.iter().peekable();
        while let Some(&byte) = bytes.next() {
            if at_line_start && byte == b'.' {
                assert_eq!(bytes.next(), Some(&b'.'), "an unstuffed period");
                out.push(b'.');
                at_line_start = false;
                continue;
            }
            out.push(byte);
            at_line_start = byte == b'\n';
        }
        out
    }

    #[test]
    fn lines_that_start_with_a_period_get_another() {
        assert_eq!(
            data(b"Subject: x\r\n\r\n.\r\n..two\r\na.b\r\n.end"),
            b"Subject: x\r\n\r\n..\r\n...two\r\na.b\r\n..end\r\n.\r\n"
        );
        assert_eq!(data(b".first\r\n"), b"..first\r\n.\r\n");
        assert_eq!(data(b"plain\r\n"), b"plain\r\n.\r\n");
        assert_eq!(data(b""), b".\r\n");
    }

    proptest! {
        #[test]
        fn the_same_as_byte_by_byte_and_the_receiver_gets_the_message_back(
            message in proptest::collection::vec(
                prop_oneof![Just(b'.'), Just(b'\r'), Just(b'\n'), Just(b'a')], 0..200)
        ) {
            let sent = data(&message);
            prop_assert_eq!(&sent, &data_by_byte(&message));
            let mut expected = message.clone();
            if !expected.is_empty() && !expected.ends_with(b"\r\n") {
                expected.extend_from_slice(b"\r\n");
            }
            prop_assert_eq!(received(&sent), expected);
        }
    }
}
