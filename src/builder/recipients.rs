//! The recipients file: JSON Lines or CSV with a header row. `email` is
//! required; every other field is available to personalisation.
//!
//! A bad line never stops the job: it becomes a [`Rejection`] naming its line
//! and reason, and reading goes on with the next line.

use super::columns::HeaderPlan;
use super::csv_records::{CsvRecords, RawRecord};
use super::reject::Reject;
use crate::address::Email;
use serde_json::{Map, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One usable recipient.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Recipient {
    /// 1-based line in the file.
    pub line: u64,
    /// The address, normalised and checked.
    pub email: Email,
    /// Every field of the line, `email` included (as normalised).
    pub fields: Map<String, Value>,
}

/// A line that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Rejection {
    pub line: u64,
    pub email: Option<String>,
    pub reason: Reject,
}

pub(crate) type Entry = Result<Recipient, Rejection>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    JsonLines,
    Csv,
}

impl Format {
    /// By extension; anything else is sniffed from the first byte (`{` means JSON Lines).
    pub(crate) fn detect(path: &Path, first_byte: Option<u8>) -> Format {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("csv") => Format::Csv,
            Some("jsonl" | "ndjson" | "json") => Format::JsonLines,
            _ if first_byte == Some(b'{') => Format::JsonLines,
            _ => Format::Csv,
        }
    }
}

/// Counts bytes read, so a progress bar can follow a file of unknown line count.
struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// An open recipients file.
pub(crate) struct Recipients {
    entries: Box<dyn Iterator<Item = std::io::Result<Entry>> + Send>,
    /// Bytes consumed so far.
    pub bytes_read: Arc<AtomicU64>,
    /// File size, when known.
    pub total_bytes: Option<u64>,
}

impl Recipients {
    /// Open a recipients file. A CSV file is read through once first: a
    /// quote that never closes or that swallows further rows refuses the
    /// whole file here, before any letter is built (see [`csv_records`]).
    pub(crate) fn open(path: &Path, columns: &HeaderPlan) -> std::io::Result<Recipients> {
        let (mut reader, bytes_read, total_bytes) = open_counted(path)?;
        let first = reader
            .fill_buf()?
            .iter()
            .copied()
            .find(|b| !b.is_ascii_whitespace());
        let entries: Box<dyn Iterator<Item = std::io::Result<Entry>> + Send> =
            match Format::detect(path, first) {
                Format::JsonLines => Box::new(json_lines(reader, columns.clone())),
                Format::Csv => {
                    let (check, _, _) = open_counted(path)?;
                    let (_, mut records) = csv_header(check, columns)?;
                    if let Some(refusal) = records.check_rest()? {
                        return Err(invalid_data(refusal.to_string()));
                    }
                    let (header, records) = csv_header(reader, columns)?;
                    Box::new(csv_rows(records, header))
                }
            };
        Ok(Recipients {
            entries,
            bytes_read,
            total_bytes,
        })
    }
}

type CountedReader = BufReader<Counting<std::fs::File>>;

/// The file, buffered and counting its bytes, past any byte-order mark;
/// a binary or compressed file is refused here in one line.
fn open_counted(path: &Path) -> std::io::Result<(CountedReader, Arc<AtomicU64>, Option<u64>)> {
    let file = std::fs::File::open(path)?;
    let total_bytes = file.metadata().ok().map(|m| m.len());
    let bytes_read = Arc::new(AtomicU64::new(0));
    let mut reader = BufReader::with_capacity(
        256 * 1024,
        Counting {
            inner: file,
            read: Arc::clone(&bytes_read),
        },
    );
    let head = reader.fill_buf()?;
    if let Some(kind) = binary_kind(head) {
        return Err(invalid_data(format!(
            "this is {kind}, not a CSV or JSON Lines file of recipients: give the recipients as \
             CSV (UTF-8) or JSON Lines"
        )));
    }
    // Spreadsheet programs often start a UTF-8 file with a byte-order mark.
    if head.starts_with(UTF8_BOM) {
        reader.consume(UTF8_BOM.len());
    }
    Ok((reader, bytes_read, total_bytes))
}

/// What a file that is not text is, by its first bytes.
fn binary_kind(head: &[u8]) -> Option<&'static str> {
    const MAGIC: [(&[u8], &str); 9] = [
        (b"\x1f\x8b", "a gzip-compressed file"),
        (
            b"PK\x03\x04",
            "a ZIP archive (an .xlsx or .ods spreadsheet is one)",
        ),
        (b"\xd0\xcf\x11\xe0", "an Excel 97-2003 (.xls) spreadsheet"),
        (b"BZh", "a bzip2-compressed file"),
        (b"\xfd7zXZ\x00", "an xz-compressed file"),
        (b"\x28\xb5\x2f\xfd", "a zstd-compressed file"),
        (b"%PDF-", "a PDF document"),
        (b"\xff\xfe", "UTF-16 text (save it as UTF-8)"),
        (b"\xfe\xff", "UTF-16 text (save it as UTF-8)"),
    ];
    if let Some((_, kind)) = MAGIC.iter().find(|(magic, _)| head.starts_with(magic)) {
        return Some(kind);
    }
    // No text file names its columns with a NUL, or holds many: a stray
    // NUL in a row is that row's rejection, not the file's refusal.
    let sample = &head[..head.len().min(8192)];
    let nuls = sample.iter().filter(|&&b| b == 0).count();
    let nul_in_first_line = first_line(sample).contains(&0);
    (nul_in_first_line || nuls >= 16).then_some("a binary file (it holds NUL bytes)")
}

fn invalid_data(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

impl Iterator for Recipients {
    /// `Err` is an I/O failure of the file itself (the job cannot go on);
    /// a bad line is `Ok(Err(Rejection))`.
    type Item = std::io::Result<Entry>;
    fn next(&mut self) -> Option<Self::Item> {
        self.entries.next()
    }
}

/// JSON Lines, each line read to at most
/// `csv_records::MAX_RECORD_BYTES`: a longer one is a rejected row (the
/// rest of it skipped unread into memory), the others go on (issue 43).
fn json_lines<R: BufRead + Send + 'static>(
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
            let reason = format!("the line is longer than {MAX} bytes");
            return Some(Ok(reject(number, None, Reject::BadJson(reason))));
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
        Err(e) => reject(line, None, Reject::BadJson(e.to_string())),
    }
}

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// The delimiters a recipients CSV may use: comma, semicolon (where the comma
/// is the decimal mark), tab.
const CSV_DELIMITERS: [(u8, &str); 3] = [(b',', "comma"), (b';', "semicolon"), (b'\t', "tab")];

fn first_line(buffer: &[u8]) -> &[u8] {
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

/// Read the header row: the column names, and the reader positioned on the
/// first row.
fn csv_header<R: BufRead>(
    mut reader: R,
    columns: &HeaderPlan,
) -> std::io::Result<(Vec<String>, CsvRecords<R>)> {
    let delimiter = csv_delimiter(first_line(reader.fill_buf()?), columns)?;
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
    // names was quadratic (83 s; issue 43).
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

fn csv_rows<R: BufRead + Send + 'static>(
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
        return reject(line, None, Reject::BadCsv(refusal.to_string()));
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
        return reject(
            line,
            None,
            Reject::BadCsv(
                "text after a closing quote (write a quote inside a quoted field as \"\")".into(),
            ),
        );
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

fn recipient(line: u64, mut fields: Map<String, Value>) -> Entry {
    let raw = match fields.get("email") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return reject(line, None, Reject::EmailNotString),
        None => return reject(line, None, Reject::NoEmail),
    };
    if let Some(reason) = control_character(&fields) {
        return reject(line, Some(raw), reason);
    }
    let email = match Email::parse(&raw) {
        Ok(email) => email,
        Err(e) => return reject(line, Some(raw), Reject::InvalidAddress(e.to_string())),
    };
    if let Err(reason) = super::track_mode::recipient_mode(&fields) {
        return reject(line, Some(email.into_string()), reason);
    }
    fields.insert("email".to_owned(), Value::String(email.as_str().to_owned()));
    Ok(Recipient {
        line,
        email,
        fields,
    })
}

/// The first control character in a field that cannot hold one: any in a
/// header field, NUL in any field.
fn control_character(fields: &Map<String, Value>) -> Option<Reject> {
    fields.iter().find_map(|(name, value)| {
        let text = value.as_str()?;
        let header = super::reject::HEADER_FIELDS.contains(&name.as_str());
        let found = if header {
            // Surrounding whitespace (a trailing CR or tab) is trimmed from
            // an address; inside, or in a name, it is refused.
            let text = if name == "email" { text.trim() } else { text };
            text.chars().find(|c| c.is_control())
        } else {
            text.chars().find(|&c| c == '\0')
        }?;
        Some(Reject::ControlCharacter {
            field: name.clone(),
            found,
        })
    })
}

fn reject(line: u64, email: Option<String>, reason: Reject) -> Entry {
    Err(Rejection {
        line,
        email,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(name: &str, text: &str) -> Vec<Entry> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        Recipients::open(&path, &HeaderPlan::default())
            .unwrap()
            .map(|e| e.unwrap())
            .collect()
    }

    #[test]
    fn json_lines_keep_going_after_bad_lines() {
        let entries = read(
            "r.jsonl",
            "{\"email\":\"Ann@Example.com\",\"first_name\":\"Ann\"}\n\n{oops\n[1]\n{\"name\":\"x\"}\n{\"email\":\"not-an-address\"}\n{\"email\":\"山田@example.jp\",\"first_name\":\"太郎\"}\n",
        );
        assert_eq!(entries.len(), 6, "the blank line is skipped");
        let ok: Vec<&Recipient> = entries.iter().filter_map(|e| e.as_ref().ok()).collect();
        assert_eq!(
            ok.iter()
                .map(|r| (r.line, r.email.as_str()))
                .collect::<Vec<_>>(),
            [(1, "ann@example.com"), (7, "山田@example.jp")]
        );
        assert_eq!(ok[1].fields["first_name"], "太郎");
        let bad: Vec<(u64, &Reject)> = entries
            .iter()
            .filter_map(|e| e.as_ref().err())
            .map(|r| (r.line, &r.reason))
            .collect();
        assert!(matches!(bad[0], (3, Reject::BadJson(_))), "{bad:?}");
        assert_eq!(bad[1], (4, &Reject::NotJsonObject));
        assert_eq!(bad[2], (5, &Reject::NoEmail));
        assert!(matches!(bad[3], (6, Reject::InvalidAddress(_))), "{bad:?}");
        assert!(bad[3].1.to_string().contains("invalid address"));
    }

    #[test]
    fn csv_rows_carry_their_line_numbers_and_fields() {
        let entries = read(
            "r.csv",
            "email,first_name,city\nann@example.com,Ann,Oslo\nbad-row-with,too,many,fields\n\"bo@example.com\",\"Bø, Jr.\",Bergen\n",
        );
        assert_eq!(entries.len(), 3);
        let first = entries[0].as_ref().unwrap();
        assert_eq!(
            (first.line, first.fields["city"].as_str()),
            (2, Some("Oslo"))
        );
        let bad = entries[1].as_ref().unwrap_err();
        assert_eq!(bad.line, 3);
        assert_eq!(
            bad.reason,
            Reject::CsvFieldCount {
                found: 4,
                expected: 3
            }
        );
        assert!(
            bad.reason
                .to_string()
                .contains("4 fields where the header has 3"),
            "{}",
            bad.reason
        );
        let third = entries[2].as_ref().unwrap();
        assert_eq!(
            (third.line, third.fields["first_name"].as_str()),
            (4, Some("Bø, Jr."))
        );
    }

    #[test]
    fn format_is_detected_by_extension_then_content() {
        assert_eq!(Format::detect(Path::new("a.csv"), Some(b'{')), Format::Csv);
        assert_eq!(
            Format::detect(Path::new("a.ndjson"), Some(b'e')),
            Format::JsonLines
        );
        assert_eq!(
            Format::detect(Path::new("a.txt"), Some(b'{')),
            Format::JsonLines
        );
        assert_eq!(Format::detect(Path::new("a"), Some(b'e')), Format::Csv);
    }

    #[test]
    fn semicolon_and_tab_separated_files_are_read_by_their_header() {
        for (name, text) in [
            ("s.csv", "email;first_name;amount\na@example.com;Jo;1,5\n"),
            (
                "t.csv",
                "email\tfirst_name\tamount\na@example.com\tJo\t1,5\n",
            ),
            (
                "q.csv",
                "\"first_name\";\"email\"\n\"Jo\";\"a@example.com\"\n",
            ),
        ] {
            let entries = read(name, text);
            let Ok(r) = &entries[0] else {
                panic!("{name}: {entries:?}")
            };
            assert_eq!(r.email, "a@example.com", "{name}");
            assert_eq!(r.fields["first_name"], "Jo", "{name}");
        }
        let entries = read("s.csv", "email;amount\na@example.com;1,5\n");
        assert!(matches!(&entries[0], Ok(r) if r.fields["amount"] == "1,5"));
    }

    #[test]
    fn a_byte_order_mark_does_not_hide_the_email_column() {
        let entries = read("bom.csv", "\u{feff}email,name\na@example.com,Jo\n");
        assert!(
            matches!(&entries[0], Ok(r) if r.email == "a@example.com"),
            "{entries:?}"
        );
        let entries = read("bom.jsonl", "\u{feff}{\"email\":\"a@example.com\"}\n");
        assert!(
            matches!(&entries[0], Ok(r) if r.email == "a@example.com"),
            "{entries:?}"
        );
    }

    #[test]
    fn a_header_without_email_under_any_delimiter_is_refused_up_front() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        std::fs::write(&path, "mail|name\na@example.com|Jo\n").unwrap();
        let err = Recipients::open(&path, &HeaderPlan::default())
            .err()
            .expect("refused");
        let text = err.to_string();
        assert!(
            text.contains("line 1") && text.contains("no address column"),
            "{text}"
        );
        assert!(text.contains("mail|name"), "{text}");
    }

    #[test]
    fn a_json_line_over_the_limit_is_a_rejected_row_and_the_rest_go_on() {
        let long = format!(
            "{{\"email\":\"a@example.com\",\"x\":\"{}\"}}",
            "x".repeat(2 << 20)
        );
        let text = format!("{long}\n{{\"email\":\"b@example.com\"}}\n");
        let entries: Vec<Entry> = json_lines(
            std::io::Cursor::new(text.into_bytes()),
            HeaderPlan::default(),
        )
        .map(Result::unwrap)
        .collect();
        assert_eq!(entries.len(), 2);
        let first = format!("{:?}", entries[0]);
        assert!(first.contains("longer than 1048576 bytes"), "{first}");
        let second = format!("{:?}", entries[1]);
        assert!(second.contains("b@example.com"), "{second}");
    }
}
