//! The mailing file (JSON): what to send and how to track it.

use crate::mailing_id::MailingId;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A mailing as the builder uses it, with the HTML loaded.
#[derive(Debug, Clone)]
pub struct Mailing {
    pub mailing_id: MailingId,
    pub subject: String,
    pub from: String,
    pub html: String,
    /// The file the HTML was read from: `html_file`, or the mailing file.
    pub html_source: PathBuf,
    pub pool: String,
    pub tags: Vec<String>,
    /// Render `html` and `subject` as templates with the recipient's fields.
    pub personalize: bool,
    /// Rewrite `<img src>` to the image proxy.
    pub proxy_images: bool,
    /// What is tracked: clicks, opens, both (`all`), none or anonymously
    /// (`true` is all, `false` none). Each letter has the unsubscribe link
    /// and header in every mode.
    pub track: super::track_mode::TrackMode,
    /// Add a "stop tracking me" line before `</body>` of tracked letters.
    pub stop_tracking_footer: bool,
    /// Add the invisible honeypot link that only scanners follow (in letters
    /// whose links are tracked).
    pub honeypot: bool,
    /// The link-text rule (docs/domains.md): a link whose visible text shows
    /// a URL or domain on another site than the tracking host is left as
    /// written. `false` tracks every link, as filters will then see it.
    pub filter_safe: bool,
    /// Where readers manage their subscription (an `https:` URL or a
    /// `mailto:` address): shown by an unsubscribe link whose row has
    /// expired, which can no longer unsubscribe anyone itself.
    pub list_manage_url: Option<String>,
    /// UTM tags added to every tracked link's target at the redirect
    /// (never written into the letter); `None`: none.
    pub utm: Option<crate::letter::utm::UtmTags>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MailingFile {
    // Platforms often send ids as JSON numbers: accepted and kept as their
    // decimal text, so routes and output do not change.
    #[serde(deserialize_with = "text_or_integer")]
    mailing_id: String,
    subject: String,
    from: String,
    html: Option<String>,
    html_file: Option<PathBuf>,
    #[serde(default = "default_pool", deserialize_with = "text_or_integer")]
    pool: String,
    #[serde(default, deserialize_with = "texts_or_integers")]
    tags: Vec<String>,
    #[serde(default = "yes")]
    personalize: bool,
    #[serde(default = "yes")]
    proxy_images: bool,
    #[serde(default)]
    track: super::track_mode::TrackMode,
    #[serde(default)]
    stop_tracking_footer: bool,
    #[serde(default = "yes")]
    honeypot: bool,
    #[serde(default = "yes")]
    filter_safe: bool,
    list_manage_url: Option<String>,
    utm: Option<crate::letter::utm::UtmTags>,
}

/// A string or an integer JSON number (as its decimal text).
#[derive(Deserialize)]
#[serde(untagged)]
enum TextOrInteger {
    Text(String),
    Unsigned(u64),
    Signed(i64),
}

impl From<TextOrInteger> for String {
    fn from(value: TextOrInteger) -> String {
        match value {
            TextOrInteger::Text(text) => text,
            TextOrInteger::Unsigned(n) => n.to_string(),
            TextOrInteger::Signed(n) => n.to_string(),
        }
    }
}

fn text_or_integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    TextOrInteger::deserialize(d)
        .map(String::from)
        .map_err(|_| serde::de::Error::custom("expected a string or an integer"))
}

fn texts_or_integers<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Vec::<TextOrInteger>::deserialize(d)
        .map(|values| values.into_iter().map(String::from).collect())
        .map_err(|_| serde::de::Error::custom("expected a list of strings or integers"))
}

fn default_pool() -> String {
    "default".to_owned()
}

fn yes() -> bool {
    true
}

/// Why a mailing file cannot be used; always names the file.
#[derive(Debug, thiserror::Error)]
pub enum MailingError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: line {line}, column {column}: {source}")]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: field `mailing_id`: {source}")]
    MailingId {
        path: PathBuf,
        #[source]
        source: crate::mailing_id::MailingIdError,
    },
    #[error("{path}: field `html_file`: cannot read {}: {source}", html.display())]
    HtmlFile {
        path: PathBuf,
        html: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: field `utm`: {source}")]
    Utm {
        path: PathBuf,
        #[source]
        source: crate::letter::utm::UtmError,
    },
    #[error("{path}: field `{field}`: {message}")]
    Field {
        path: PathBuf,
        field: &'static str,
        message: String,
    },
}

impl Mailing {
    /// Read and check a mailing file; `html_file` is relative to it.
    pub fn load(path: &Path) -> Result<Mailing, MailingError> {
        let text = std::fs::read_to_string(path).map_err(|source| MailingError::Read {
            path: path.to_owned(),
            source,
        })?;
        let file: MailingFile = serde_json::from_str(&text).map_err(|e| MailingError::Json {
            path: path.to_owned(),
            line: e.line(),
            column: e.column(),
            source: e,
        })?;
        let field = |field, message: &str| MailingError::Field {
            path: path.to_owned(),
            field,
            message: message.to_owned(),
        };
        // Taken byte for byte (`MailingId::parse`): white space around the
        // id is refused, not trimmed.
        let mailing_id =
            MailingId::parse(&file.mailing_id).map_err(|source| MailingError::MailingId {
                path: path.to_owned(),
                source,
            })?;
        if file.from.trim().is_empty() {
            return Err(field("from", "must not be empty"));
        }
        let (html, html_source) = match (file.html, file.html_file) {
            (Some(html), None) => (html, path.to_owned()),
            (None, Some(relative)) => {
                let full = path.parent().unwrap_or(Path::new(".")).join(&relative);
                let html =
                    std::fs::read_to_string(&full).map_err(|source| MailingError::HtmlFile {
                        path: path.to_owned(),
                        html: full.clone(),
                        source,
                    })?;
                (html, full)
            }
            (Some(_), Some(_)) => {
                return Err(field("html", "give either `html` or `html_file`, not both"))
            }
            (None, None) => {
                return Err(field(
                    "html",
                    "give `html` (inline) or `html_file` (a path)",
                ))
            }
        };
        let list_manage_url = match file.list_manage_url.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(url) if is_list_manage_url(url) => Some(url.to_owned()),
            Some(_) => {
                return Err(field(
                    "list_manage_url",
                    "must be an https:// (or http://) URL or a mailto: address, at most 2048 characters",
                ))
            }
        };
        let utm = file.utm.filter(|tags| !tags.is_empty());
        if let Some(tags) = &utm {
            tags.check().map_err(|source| MailingError::Utm {
                path: path.to_owned(),
                source,
            })?;
        }
        Ok(Mailing {
            utm,
            list_manage_url,
            mailing_id,
            subject: file.subject,
            from: file.from,
            html,
            html_source,
            pool: file.pool,
            tags: file.tags,
            personalize: file.personalize,
            proxy_images: file.proxy_images,
            track: file.track,
            stop_tracking_footer: file.stop_tracking_footer,
            honeypot: file.honeypot,
            filter_safe: file.filter_safe,
        })
    }
}

/// A URL a page may link to: http(s) or mailto, printable, not too long.
fn is_list_manage_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    let scheme_ok = ["https://", "http://", "mailto:"]
        .iter()
        .any(|scheme| lower.starts_with(scheme) && lower.len() > scheme.len());
    scheme_ok && url.len() <= 2048 && !url.chars().any(|c| c.is_control() || c == ' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn loads_html_file_relative_to_the_mailing_and_defaults() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "letter.html", "<p>Hi</p>");
        let path = write(
            dir.path(),
            "m.json",
            r#"{"mailing_id":"w47","subject":"Hi","from":"News <n@example.com>","html_file":"letter.html"}"#,
        );
        let m = Mailing::load(&path).unwrap();
        assert_eq!((m.html.as_str(), m.pool.as_str()), ("<p>Hi</p>", "default"));
        assert!(m.personalize && m.proxy_images);
        assert_eq!(m.track, super::super::track_mode::TrackMode::All);
    }

    #[test]
    fn errors_name_the_file_and_the_field_or_line() {
        let dir = tempfile::tempdir().unwrap();
        let bad_json = write(
            dir.path(),
            "a.json",
            "{\n  \"mailing_id\": \"x\",\n  oops\n}",
        );
        let err = Mailing::load(&bad_json).unwrap_err().to_string();
        assert!(err.contains("a.json: line 3"), "{err}");

        let no_html = write(
            dir.path(),
            "b.json",
            r#"{"mailing_id":"x","subject":"s","from":"f@x.com"}"#,
        );
        let err = Mailing::load(&no_html).unwrap_err().to_string();
        assert!(err.contains("b.json: field `html`"), "{err}");

        let long_id = format!(
            r#"{{"mailing_id":"{}","subject":"s","from":"f","html":""}}"#,
            "x".repeat(65)
        );
        let err = Mailing::load(&write(dir.path(), "c.json", &long_id))
            .unwrap_err()
            .to_string();
        assert!(err.contains("field `mailing_id`"), "{err}");

        let missing = Mailing::load(&dir.path().join("nope.json"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("nope.json: cannot read"), "{missing}");
    }

    #[test]
    fn numeric_ids_and_tags_are_kept_as_their_decimal_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "n.json",
            r#"{"mailing_id":4242,"subject":"s","from":"f@x.com","html":"","pool":7,"tags":[12,"spring",-3]}"#,
        );
        let m = Mailing::load(&path).unwrap();
        assert_eq!(m.mailing_id, "4242");
        assert_eq!(m.pool, "7");
        assert_eq!(m.tags, ["12", "spring", "-3"]);
    }

    #[test]
    fn a_fractional_or_boolean_id_is_refused_with_the_field_named() {
        let dir = tempfile::tempdir().unwrap();
        for (name, id) in [("f.json", "42.5"), ("b.json", "true")] {
            let text = format!(r#"{{"mailing_id":{id},"subject":"s","from":"f","html":""}}"#);
            let err = Mailing::load(&write(dir.path(), name, &text))
                .unwrap_err()
                .to_string();
            assert!(err.contains("expected a string or an integer"), "{err}");
            assert!(err.contains(name), "{err}");
        }
    }
}
