//! The recipients file's lines read into entries: JSON Lines, each line
//! one object, or CSV under its header row (the delimiter found by the
//! address column). A bad line is a rejected entry; reading goes on.

use super::columns::HeaderPlan;
use super::csv_records::{CsvRecords, RawRecord};
use super::recipient_fields::{recipient, reject, Entry};
use super::reject::{Cause, Reject};
use serde_json::{Map, Value};
use std::io::BufRead;

/// JSON Lines, each line read to at most
/// `csv_records::MAX_RECORD_BYTES`: a longer one is a rejected row (the
/// rest of it skipped unread into memory), the others go on.
pub(super) fn json_lines<R: BufRead + Send + 'static>(
    mut reader: R,
    columns: HeaderPlan,
) -> impl Iterator<Item = std::io::Result<Entry>> {
    use std::io::Read;
    const MAX: usize = super::csv_records::MAX_RECORD_BYTES;
    let mut number = 0u64;
    std::iter::from_fn(move || loop {
        let mut bytes = Vec::new();
        match (&mut reader)
            .take(MAX as u64 + 1)
            .read_until(b'\n', &mut bytes)
        {
            Err(e) => return Some(Err(e)),
            Ok(0) => return None,
            Ok(_) => number += 1,
        }
        if bytes.len() > MAX && bytes.last() != Some(&b'\n') {
            if let Err(e) = skip_line(&mut reader) {
                return Some(Err(e));
            }
            return Some(Ok(reject(number, None, Reject::LineTooLong { max: MAX })));
        }
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        let Ok(text) = String::from_utf8(bytes) else {
            return Some(Ok(reject(number, None, Reject::NotUtf8)));
        };
        if text.trim().is_empty() {
            continue;
        }
        return Some(Ok(parse_json_line(number, &text, &columns)));
    })
}

/// Consume the rest of the current line without keeping it.
fn skip_line<R: BufRead>(reader: &mut R) -> std::io::Result<()> {
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(());
        }
        match memchr::memchr(b'\n', buffer) {
            Some(at) => {
                reader.consume(at + 1);
                return Ok(());
            }
            None => {
                let len = buffer.len();
                reader.consume(len);
            }
        }
    }
}

fn parse_json_line(line: u64, text: &str, columns: &HeaderPlan) -> Entry {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(mut fields)) => {
            columns.rename_json(&mut fields);
            recipient(line, fields)
        }
        Ok(_) => reject(line, None, Reject::NotJsonObject),
        Err(e) => reject(line, None, Reject::BadJson(Cause::new(e))),
    }
}

/// The delimiters a recipients CSV may use: comma, semicolon (where the comma
/// is the decimal mark), tab.
const CSV_DELIMITERS: [(u8, &str); 3] = [(b',', "comma"), (b';', "semicolon"), (b'\t', "tab")];

pub(super) fn first_line(buffer: &[u8]) -> &[u8] {
    let end = buffer
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(buffer.len());
    &buffer[..end]
}

/// The delimiter under which the header row has an address column (an
/// `email` column in any case or padding, a platform's name for it, or the
/// one `--column email=…` names: `columns.rs`). A header without one under
/// any delimiter is refused before any letter is built: otherwise every
/// line would be rejected, one by one, for "no `email`".
fn csv_delimiter(header: &[u8], columns: &HeaderPlan) -> std::io::Result<u8> {
    let header = String::from_utf8_lossy(header);
    let header = header.strip_suffix('\r').unwrap_or(&header);
    if header.contains('\r') {
        return Err(invalid_data(
            "line 1: the lines end in a bare CR (an old Mac export); save the file with LF or \
             CRLF line ends"
                .into(),
        ));
    }
    for (delimiter, _) in CSV_DELIMITERS {
        let has_email = header
            .split(char::from(delimiter))
            .any(|field| columns.is_email_column(field.trim().trim_matches('"')));
        if has_email {
            return Ok(delimiter);
        }
    }
    let shown: String = header.chars().take(120).collect();
    Err(invalid_data(format!(
        "line 1: the CSV header has no address column (read with comma, semicolon and tab \
         as the delimiter): {shown:?}; the first line must name the columns, one of them \
         `email` (or `Email Address`, `E-mail`, …), or name it with --column email=HEADER"
    )))
}

/// The whole first line of `reader` (without its line end), read up to the
/// most a record may hold: the delimiter is sniffed over all of it, not
/// over whatever one read of the buffer returned. A longer first line is
/// refused for what it is.
pub(super) fn header_line<R: BufRead>(reader: R) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let limit = super::csv_records::MAX_RECORD_BYTES as u64 + 1;
    reader.take(limit).read_until(b'\n', &mut line)?;
    if line.len() as u64 >= limit && !line.ends_with(b"\n") {
        return Err(invalid_data(format!(
            "line 1: the CSV header is longer than {} bytes (the most a row may hold); \
             nothing was built",
            super::csv_records::MAX_RECORD_BYTES
        )));
    }
    if line.ends_with(b"\n") {
        line.pop();
    }
    Ok(line)
}

/// Read the header row: the column names, and the reader positioned on the
/// first row. `header` is the first line as [`header_line`] read it (from
/// another reader of the same file): its delimiter is sniffed over it.
pub(super) fn csv_header<R: BufRead>(
    reader: R,
    columns: &HeaderPlan,
    header: &[u8],
) -> std::io::Result<(Vec<String>, CsvRecords<R>)> {
    let delimiter = csv_delimiter(header, columns)?;
    let mut records = CsvRecords::new(reader, delimiter, 0, 0);
    let Some(header) = records.next_record()? else {
        return Err(invalid_data("the file is empty".into()));
    };
    if header.line != 1 || header.last_line != 1 || header.text_after_quote {
        return Err(invalid_data(format!(
            "line {}: the CSV header must be the first line, on one line, with well-formed \
             quotes",
            header.line
        )));
    }
    let written: Vec<String> = header
        .fields
        .iter()
        .map(|raw| String::from_utf8_lossy(raw).trim().to_owned())
        .collect();
    let fields = columns
        .field_names(&written)
        .map_err(|reason| invalid_data(format!("line 1: {reason}")))?;
    // A set, not a scan of the names so far: a hostile header of 100,000
    // names was quadratic.
    let mut seen = std::collections::HashSet::with_capacity(fields.len());
    for name in &fields {
        if !name.is_empty() && !seen.insert(name.as_str()) {
            return Err(invalid_data(format!(
                "line 1: the CSV header names the column `{name}` twice"
            )));
        }
    }
    let names = fields;
    records.set_header_len(names.len());
    Ok((names, records))
}

pub(super) fn csv_rows<R: BufRead + Send + 'static>(
    mut records: CsvRecords<R>,
    header: Vec<String>,
) -> impl Iterator<Item = std::io::Result<Entry>> {
    std::iter::from_fn(move || match records.next_record() {
        Err(e) => Some(Err(e)),
        Ok(None) => None,
        Ok(Some(record)) => Some(Ok(csv_entry(&header, record))),
    })
}

/// One CSV record to a recipient or a rejection naming its line. The first
/// pass refused any file with an unterminated or swallowing quote, so every
/// record here is one row.
fn csv_entry(header: &[String], record: RawRecord) -> Entry {
    let line = record.line;
    if let Some(refusal) = record.refusal() {
        return reject(line, None, Reject::BadCsv(refusal));
    }
    if record.fields.len() != header.len() {
        return reject(
            line,
            None,
            Reject::CsvFieldCount {
                found: record.fields.len() as u64,
                expected: header.len() as u64,
            },
        );
    }
    if record.text_after_quote {
        return reject(line, None, Reject::CsvTextAfterQuote);
    }
    let mut fields = Map::new();
    for (name, raw) in header.iter().zip(record.fields) {
        match String::from_utf8(raw) {
            Ok(value) => {
                fields.insert(name.clone(), Value::String(value));
            }
            Err(_) => return reject(line, None, Reject::NotUtf8),
        }
    }
    recipient(line, fields)
}

pub(super) fn invalid_data(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}
