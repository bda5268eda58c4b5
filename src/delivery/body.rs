//! A MIME part's body encoded as lettre's message builder encodes it, from
//! a mailing's plan: the fixed text of the part is encoded once, each
//! letter's values per letter.
//!
//! lettre (`Body::new`) picks the `Content-Transfer-Encoding` with
//! email-encoding's chooser (7bit when the text is ASCII and no line has 76
//! bytes or more, else quoted-printable when at most a third of the bytes
//! need escaping, else base64) and encodes quoted-printable with the
//! `quoted_printable` crate. Both run over the whole part, for every letter:
//! two thirds of a planned letter's CPU. This module makes the same bytes
//! (the tests hold it to lettre's, byte for byte) from pieces:
//!
//! - The choice is made from each fixed piece's counts (ASCII or not, bytes
//!   to escape, where its line breaks are) and the values' own.
//! - Quoted-printable is a state machine whose state (the column, where the
//!   last thing written started, a CR pending) is reset by every hard line
//!   break: the text of a fixed piece after its first CRLF is encoded once,
//!   with the state it leaves; per letter only the piece's first line and
//!   the values are encoded, the rest copied.
//! - Base64 lines do not restart at line breaks, so a base64 part (mostly
//!   non-Latin text) is joined and encoded per letter.

use std::borrow::Cow;

use base64::Engine;
use lettre::message::header::ContentTransferEncoding;
use lettre::message::Body;

use crate::letter::plan::Chunk;

/// Encoded lines' length limit, not counting the soft break's `=`.
const LIMIT: usize = 76;
/// email-encoding's chooser: a line of this many bytes or more (counted as
/// it counts them) is too long for 7bit.
const LINE_TOO_LONG: usize = 76;

/// A part's body, encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedBody {
    pub encoding: ContentTransferEncoding,
    /// CRLF line ends, ASCII.
    pub bytes: Vec<u8>,
}

impl EncodedBody {
    /// The body as lettre's message builder takes it, already encoded.
    pub fn into_lettre(self) -> Body {
        Body::dangerous_pre_encoded(self.bytes, self.encoding)
    }
}

/// What email-encoding's chooser reads of a piece of text (CRLF line ends).
#[derive(Debug, Clone, Default)]
struct Counts {
    len: usize,
    ascii: bool,
    /// Bytes other than tab and printable ASCII (CR and LF included).
    escapes: usize,
    /// The first and the last LF, when there is one.
    first_lf: Option<usize>,
    last_lf: usize,
    /// Two LFs of this piece 76 or more bytes apart.
    long_inside: bool,
}

impl Counts {
    fn of(text: &[u8]) -> Counts {
        let mut counts = Counts {
            len: text.len(),
            ascii: text.is_ascii(),
            escapes: text
                .iter()
                .filter(|&&b| !matches!(b, b'\t' | b' '..=b'~'))
                .count(),
            ..Counts::default()
        };
        let mut previous: Option<usize> = None;
        for at in memchr::memchr_iter(b'\n', text) {
            match previous {
                None => counts.first_lf = Some(at),
                Some(before) => counts.long_inside |= at - before >= LINE_TOO_LONG,
            }
            previous = Some(at);
        }
        counts.last_lf = previous.unwrap_or(0);
        counts
    }
}

/// email-encoding's choice for text whose pieces have these counts, in order.
fn choose<'a>(pieces: impl Iterator<Item = &'a Counts>) -> ContentTransferEncoding {
    let (mut at, mut last_lf, mut too_long, mut ascii, mut escapes) = (0, 0, false, true, 0);
    for counts in pieces {
        if let Some(first) = counts.first_lf {
            too_long |= at + first - last_lf >= LINE_TOO_LONG || counts.long_inside;
            last_lf = at + counts.last_lf;
        }
        ascii &= counts.ascii;
        escapes += counts.escapes;
        at += counts.len;
    }
    too_long |= at - last_lf >= LINE_TOO_LONG;
    if ascii && !too_long {
        ContentTransferEncoding::SevenBit
    } else if escapes <= at / 3 {
        ContentTransferEncoding::QuotedPrintable
    } else {
        ContentTransferEncoding::Base64
    }
}

/// One fixed piece of a part, CRLF line ends, quoted-printable encoded from
/// its first line break on.
#[derive(Debug, Clone)]
struct FixedPiece {
    text: String,
    counts: Counts,
    /// The piece's text began with an LF (its CR was added here).
    lf_first: bool,
    /// `text[..head]`, through the first CRLF, is encoded per letter, or
    /// copied from `head_encoded` when the piece starts a line.
    head: usize,
    head_encoded: Vec<u8>,
    head_state: QpState,
    /// `text[head..]` encoded, and the state it leaves.
    tail: Vec<u8>,
    tail_state: QpState,
}

/// A part's fixed pieces, prepared once per plan.
#[derive(Debug, Clone)]
pub struct BodyPlan {
    pieces: Vec<FixedPiece>,
}

impl BodyPlan {
    /// Prepares the fixed pieces; [`Chunk::Fixed`]`(i)` is `fixed[i]`.
    pub fn compile<'a>(fixed: impl IntoIterator<Item = &'a str>) -> BodyPlan {
        let pieces = fixed
            .into_iter()
            .map(|raw| {
                let text = crlf_line_ends(raw).into_owned();
                let head = text.find("\r\n").map_or(text.len(), |at| at + 2);
                let (head_encoded, head_state) = Qp::alone(&text.as_bytes()[..head]);
                let (tail, tail_state) = Qp::alone(&text.as_bytes()[head..]);
                FixedPiece {
                    counts: Counts::of(text.as_bytes()),
                    lf_first: raw.starts_with('\n'),
                    head,
                    head_encoded,
                    head_state,
                    tail,
                    tail_state,
                    text,
                }
            })
            .collect();
        BodyPlan { pieces }
    }

    /// The part of one letter, or `None` when its chunks cannot be encoded
    /// piece by piece (a value ends in CR before an LF, or names no piece):
    /// then encode the joined text with [`encode_text`].
    pub fn encode(&self, chunks: &[Chunk<'_>]) -> Option<EncodedBody> {
        let mut values: Vec<(Cow<'_, str>, Counts)> = Vec::new();
        let mut previous_cr = false;
        for chunk in chunks {
            let (lf_first, ends_cr, empty) = match chunk {
                Chunk::Fixed(i) => {
                    let piece = self.pieces.get(*i)?;
                    let text = &piece.text;
                    (piece.lf_first, text.ends_with('\r'), text.is_empty())
                }
                Chunk::Value(value) => {
                    let text = crlf_line_ends(value);
                    let counts = Counts::of(text.as_bytes());
                    values.push((text, counts));
                    (
                        value.starts_with('\n'),
                        value.ends_with('\r'),
                        value.is_empty(),
                    )
                }
            };
            // Joined, that LF would get no CR of its own.
            if lf_first && previous_cr {
                return None;
            }
            if !empty {
                previous_cr = ends_cr;
            }
        }
        let pieces = || {
            let mut values = values.iter();
            chunks.iter().map(move |chunk| match chunk {
                Chunk::Fixed(i) => {
                    let piece = &self.pieces[*i];
                    (piece.text.as_str(), &piece.counts, Some(piece))
                }
                Chunk::Value(_) => {
                    let (text, counts) = values.next().map_or(("", &EMPTY), |(t, c)| (t, c));
                    (text, counts, None)
                }
            })
        };
        let encoding = choose(pieces().map(|(_, counts, _)| counts));
        let len: usize = pieces().map(|(text, _, _)| text.len()).sum();
        let bytes = match encoding {
            ContentTransferEncoding::QuotedPrintable => {
                let mut qp = Qp::new(Vec::with_capacity(len + len / 16));
                for (text, _, piece) in pieces() {
                    match piece {
                        Some(piece) => {
                            if qp.at_line_start() {
                                qp.resume(&piece.head_encoded, piece.head_state);
                            } else {
                                qp.write(&piece.text.as_bytes()[..piece.head]);
                            }
                            if piece.head < piece.text.len() {
                                qp.resume(&piece.tail, piece.tail_state);
                            }
                        }
                        None => qp.write(text.as_bytes()),
                    }
                }
                qp.finish()
            }
            _ => {
                let mut joined = Vec::with_capacity(len);
                for (text, _, _) in pieces() {
                    joined.extend_from_slice(text.as_bytes());
                }
                if encoding == ContentTransferEncoding::Base64 {
                    base64_lines(&joined)
                } else {
                    joined
                }
            }
        };
        Some(EncodedBody { encoding, bytes })
    }
}

static EMPTY: Counts = Counts {
    len: 0,
    ascii: true,
    escapes: 0,
    first_lf: None,
    last_lf: 0,
    long_inside: false,
};

/// The whole text of a part encoded as lettre encodes it (`Body::new`).
pub fn encode_text(text: &str) -> EncodedBody {
    let text = crlf_line_ends(text);
    let bytes = text.as_bytes();
    let encoding = choose(std::iter::once(&Counts::of(bytes)));
    let bytes = match encoding {
        ContentTransferEncoding::QuotedPrintable => {
            let mut qp = Qp::new(Vec::with_capacity(bytes.len() + bytes.len() / 16));
            qp.write(bytes);
            qp.finish()
        }
        ContentTransferEncoding::Base64 => base64_lines(bytes),
        _ => bytes.to_vec(),
    };
    EncodedBody { encoding, bytes }
}

/// `text` with a CR before every LF that lacks one (lettre's rule for a
/// body); borrowed when nothing changes.
pub(crate) fn crlf_line_ends(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let lacks_cr = memchr::memchr_iter(b'\n', bytes).any(|at| at == 0 || bytes[at - 1] != b'\r');
    if !lacks_cr {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + text.len() / 32);
    let mut copied = 0;
    for at in memchr::memchr_iter(b'\n', bytes) {
        if at == 0 || bytes[at - 1] != b'\r' {
            out.push_str(&text[copied..at]);
            out.push('\r');
            copied = at;
        }
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// Base64 in lines of 76 characters (57 bytes), CRLF between lines and none
/// after the last (email-encoding's `body::base64::encode`).
fn base64_lines(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() / 57 * 78 + 80);
    let mut line = [0u8; LIMIT];
    for (n, chunk) in bytes.chunks(LIMIT / 4 * 3).enumerate() {
        if n > 0 {
            out.extend_from_slice(b"\r\n");
        }
        // 57 bytes make exactly 76 characters: the buffer always fits.
        let written = base64::engine::general_purpose::STANDARD
            .encode_slice(chunk, &mut line)
            .unwrap_or(0);
        out.extend_from_slice(&line[..written]);
    }
    out
}

/// Where a quoted-printable encoder stands after some text.
#[derive(Debug, Clone, Copy)]
struct QpState {
    on_line: usize,
    /// Where the last thing written starts, from the text's start; `None`:
    /// nothing was written since the last line break.
    backup: Option<usize>,
    was_cr: bool,
}

/// The `quoted_printable` crate's text-mode encoder (0.5, the one lettre
/// uses), step for step, writing into one buffer across calls: soft breaks
/// after 75 characters (or before the last thing written, when a line is
/// full), `=XX` for `=` and bytes outside tab and printable ASCII, a space
/// or tab before a line break written as `=20`/`=09`, CRLF kept as the hard
/// break and a lone CR written as `=0D`.
struct Qp {
    out: Vec<u8>,
    on_line: usize,
    backup: usize,
    was_cr: bool,
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn needs_encoding(byte: u8) -> bool {
    !matches!(byte, b'\t' | b' '..=b'<' | b'>'..=b'~')
}

impl Qp {
    fn new(out: Vec<u8>) -> Qp {
        Qp {
            out,
            on_line: 0,
            backup: 0,
            was_cr: false,
        }
    }

    /// `text` encoded from a line's start, and the state it leaves.
    fn alone(text: &[u8]) -> (Vec<u8>, QpState) {
        let mut qp = Qp::new(Vec::with_capacity(text.len() + text.len() / 16));
        qp.backup = usize::MAX;
        qp.write(text);
        let state = QpState {
            on_line: qp.on_line,
            backup: (qp.backup != usize::MAX).then_some(qp.backup),
            was_cr: qp.was_cr,
        };
        (qp.out, state)
    }

    /// Nothing written on this line yet and no CR pending: the start of
    /// the text or just after a hard line break (a soft one is always
    /// followed by what did not fit), where the state is the same.
    fn at_line_start(&self) -> bool {
        self.on_line == 0 && !self.was_cr
    }

    /// Continue with text encoded on its own from a line's start (`tail`,
    /// leaving `state`): a hard line break reset the state it began in.
    fn resume(&mut self, tail: &[u8], state: QpState) {
        let base = self.out.len();
        self.out.extend_from_slice(tail);
        self.on_line = state.on_line;
        if let Some(backup) = state.backup {
            self.backup = base + backup;
        }
        self.was_cr = state.was_cr;
    }

    fn append(&mut self, piece: &[u8]) {
        if self.on_line + piece.len() > LIMIT {
            if self.on_line == LIMIT {
                self.on_line = self.out.len() - self.backup;
                self.out.splice(self.backup..self.backup, *b"=\r\n");
            } else {
                self.out.extend_from_slice(b"=\r\n");
                self.on_line = 0;
            }
        }
        self.out.extend_from_slice(piece);
        self.on_line += piece.len();
        self.backup = self.out.len() - piece.len();
    }

    fn trailing_space_tab(&mut self) {
        let encoded: &[u8] = match self.out.last() {
            Some(b' ') => b"=20",
            Some(b'\t') => b"=09",
            _ => return,
        };
        self.on_line = self.on_line.saturating_sub(1);
        self.out.pop();
        self.append(encoded);
    }

    fn encode_byte(&mut self, byte: u8) {
        match byte {
            b'=' => self.append(b"=3D"),
            b'\t' | b' '..=b'~' => self.append(&[byte]),
            _ => self.append(&[
                b'=',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xF)],
            ]),
        }
    }

    fn write(&mut self, input: &[u8]) {
        let mut at = 0;
        while let Some(&byte) = input.get(at) {
            at += 1;
            if self.was_cr {
                if byte == b'\n' {
                    self.trailing_space_tab();
                    self.out.extend_from_slice(b"\r\n");
                    self.on_line = 0;
                    self.was_cr = false;
                    continue;
                }
                self.append(b"=0D");
            }
            if byte == b'\r' {
                self.was_cr = true;
                continue;
            }
            self.was_cr = false;
            if LIMIT - self.on_line >= 3 && !needs_encoding(byte) {
                // A run of bytes written as they are, up to two short of
                // the limit.
                let start = at - 1;
                let most = LIMIT - self.on_line - 2;
                let end = input[start..]
                    .iter()
                    .take(most)
                    .position(|&b| needs_encoding(b))
                    .map_or_else(|| (start + most).min(input.len()), |n| start + n);
                self.out.extend_from_slice(&input[start..end]);
                self.on_line += end - start;
                self.backup = self.out.len();
                at = end;
                continue;
            }
            self.encode_byte(byte);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        if self.was_cr {
            self.append(b"=0D");
        } else {
            self.trailing_space_tab();
        }
        self.out
    }
}

#[cfg(test)]
#[path = "body_tests.rs"]
mod tests;
