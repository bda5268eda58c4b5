//! A CSV reader that counts physical lines itself, so no quote can make
//! rows disappear.
//!
//! RFC 4180 quoting lets a quoted field run over line breaks. A stray quote
//! (`user@example.com,"Stray`) therefore opens a field that swallows every
//! following line into one recipient's field: the rows vanish from the count
//! and their addresses end up in a stranger's letter. This reader keeps the
//! quoting but tracks every line a record covers, and [`CsvRecords::check_rest`] reads
//! the whole file once before any letter is built, refusing it when a quote
//! never closes or when a quoted field runs into a line that looks like
//! another recipient (it holds an `@`, or as many fields as the header).
//! A quoted line break that passes that check stays in its field (a street
//! address over two lines); the header-field checks reject it in `email`,
//! `name` or the subject.
//!
//! Line ends are LF or CRLF; the CR of a CRLF is not part of any field.
//! Empty lines are not rows. A quote opens a quoted field only at the start
//! of a field; elsewhere it is an ordinary character.

use std::io::{BufRead, Read};

/// One record: its fields as bytes and the lines it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RawRecord {
    /// 1-based physical line the record starts on.
    pub line: u64,
    /// The last physical line of the record (after a quoted line break).
    pub last_line: u64,
    pub fields: Vec<Vec<u8>>,
    /// Text after a closing quote (`"a"b`): the row is not well-formed.
    pub text_after_quote: bool,
    /// The record ends inside a quoted field that never closes.
    pub unterminated: Option<u64>,
    /// Lines inside a quoted field that look like a record of their own:
    /// (line, its text).
    pub swallowed: Vec<(u64, String)>,
}

/// Why a CSV file is refused as a whole, before any letter is built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsvRefusal {
    #[error(
        "line {opened}: a quoted field opens here and never closes (it would run to the end of \
         the file, line {last}, swallowing every row after it); nothing was built: close or \
         remove the quote"
    )]
    Unterminated { opened: u64, last: u64 },
    #[error(
        "line {opened}: a quoted field opens here and runs over a line break into line {line}, \
         which looks like another recipient ({text:?}); nothing was built, so no letter can \
         carry another row: close the quote on its own line"
    )]
    Swallowed {
        opened: u64,
        line: u64,
        text: String,
    },
}

/// The most bytes one record (a line, or the lines a quoted field spans)
/// may hold: an unbounded field was held whole, several copies at once. A
/// letter's fields are names and short values; 1 MiB is far beyond them.
pub(super) const MAX_RECORD_BYTES: usize = 1 << 20;

/// A record over [`MAX_RECORD_BYTES`]: the file is refused before anything
/// is built, naming the line and the field.
fn too_long(line: u64, field: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "line {line}, field {field}: the record is longer than {MAX_RECORD_BYTES} bytes \
             (the most a recipient's row may hold); nothing was built"
        ),
    )
}

/// Reads records from a CSV file, one physical line at a time.
pub(super) struct CsvRecords<R> {
    reader: R,
    delimiter: u8,
    /// Fields in the header: a continuation line with as many looks like a row.
    header_len: usize,
    /// Physical lines read so far.
    lines: u64,
    buffer: Vec<u8>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    FieldStart,
    Unquoted,
    Quoted,
    /// A quote inside a quoted field: closing, or the first of `""`.
    QuoteInQuoted,
    /// Text after a closing quote, up to the delimiter.
    AfterQuote,
}

impl<R: BufRead> CsvRecords<R> {
    /// `lines_before`: physical lines already consumed (the header).
    pub(super) fn new(reader: R, delimiter: u8, header_len: usize, lines_before: u64) -> Self {
        CsvRecords {
            reader,
            delimiter,
            header_len,
            lines: lines_before,
            buffer: Vec::new(),
        }
    }

    /// Set once the header is read: continuation lines are compared with it.
    pub(super) fn set_header_len(&mut self, header_len: usize) {
        self.header_len = header_len;
    }

    /// Read every remaining record: the first that makes the file unusable.
    pub(super) fn check_rest(&mut self) -> std::io::Result<Option<CsvRefusal>> {
        while let Some(record) = self.next_record()? {
            if let Some(refusal) = record.refusal() {
                return Ok(Some(refusal));
            }
        }
        Ok(None)
    }

    /// The next physical line without its line end; `None` at the end.
    /// At most `room` bytes are read: a longer line is an error naming it
    /// (and the field it was in), read no further.
    fn next_line(&mut self, room: usize) -> std::io::Result<Option<()>> {
        self.buffer.clear();
        let limit = room as u64 + 1;
        if (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.buffer)?
            == 0
        {
            return Ok(None);
        }
        self.lines += 1;
        if self.buffer.len() > room {
            let fields_before = self.buffer.iter().filter(|&&b| b == self.delimiter).count();
            return Err(too_long(self.lines, fields_before + 1));
        }
        if self.buffer.last() == Some(&b'\n') {
            self.buffer.pop();
            if self.buffer.last() == Some(&b'\r') {
                self.buffer.pop();
            }
        }
        Ok(Some(()))
    }

    /// The next record; empty lines are skipped.
    pub(super) fn next_record(&mut self) -> std::io::Result<Option<RawRecord>> {
        loop {
            if self.next_line(MAX_RECORD_BYTES)?.is_none() {
                return Ok(None);
            }
            if !self.buffer.is_empty() {
                break;
            }
        }
        let mut record_bytes = self.buffer.len();
        let mut record = RawRecord {
            line: self.lines,
            last_line: self.lines,
            fields: Vec::new(),
            text_after_quote: false,
            unterminated: None,
            swallowed: Vec::new(),
        };
        let mut field = Vec::new();
        let mut state = State::FieldStart;
        let mut quote_opened = self.lines;
        loop {
            for &byte in &self.buffer {
                state = match (state, byte) {
                    (State::FieldStart, b'"') => {
                        quote_opened = self.lines;
                        State::Quoted
                    }
                    (State::Quoted, b'"') => State::QuoteInQuoted,
                    (State::QuoteInQuoted, b'"') => {
                        field.push(b'"');
                        State::Quoted
                    }
                    (State::Quoted, _) => {
                        field.push(byte);
                        State::Quoted
                    }
                    (_, b) if b == self.delimiter => {
                        record.fields.push(std::mem::take(&mut field));
                        State::FieldStart
                    }
                    (State::QuoteInQuoted | State::AfterQuote, _) => {
                        record.text_after_quote = true;
                        field.push(byte);
                        State::AfterQuote
                    }
                    (State::FieldStart | State::Unquoted, _) => {
                        field.push(byte);
                        State::Unquoted
                    }
                };
            }
            if state != State::Quoted {
                break;
            }
            // The quoted field goes on over the line break, within what is
            // left of the record's bytes.
            let room = MAX_RECORD_BYTES.saturating_sub(record_bytes);
            let next = self.next_line(room).map_err(|err| {
                if err.kind() == std::io::ErrorKind::InvalidData {
                    too_long(record.line, record.fields.len() + 1)
                } else {
                    err
                }
            })?;
            if next.is_none() {
                record.unterminated = Some(quote_opened);
                break;
            }
            record_bytes += self.buffer.len() + 1;
            record.last_line = self.lines;
            field.push(b'\n');
            if looks_like_a_record(&self.buffer, self.delimiter, self.header_len) {
                let text = String::from_utf8_lossy(&self.buffer);
                record
                    .swallowed
                    .push((self.lines, text.chars().take(80).collect()));
            }
        }
        record.fields.push(field);
        Ok(Some(record))
    }
}

impl RawRecord {
    /// Whether this record makes the whole file unusable.
    pub(super) fn refusal(&self) -> Option<CsvRefusal> {
        if let Some(opened) = self.unterminated {
            return Some(CsvRefusal::Unterminated {
                opened,
                last: self.last_line,
            });
        }
        self.swallowed
            .first()
            .map(|(line, text)| CsvRefusal::Swallowed {
                opened: self.line,
                line: *line,
                text: text.clone(),
            })
    }
}

/// A line inside a quoted field that could be a recipient of its own: it
/// holds an address-like `@`, or as many fields as the header (more than one).
fn looks_like_a_record(line: &[u8], delimiter: u8, header_len: usize) -> bool {
    let fields = line.iter().filter(|&&b| b == delimiter).count() + 1;
    line.contains(&b'@') || (header_len > 1 && fields >= header_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(text: &str, header_len: usize) -> Vec<RawRecord> {
        let mut reader = CsvRecords::new(text.as_bytes(), b',', header_len, 0);
        let mut out = Vec::new();
        while let Some(r) = reader.next_record().unwrap() {
            out.push(r);
        }
        out
    }

    fn fields(r: &RawRecord) -> Vec<String> {
        r.fields
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect()
    }

    #[test]
    fn quoting_follows_rfc_4180_and_crlf_lines_count_once() {
        let rs = records(
            "a@x.com,\"Bø, Jr.\"\r\n\r\nb@x.com,\"say \"\"hi\"\"\"\r\nc@x.com,\r\n",
            2,
        );
        assert_eq!(rs.len(), 3);
        assert_eq!(
            (rs[0].line, fields(&rs[0])),
            (1, vec!["a@x.com".into(), "Bø, Jr.".into()])
        );
        assert_eq!(rs[1].line, 3, "the empty line 2 is not a row");
        assert_eq!(fields(&rs[1])[1], "say \"hi\"");
        assert_eq!(
            (rs[2].line, fields(&rs[2])),
            (4, vec!["c@x.com".into(), String::new()])
        );
        assert!(rs
            .iter()
            .all(|r| r.refusal().is_none() && !r.text_after_quote));
    }

    #[test]
    fn a_quote_inside_a_field_is_an_ordinary_character() {
        let rs = records("a@x.com,O\"Brien\n", 2);
        assert_eq!(fields(&rs[0])[1], "O\"Brien");
        let rs = records("a@x.com,\"O\"Brien\n", 2);
        assert!(rs[0].text_after_quote);
    }

    #[test]
    fn a_quoted_line_break_without_a_record_in_it_stays_in_its_field() {
        let rs = records("a@x.com,\"12 Main St\nApt 4\"\nb@x.com,B\n", 2);
        assert_eq!(rs.len(), 2);
        assert_eq!(fields(&rs[0])[1], "12 Main St\nApt 4");
        assert_eq!((rs[0].line, rs[0].last_line, rs[1].line), (1, 2, 3));
        assert!(rs[0].refusal().is_none());
    }

    #[test]
    fn a_stray_quote_is_refused_naming_the_line_it_opens_on() {
        let text = "a@x.com,A\nb@x.com,\"Stray\nc@x.com,C\n";
        let rs = records(text, 2);
        assert_eq!(rs.len(), 2);
        let refusal = rs[1].refusal().unwrap();
        assert_eq!(refusal, CsvRefusal::Unterminated { opened: 2, last: 3 });
        assert!(refusal
            .to_string()
            .starts_with("line 2: a quoted field opens here"));
        let checked = CsvRecords::new(text.as_bytes(), b',', 2, 0)
            .check_rest()
            .unwrap();
        assert_eq!(checked, Some(refusal));
    }

    #[test]
    fn a_closed_quote_that_swallowed_a_row_is_refused() {
        let text = "a@x.com,\"A\nb@x.com,B\nc\"\n";
        let refusal = CsvRecords::new(text.as_bytes(), b',', 2, 0)
            .check_rest()
            .unwrap()
            .unwrap();
        assert!(
            matches!(&refusal, CsvRefusal::Swallowed { opened: 1, line: 2, text } if text == "b@x.com,B"),
            "{refusal:?}"
        );
        // Shaped like a row without an address: refused too.
        let text = "a@x.com,\"A\nsomething,else\"\n";
        assert!(CsvRecords::new(text.as_bytes(), b',', 2, 0)
            .check_rest()
            .unwrap()
            .is_some());
    }

    /// A record over the limit stops the read at the limit, naming its line and field.
    #[test]
    fn a_record_over_the_limit_is_refused_naming_line_and_field() {
        let long = "x".repeat(MAX_RECORD_BYTES + 10);
        let text = format!("a@example.com,ok\nb@example.com,{long}\n");
        let mut reader = CsvRecords::new(text.as_bytes(), b',', 2, 0);
        assert!(reader.next_record().unwrap().is_some());
        let err = reader.next_record().unwrap_err();
        assert!(
            err.to_string()
                .starts_with("line 2, field 2: the record is longer than 1048576 bytes"),
            "{err}"
        );
        // The same spread over many lines by a quoted field.
        let many = vec!["y".repeat(1000); 1100].join("\n");
        let text = format!("c@example.com,\"{many}\"\n");
        let mut reader = CsvRecords::new(text.as_bytes(), b',', 2, 0);
        let err = reader.next_record().unwrap_err();
        assert!(err.to_string().starts_with("line 1, field 2: "), "{err}");
        // At the limit is fine.
        let fits = format!("d@example.com,{}\n", "z".repeat(MAX_RECORD_BYTES - 20));
        let mut reader = CsvRecords::new(fits.as_bytes(), b',', 2, 0);
        assert_eq!(reader.next_record().unwrap().unwrap().fields.len(), 2);
    }
}
