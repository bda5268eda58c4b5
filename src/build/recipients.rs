//! The recipients file: JSON Lines or CSV with a header row. `email` is
//! required; every other field is available to personalisation.
//!
//! A bad line never stops the job: it becomes a [`Rejection`] naming its line
//! and reason, and reading goes on with the next line.

use super::reject::Reject;
use crate::address;
use serde_json::{Map, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One usable recipient.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipient {
    /// 1-based line in the file.
    pub line: u64,
    /// Normalised address.
    pub email: String,
    /// Every field of the line, `email` included (as normalised).
    pub fields: Map<String, Value>,
}

/// A line that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Rejection {
    pub line: u64,
    pub email: Option<String>,
    pub reason: Reject,
}

pub type Entry = Result<Recipient, Rejection>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    JsonLines,
    Csv,
}

impl Format {
    /// By extension; anything else is sniffed from the first byte (`{` means JSON Lines).
    pub fn detect(path: &Path, first_byte: Option<u8>) -> Format {
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
pub struct Recipients {
    entries: Box<dyn Iterator<Item = std::io::Result<Entry>> + Send>,
    /// Bytes consumed so far.
    pub bytes_read: Arc<AtomicU64>,
    /// File size, when known.
    pub total_bytes: Option<u64>,
}

impl Recipients {
    pub fn open(path: &Path) -> std::io::Result<Recipients> {
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
        // Spreadsheet programs often start a UTF-8 file with a byte-order mark.
        if reader.fill_buf()?.starts_with(UTF8_BOM) {
            reader.consume(UTF8_BOM.len());
        }
        let first = reader
            .fill_buf()?
            .iter()
            .copied()
            .find(|b| !b.is_ascii_whitespace());
        let entries: Box<dyn Iterator<Item = std::io::Result<Entry>> + Send> =
            match Format::detect(path, first) {
                Format::JsonLines => Box::new(json_lines(reader)),
                Format::Csv => {
                    let delimiter = csv_delimiter(first_line(reader.fill_buf()?))?;
                    Box::new(csv_rows(reader, delimiter))
                }
            };
        Ok(Recipients {
            entries,
            bytes_read,
            total_bytes,
        })
    }
}

impl Iterator for Recipients {
    /// `Err` is an I/O failure of the file itself (the job cannot go on);
    /// a bad line is `Ok(Err(Rejection))`.
    type Item = std::io::Result<Entry>;
    fn next(&mut self) -> Option<Self::Item> {
        self.entries.next()
    }
}

fn json_lines<R: BufRead + Send + 'static>(
    reader: R,
) -> impl Iterator<Item = std::io::Result<Entry>> {
    reader.lines().enumerate().filter_map(|(index, line)| {
        let number = index as u64 + 1;
        match line {
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                Some(Ok(reject(number, None, Reject::NotUtf8)))
            }
            Err(e) => Some(Err(e)),
            Ok(text) if text.trim().is_empty() => None,
            Ok(text) => Some(Ok(parse_json_line(number, &text))),
        }
    })
}

fn parse_json_line(line: u64, text: &str) -> Entry {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(fields)) => recipient(line, fields),
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

/// The delimiter under which the header row has an `email` column. A header
/// without one under any delimiter is refused before any letter is built:
/// otherwise every line would be rejected, one by one, for "no `email`".
fn csv_delimiter(header: &[u8]) -> std::io::Result<u8> {
    let header = String::from_utf8_lossy(header);
    let header = header.trim_end_matches('\r');
    for (delimiter, _) in CSV_DELIMITERS {
        let has_email = header
            .split(char::from(delimiter))
            .any(|field| field.trim().trim_matches('"').trim() == "email");
        if has_email {
            return Ok(delimiter);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "line 1: the CSV header has no `email` column (read with comma, semicolon and tab \
             as the delimiter): {header:?}; the first line must name the columns, one of them \
             `email`"
        ),
    ))
}

fn csv_rows<R: Read + Send + 'static>(
    reader: R,
    delimiter: u8,
) -> impl Iterator<Item = std::io::Result<Entry>> {
    let mut csv = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .flexible(false)
        .trim(csv::Trim::Headers)
        .from_reader(reader);
    let header = csv.headers().cloned().map_err(|e| e.to_string());
    let mut records = csv.into_records();
    let mut header_reported = false;
    std::iter::from_fn(move || {
        let headers = match &header {
            Ok(headers) => headers,
            // A broken header makes every row unreadable: one rejection, then stop.
            Err(e) if !header_reported => {
                header_reported = true;
                return Some(Ok(reject(1, None, Reject::BadCsvHeader(e.to_string()))));
            }
            Err(_) => return None,
        };
        Some(match records.next()? {
            Ok(record) => {
                let line = record.position().map_or(0, |p| p.line());
                let fields = headers
                    .iter()
                    .zip(record.iter())
                    .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                    .collect();
                Ok(recipient(line, fields))
            }
            Err(e) => csv_error(e),
        })
    })
}

/// A bad row is a rejection; a failing file is an I/O error that ends the job.
fn csv_error(e: csv::Error) -> std::io::Result<Entry> {
    let line = e.position().map_or(0, |p| p.line());
    match e.kind() {
        csv::ErrorKind::Io(_) => Err(std::io::Error::other(e.to_string())),
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => Ok(reject(
            line,
            None,
            Reject::CsvFieldCount {
                found: *len,
                expected: *expected_len,
            },
        )),
        _ => Ok(reject(line, None, Reject::BadCsv(e.to_string()))),
    }
}

fn recipient(line: u64, mut fields: Map<String, Value>) -> Entry {
    let raw = match fields.get("email") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return reject(line, None, Reject::EmailNotString),
        None => return reject(line, None, Reject::NoEmail),
    };
    let email = address::normalize(&raw);
    if let Err(e) = address::validate(&email) {
        return reject(line, Some(raw), Reject::InvalidAddress(e.to_string()));
    }
    if let Err(reason) = super::track_mode::recipient_mode(&fields) {
        return reject(line, Some(email), reason);
    }
    fields.insert("email".to_owned(), Value::String(email.clone()));
    Ok(Recipient {
        line,
        email,
        fields,
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
        Recipients::open(&path)
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
        let err = Recipients::open(&path).err().expect("refused");
        let text = err.to_string();
        assert!(
            text.contains("line 1") && text.contains("no `email` column"),
            "{text}"
        );
        assert!(text.contains("mail|name"), "{text}");
    }
}
