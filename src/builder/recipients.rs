//! The recipients file: JSON Lines or CSV with a header row. `email` is
//! required; every other field is available to personalisation.
//!
//! A bad line never stops the job: it becomes a `Rejection` naming its line
//! and reason, and reading goes on with the next line. This file opens the
//! file (its format, its byte count, a binary file refused);
//! `recipient_lines.rs` reads its lines, `recipient_fields.rs` checks each.

use super::columns::HeaderPlan;
use super::recipient_fields::Entry;
use super::recipient_lines::{
    csv_header, csv_rows, first_line, header_line, invalid_data, json_lines,
};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
    /// A CSV file's columns as fields, in the header's order (the address
    /// column as `email`); empty for JSON Lines.
    pub columns: Vec<String>,
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
        let mut fields = Vec::new();
        let entries: Box<dyn Iterator<Item = std::io::Result<Entry>> + Send> =
            match Format::detect(path, first) {
                Format::JsonLines => Box::new(json_lines(reader, columns.clone())),
                Format::Csv => {
                    let header = header_line(open_counted(path)?.0)?;
                    let (check, _, _) = open_counted(path)?;
                    let (_, mut records) = csv_header(check, columns, &header)?;
                    if let Some(refusal) = records.check_rest()? {
                        return Err(invalid_data(refusal.to_string()));
                    }
                    let (header, records) = csv_header(reader, columns, &header)?;
                    fields.clone_from(&header);
                    Box::new(csv_rows(records, header))
                }
            };
        Ok(Recipients {
            entries,
            bytes_read,
            total_bytes,
            columns: fields,
        })
    }

    /// Open a recipients file as `build` reads it, its address column
    /// found the same way (a platform's name, or `--column email=HEADER`
    /// in `mappings`), for reading its other columns back
    /// (`export recipients --with`).
    pub(crate) fn open_with(
        path: &Path,
        mappings: Vec<super::columns::ColumnMapping>,
    ) -> std::io::Result<Recipients> {
        let plan = HeaderPlan {
            mappings,
            ..HeaderPlan::default()
        };
        Recipients::open(path, &plan)
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

impl Iterator for Recipients {
    /// `Err` is an I/O failure of the file itself (the job cannot go on);
    /// a bad line is `Ok(Err(Rejection))`.
    type Item = std::io::Result<Entry>;
    fn next(&mut self) -> Option<Self::Item> {
        self.entries.next()
    }
}

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::recipient_fields::Recipient;
    use crate::builder::reject::Reject;

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
    fn the_delimiter_is_sniffed_over_the_whole_header_and_a_longer_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        // The address column past the first 256 KiB a read returns.
        let names: Vec<String> = (0..40_000).map(|n| format!("col{n:0>6}")).collect();
        let header = format!("{};email", names.join(";"));
        assert!(header.len() > 256 * 1024 && header.len() < 1 << 20);
        let row = format!("{};a@example.com", vec!["x"; 40_000].join(";"));
        std::fs::write(&path, format!("{header}\n{row}\n")).unwrap();
        let entries: Vec<Entry> = Recipients::open(&path, &HeaderPlan::default())
            .unwrap()
            .entries
            .map(Result::unwrap)
            .collect();
        assert_eq!(entries.len(), 1);
        let first: String = format!("{:?}", entries[0]).chars().take(300).collect();
        assert!(first.contains("a@example.com"), "{first}");

        // 40,001 columns of 28 bytes: over the limit, refused for that.
        let names: Vec<String> = (0..40_001).map(|n| format!("column_{n:0>20}")).collect();
        let header = format!("email,{}", names.join(","));
        assert!(header.len() > 1 << 20);
        std::fs::write(&path, format!("{header}\na@example.com\n")).unwrap();
        let err = Recipients::open(&path, &HeaderPlan::default())
            .err()
            .expect("refused");
        let text = err.to_string();
        assert!(
            text.contains("line 1") && text.contains("header is longer than"),
            "{text}"
        );
        assert!(!text.contains("no address column"), "{text}");
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
        let first = entries[0].as_ref().err().map(|r| r.reason.to_string());
        assert_eq!(
            first.as_deref(),
            Some("bad JSON: the line is longer than 1048576 bytes")
        );
        let second = format!("{:?}", entries[1]);
        assert!(second.contains("b@example.com"), "{second}");
    }
}
