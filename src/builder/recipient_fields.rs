//! One recipient line's fields checked into a [`Recipient`] (its address
//! normalised, no control character where none may be, a valid tracking
//! mode), or a [`Rejection`] naming the line and the reason.

use super::reject::Reject;
use crate::address::Email;
use serde_json::{Map, Value};

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

pub(super) fn recipient(line: u64, mut fields: Map<String, Value>) -> Entry {
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
        Err(e) => return reject(line, Some(raw), Reject::InvalidAddress(e)),
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

pub(super) fn reject(line: u64, email: Option<String>, reason: Reject) -> Entry {
    Err(Rejection {
        line,
        email,
        reason,
    })
}
