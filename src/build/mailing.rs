//! The mailing file (JSON): what to send and how to track it.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A mailing as the builder uses it, with the HTML loaded.
#[derive(Debug, Clone)]
pub struct Mailing {
    pub mailing_id: String,
    pub subject: String,
    pub from: String,
    pub html: String,
    pub pool: String,
    pub tags: Vec<String>,
    /// Render `html` and `subject` as templates with the recipient's fields.
    pub personalize: bool,
    /// Rewrite `<img src>` to the image proxy.
    pub proxy_images: bool,
    /// Rewrite links, add the pixel and the unsubscribe header, store rows.
    pub track: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MailingFile {
    mailing_id: String,
    subject: String,
    from: String,
    html: Option<String>,
    html_file: Option<PathBuf>,
    #[serde(default = "default_pool")]
    pool: String,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default = "yes")]
    personalize: bool,
    #[serde(default = "yes")]
    proxy_images: bool,
    #[serde(default = "yes")]
    track: bool,
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
    #[error("{path}: line {line}, column {column}: {message}")]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: field `{field}`: {message}")]
    Field {
        path: PathBuf,
        field: &'static str,
        message: String,
    },
}

/// The longest mailing id the `links.mailing_id` column holds.
pub const MAX_MAILING_ID: usize = 64;

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
            message: e.to_string(),
        })?;
        let field = |field, message: &str| MailingError::Field {
            path: path.to_owned(),
            field,
            message: message.to_owned(),
        };
        let id = file.mailing_id.trim();
        if id.is_empty() || id.chars().count() > MAX_MAILING_ID || id.chars().any(char::is_control)
        {
            return Err(field("mailing_id", "must be 1 to 64 printable characters"));
        }
        if file.from.trim().is_empty() {
            return Err(field("from", "must not be empty"));
        }
        let html = match (file.html, file.html_file) {
            (Some(html), None) => html,
            (None, Some(relative)) => {
                let full = path.parent().unwrap_or(Path::new(".")).join(&relative);
                std::fs::read_to_string(&full).map_err(|e| {
                    field("html_file", &format!("cannot read {}: {e}", full.display()))
                })?
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
        Ok(Mailing {
            mailing_id: id.to_owned(),
            subject: file.subject,
            from: file.from,
            html,
            pool: file.pool,
            tags: file.tags,
            personalize: file.personalize,
            proxy_images: file.proxy_images,
            track: file.track,
        })
    }
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
        assert!(m.personalize && m.proxy_images && m.track);
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
}
