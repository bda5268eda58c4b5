//! The recipients export: one row per letter of a mailing with
//! its engagement, as CSV or JSON lines, streamed a page at a time
//! ([`crate::store::engagement::page`]: keyset-paged by letter id), so memory stays
//! flat whatever the mailing's size. `GET /api/mailings/{id}/recipients`
//! and `linktrack export recipients` both write this stream.
//!
//! Columns: `letter_id`, `address`, `first_open` (UTC; CSV
//! `2026-11-26 09:00:00`, which spreadsheets read as a date and time,
//! JSON RFC 3339), `opens`,
//! `clicks`, `links_clicked` (positions; CSV: separated by spaces),
//! `bot_opens`, `bot_clicks`, `unsubscribed`, `bounced` (refused at
//! hand-over or hard-bounced), `delivered` (empty when linktrack did not
//! send the letter), `complained`, `urls_clicked` (the URLs of the links
//! in `links_clicked`, as the letter has them, in the same order; CSV:
//! separated by spaces), `targets_clicked` (where those clicks went:
//! `POSITION@VERSION` for each version of a link's target a human click
//! reached, version 0 the built URL and 1, 2, … its repoints; CSV:
//! separated by spaces, JSON: objects with the clicks). The column list is a contract: new columns are
//! appended, never renamed or reordered. Opens and clicks are the humans'; the
//! bots' are beside them. Bounces, deliveries and complaints are read from
//! the rows the stats API counts, so the two agree. Letters whose address may
//! not be shown are left out (see [`crate::store::engagement`]).

use crate::mailing_id::MailingId;
use crate::store::engagement::{self, LetterEngagement, PAGE_LETTERS};
use crate::store::StoreError;
use futures_util::stream::{self, Stream};
use sqlx::MySqlPool;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// How the rows are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// RFC 4180 with a header line, every value safe to open in a spreadsheet.
    #[default]
    Csv,
    /// One JSON object per line.
    Jsonl,
}

impl Format {
    /// The media type of the HTTP answer.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Csv => "text/csv; charset=utf-8",
            Format::Jsonl => "application/x-ndjson",
        }
    }

    /// The file name extension.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Jsonl => "jsonl",
        }
    }
}

/// A format name that is neither `csv` nor `jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown export format {0:?} (expected csv or jsonl)")]
pub struct UnknownFormat(pub String);

impl std::str::FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(name: &str) -> Result<Format, UnknownFormat> {
        match name {
            "csv" => Ok(Format::Csv),
            "jsonl" | "ndjson" => Ok(Format::Jsonl),
            other => Err(UnknownFormat(other.to_owned())),
        }
    }
}

/// One piece of the stream: the bytes of one page, and what it held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunk {
    pub bytes: Vec<u8>,
    /// Letters written.
    pub rows: u64,
    /// Letters left out: no address that may be shown.
    pub withheld: u64,
}

/// The CSV header line.
pub const CSV_HEADER: &str = "letter_id,address,first_open,opens,clicks,links_clicked,\
                              bot_opens,bot_clicks,unsubscribed,bounced,delivered,complained,\
                              urls_clicked,targets_clicked\r\n";

/// The other columns of the recipients file a mailing was built from,
/// joined to the export by address (`export recipients --with FILE`).
/// linktrack keeps no recipient's merge fields (a letter's rows hold its
/// address and links, nothing more: docs/operate.md, "Exports"), so the
/// marketer brings the file and the join happens where the file is.
#[derive(Debug, Clone, Default)]
pub struct InputColumns {
    /// The columns appended, in the file's order (the address column
    /// aside; a name an export column has gets `input_` before it).
    pub names: Vec<String>,
    /// Normalised address -> its values, one per name.
    by_address: HashMap<String, Vec<serde_json::Value>>,
    /// Lines of the file that give no usable address (skipped).
    pub unusable_lines: u64,
    /// Addresses given again after their first line (the first wins).
    pub repeated: u64,
}

/// The export's own column names (the CSV header's).
fn export_columns() -> impl Iterator<Item = &'static str> {
    CSV_HEADER.trim_end().split(',')
}

impl InputColumns {
    /// Read `path` as `build` reads a recipients file (CSV with a header, or
    /// JSON Lines; the address column found by the same names, or by
    /// `--column email=HEADER` in `mappings`, and normalised the same way).
    pub fn read(
        path: &std::path::Path,
        mappings: Vec<crate::builder::ColumnMapping>,
    ) -> std::io::Result<InputColumns> {
        let recipients = crate::builder::recipients::Recipients::open_with(path, mappings)?;
        let mut fields: Vec<String> = recipients
            .columns
            .iter()
            .filter(|name| name.as_str() != "email")
            .cloned()
            .collect();
        let mut input = InputColumns::default();
        let mut rows: Vec<(String, serde_json::Map<String, serde_json::Value>)> = Vec::new();
        let mut seen: std::collections::HashSet<String> = Default::default();
        for entry in recipients {
            let Ok(recipient) = entry? else {
                input.unusable_lines += 1;
                continue;
            };
            for name in recipient.fields.keys() {
                if name != "email" && !fields.contains(name) {
                    fields.push(name.clone());
                }
            }
            let address = crate::address::normalize(recipient.email.as_str());
            if !seen.insert(address.clone()) {
                input.repeated += 1;
                continue;
            }
            rows.push((address, recipient.fields));
        }
        input.by_address = rows
            .into_iter()
            .map(|(address, mut values)| {
                let row = fields
                    .iter()
                    .map(|name| values.remove(name).unwrap_or(serde_json::Value::Null))
                    .collect();
                (address, row)
            })
            .collect();
        input.names = fields
            .into_iter()
            .map(|name| {
                if export_columns().any(|own| own == name) {
                    format!("input_{name}")
                } else {
                    name
                }
            })
            .collect();
        Ok(input)
    }

    /// How many addresses the file gives.
    pub fn addresses(&self) -> usize {
        self.by_address.len()
    }

    fn values_of(&self, address: &str) -> Option<&[serde_json::Value]> {
        self.by_address
            .get(&crate::address::normalize(address))
            .map(Vec::as_slice)
    }
}

/// Where the stream is.
enum Cursor {
    Start,
    After(u64),
    Done,
}

/// The export of `mailing_id`, page by page (the CSV header comes with the
/// first chunk). Check that the mailing exists first
/// ([`engagement::mailing_known`]): an unknown one is simply empty here.
pub fn recipients(
    pool: MySqlPool,
    mailing_id: MailingId,
    format: Format,
) -> impl Stream<Item = Result<Chunk, StoreError>> + Send + 'static {
    recipients_paged(pool, mailing_id, format, PAGE_LETTERS)
}

/// [`recipients`] with a page size of its own (tests use small pages to
/// cross page bounds).
pub fn recipients_paged(
    pool: MySqlPool,
    mailing_id: MailingId,
    format: Format,
    page_letters: u32,
) -> impl Stream<Item = Result<Chunk, StoreError>> + Send + 'static {
    recipients_joined(pool, mailing_id, format, page_letters, None)
}

/// [`recipients`] with the other columns of the mailing's recipients file
/// appended to each row ([`InputColumns`]; empty where the file has no
/// such address).
pub fn recipients_with(
    pool: MySqlPool,
    mailing_id: MailingId,
    format: Format,
    input: Arc<InputColumns>,
) -> impl Stream<Item = Result<Chunk, StoreError>> + Send + 'static {
    recipients_joined(pool, mailing_id, format, PAGE_LETTERS, Some(input))
}

fn recipients_joined(
    pool: MySqlPool,
    mailing_id: MailingId,
    format: Format,
    page_letters: u32,
    input: Option<Arc<InputColumns>>,
) -> impl Stream<Item = Result<Chunk, StoreError>> + Send + 'static {
    stream::try_unfold(Cursor::Start, move |cursor| {
        let (pool, mailing_id, input) = (pool.clone(), mailing_id.clone(), input.clone());
        async move {
            let after = match cursor {
                Cursor::Done => return Ok(None),
                Cursor::Start => 0,
                Cursor::After(id) => id,
            };
            let page = engagement::page(&pool, &mailing_id, after, page_letters).await?;
            let mut bytes = Vec::with_capacity(page.rows.len() * 96 + CSV_HEADER.len());
            if matches!(cursor, Cursor::Start) && format == Format::Csv {
                match &input {
                    None => bytes.extend_from_slice(CSV_HEADER.as_bytes()),
                    Some(input) => {
                        let mut header = CSV_HEADER.trim_end().to_owned();
                        for name in &input.names {
                            header.push(',');
                            push_csv_field(&mut header, name);
                        }
                        header.push_str("\r\n");
                        bytes.extend_from_slice(header.as_bytes());
                    }
                }
            }
            for row in &page.rows {
                match &input {
                    None => write_row(&mut bytes, row, format),
                    Some(input) => write_joined_row(&mut bytes, row, format, input),
                }
            }
            let chunk = Chunk {
                bytes,
                rows: page.rows.len() as u64,
                withheld: page.withheld,
            };
            let next = page.next_after.map_or(Cursor::Done, Cursor::After);
            Ok(Some((chunk, next)))
        }
    })
}

/// Append one row in `format`.
pub fn write_row(out: &mut Vec<u8>, row: &LetterEngagement, format: Format) {
    match format {
        Format::Csv => write_csv_row(out, row),
        Format::Jsonl => {
            // Serialising plain numbers, strings and a list cannot fail.
            if serde_json::to_writer(&mut *out, &JsonRow::from(row)).is_ok() {
                out.push(b'\n');
            }
        }
    }
}

/// Append one row in `format` with the input file's columns after it.
fn write_joined_row(
    out: &mut Vec<u8>,
    row: &LetterEngagement,
    format: Format,
    input: &InputColumns,
) {
    let values = input.values_of(&row.address);
    match format {
        Format::Csv => {
            let mut line = Vec::with_capacity(128);
            write_csv_row(&mut line, row);
            line.truncate(line.len().saturating_sub(2));
            let mut extra = String::new();
            for n in 0..input.names.len() {
                extra.push(',');
                match values.and_then(|v| v.get(n)) {
                    Some(serde_json::Value::String(text)) => push_csv_field(&mut extra, text),
                    Some(serde_json::Value::Null) | None => {}
                    Some(other) => push_csv_field(&mut extra, &other.to_string()),
                }
            }
            out.extend_from_slice(&line);
            out.extend_from_slice(extra.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Format::Jsonl => {
            let Ok(serde_json::Value::Object(mut object)) =
                serde_json::to_value(JsonRow::from(row))
            else {
                return;
            };
            for (n, name) in input.names.iter().enumerate() {
                let value = values
                    .and_then(|v| v.get(n))
                    .cloned()
                    .unwrap_or(serde_json::Value::Null);
                object.insert(name.clone(), value);
            }
            if serde_json::to_writer(&mut *out, &object).is_ok() {
                out.push(b'\n');
            }
        }
    }
}

/// A row as JSON: `first_open` in RFC 3339 with milliseconds.
#[derive(serde::Serialize)]
struct JsonRow<'a> {
    letter_id: u64,
    address: &'a str,
    first_open: Option<String>,
    opens: u64,
    clicks: u64,
    links_clicked: &'a [u32],
    bot_opens: u64,
    bot_clicks: u64,
    unsubscribed: bool,
    bounced: bool,
    delivered: Option<bool>,
    complained: bool,
    urls_clicked: &'a [String],
    targets_clicked: &'a [engagement::TargetClicked],
}

impl<'a> From<&'a LetterEngagement> for JsonRow<'a> {
    fn from(row: &'a LetterEngagement) -> JsonRow<'a> {
        JsonRow {
            letter_id: row.letter_id,
            address: &row.address,
            first_open: row.first_open.map(rfc3339),
            opens: row.opens,
            clicks: row.clicks,
            links_clicked: &row.links_clicked,
            bot_opens: row.bot_opens,
            bot_clicks: row.bot_clicks,
            unsubscribed: row.unsubscribed,
            bounced: row.bounced,
            delivered: row.delivered,
            complained: row.complained,
            urls_clicked: &row.urls_clicked,
            targets_clicked: &row.targets_clicked,
        }
    }
}

fn rfc3339(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A time as spreadsheets read a date and time (`2026-11-26 09:00:00`,
/// UTC: ISO 8601 with a space, no zone letter). Excel takes RFC 3339's
/// `T…Z` for text.
fn spreadsheet_time(at: chrono::DateTime<chrono::Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

fn write_csv_row(out: &mut Vec<u8>, row: &LetterEngagement) {
    let mut line = String::with_capacity(96);
    let _ = write!(line, "{},", row.letter_id);
    push_csv_field(&mut line, &row.address);
    line.push(',');
    if let Some(at) = row.first_open {
        line.push_str(&spreadsheet_time(at));
    }
    let _ = write!(line, ",{},{},", row.opens, row.clicks);
    let positions: Vec<String> = row.links_clicked.iter().map(u32::to_string).collect();
    line.push_str(&positions.join(" "));
    let _ = write!(
        line,
        ",{},{},{},{},",
        row.bot_opens, row.bot_clicks, row.unsubscribed, row.bounced
    );
    if let Some(delivered) = row.delivered {
        let _ = write!(line, "{delivered}");
    }
    let _ = write!(line, ",{},", row.complained);
    push_csv_field(&mut line, &spaced_urls(&row.urls_clicked));
    line.push(',');
    let targets: Vec<String> = row
        .targets_clicked
        .iter()
        .map(|t| format!("{}@{}", t.position, t.version))
        .collect();
    line.push_str(&targets.join(" "));
    line.push_str("\r\n");
    out.extend_from_slice(line.as_bytes());
}

/// URLs separated by spaces, as one CSV value: a white space inside a URL
/// (a personalised one may carry it) is percent-encoded, so the spaces
/// only ever separate.
fn spaced_urls(urls: &[String]) -> String {
    let mut joined = String::new();
    for url in urls.iter().filter(|url| !url.is_empty()) {
        if !joined.is_empty() {
            joined.push(' ');
        }
        for c in url.chars() {
            match c {
                ' ' => joined.push_str("%20"),
                '\t' => joined.push_str("%09"),
                '\r' => joined.push_str("%0D"),
                '\n' => joined.push_str("%0A"),
                c => joined.push(c),
            }
        }
    }
    joined
}

/// Append `value` as one CSV field: neutralised for spreadsheets
/// ([`crate::address::csv_safe`], the one neutraliser of every CSV or
/// TSV linktrack writes), then quoted when it holds a comma, quote or
/// line break.
pub fn push_csv_field(line: &mut String, value: &str) {
    let value = crate::address::csv_safe(value);
    if value.contains([',', '"', '\r', '\n']) {
        line.push('"');
        line.push_str(&value.replace('"', "\"\""));
        line.push('"');
    } else {
        line.push_str(&value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn row() -> LetterEngagement {
        LetterEngagement {
            letter_id: 7,
            address: "=HYPERLINK(\"http://x\",\"y\")@example.com".into(),
            first_open: chrono::Utc.with_ymd_and_hms(2026, 11, 26, 9, 0, 0).single(),
            opens: 2,
            clicks: 3,
            links_clicked: vec![1, 3],
            urls_clicked: vec![
                "https://a.example/x?q=1,2".into(),
                "https://b.example/a b".into(),
            ],
            targets_clicked: vec![
                engagement::TargetClicked {
                    position: 1,
                    version: 0,
                    clicks: 1,
                },
                engagement::TargetClicked {
                    position: 1,
                    version: 2,
                    clicks: 1,
                },
                engagement::TargetClicked {
                    position: 3,
                    version: 0,
                    clicks: 1,
                },
            ],
            bot_opens: 1,
            bot_clicks: 0,
            unsubscribed: true,
            bounced: false,
            delivered: None,
            complained: false,
        }
    }

    #[test]
    fn formulas_are_neutralised_and_quoted() {
        let mut out = Vec::new();
        write_row(&mut out, &row(), Format::Csv);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "7,\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")@example.com\",\
             2026-11-26 09:00:00,2,3,1 3,1,0,true,false,,false,\
             \"https://a.example/x?q=1,2 https://b.example/a%20b\",1@0 1@2 3@0\r\n"
        );
        for risky in ["+1@x", "-1@x", "@x", "\tx", "\rx"] {
            assert!(
                crate::address::csv_safe(risky).starts_with('\''),
                "{risky:?}"
            );
        }
        assert_eq!(crate::address::csv_safe("a=b@x"), "a=b@x");
    }

    #[test]
    fn json_lines_carry_the_same_values() {
        let mut out = Vec::new();
        write_row(&mut out, &row(), Format::Jsonl);
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with('\n'));
        let value: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(
            value["address"],
            "=HYPERLINK(\"http://x\",\"y\")@example.com"
        );
        assert_eq!(value["links_clicked"], serde_json::json!([1, 3]));
        assert_eq!(value["first_open"], "2026-11-26T09:00:00.000Z");
        assert_eq!(value["bot_opens"], 1);
    }

    #[test]
    fn formats_are_named_csv_and_jsonl() {
        assert_eq!("csv".parse(), Ok(Format::Csv));
        assert_eq!("jsonl".parse(), Ok(Format::Jsonl));
        assert_eq!(
            "xlsx".parse::<Format>().unwrap_err().to_string(),
            "unknown export format \"xlsx\" (expected csv or jsonl)"
        );
    }
}
