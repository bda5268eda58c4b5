//! `POST /api/letters` and `POST /api/letters/batch` (scope
//! `letters:write`, docs/api.md "Tracking letters"): letters a sender
//! composed and sends itself (its own MIME, its ESP's API), tracked by the
//! rules of `build` and the relay through the one
//! [`LetterTracker`](crate::builder::tracked_letters::LetterTracker): links
//! rewritten byte-exactly, the pixel, the link-text rule,
//! `data-linktrack="off"`, the tracking modes, a reader who opted out
//! untracked, a suppressed or erased recipient refused. The tracked HTML
//! (and text, when given) comes back with the letter's headers, its rows
//! stored before the answer.
//!
//! A batch answers 200 with one result per letter in its order: a letter
//! that breaks a rule is refused in its place, naming its index and field,
//! and the others are tracked.

use super::caller::ApiCaller;
use super::error::{ApiError, ErrorBody};
use super::json_body::JsonBody;
use super::state::ApiState;
use crate::address::Email;
use crate::api_keys::Scope;
use crate::builder::mailing::Mailing;
use crate::builder::track_mode::TrackMode;
use crate::builder::tracked_letters::{
    LetterRecipient, OneLetter, TrackLetterError, TrackedLetter,
};
use crate::builder::DEFAULT_MAX_LETTER_BYTES;
use crate::letter::text_links::track_text;
use crate::mailing_id::MailingId;
use crate::store::{privacy, suppressions, tracking_optouts};
use axum::extract::State;
use axum::Json;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

/// Letters one batch may hold.
pub(crate) const MAX_LETTERS: usize = 1_000;
/// The largest batch body (the API's other routes take 1 MiB): 1,000
/// letters of 64 KiB of HTML and text each; bigger letters go in smaller
/// batches.
pub(crate) const MAX_BATCH_BYTES: usize = 64 << 20;
/// The largest body of one letter: its HTML and text at their largest
/// (5 MiB each) and the rest.
pub(crate) const MAX_LETTER_BODY_BYTES: usize = 2 * DEFAULT_MAX_LETTER_BYTES + (64 << 10);
/// The longest subject (RFC 5322's line, and the dashboard's column).
const MAX_SUBJECT_CHARS: usize = 998;

/// Why a recipient gets no letter.
const SUPPRESSED: &str = "on the suppression list (unsubscribed, bounced or complained)";
const ERASED: &str = "the address was erased from linktrack";

/// One letter to track.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LetterIn {
    /// The mailing it belongs to (1 to 64 characters, no control
    /// characters or padding): stored the first time the server meets it,
    /// with this letter's subject and HTML for the dashboard.
    pub mailing_id: String,
    /// The recipient's address.
    pub recipient: String,
    /// The sender, `news@example.com` or `News <news@example.com>`: its
    /// domain's tracking domain, if it has one, carries the links.
    pub from: String,
    /// At most 998 characters, on one line.
    pub subject: String,
    /// The letter's HTML (at most 5 MiB).
    pub html: String,
    /// The plain text part (at most 5 MiB): its copies of the HTML's
    /// tracked links become their tracked URLs.
    #[serde(default)]
    pub text: Option<String>,
    /// Tags of the letter's links, as a mailing's `tags`.
    #[serde(default)]
    pub tags: Vec<String>,
    /// What is tracked: `all` (default), `clicks`, `opens`, `none`,
    /// `anonymous` or `last_open_day` (docs/build.md's modes).
    #[serde(default)]
    pub track: Option<String>,
}

/// A batch of letters.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LetterBatch {
    /// 1 to 1,000 letters; each is read on its own, so one that is not a
    /// letter is refused in its place.
    #[schema(value_type = Vec<LetterIn>, min_items = 1, max_items = 1000)]
    pub letters: Vec<Value>,
}

/// What became of a letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LetterStatus {
    /// Tracked: send `html` (and `text`) with `headers`.
    Tracked,
    /// The recipient is suppressed or erased: send nothing.
    Suppressed,
    /// The letter breaks a rule (`error` names the field): nothing stored.
    Refused,
}

/// Why a letter was refused.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct LetterError {
    /// The field, as `letters[3].recipient` (`recipient` for one letter).
    pub field: String,
    /// Always `invalid_field`.
    pub code: String,
    pub message: String,
}

/// One letter's result.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct LetterResult {
    /// Its place in the batch, from 0 (0 for one letter).
    pub index: usize,
    pub status: LetterStatus,
    /// The recipient, normalised (absent when it is not an address).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recipient: Option<String>,
    /// Its letter id (tracked letters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub letter_id: Option<u64>,
    /// The tracked HTML.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    /// The tracked text, when a text was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The mode it was tracked in (`none` for a reader who opted out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub track: Option<String>,
    /// Click links tracked in the HTML.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub links: Option<usize>,
    /// Rows (tokens) stored for this letter: its links, its unsubscribe,
    /// pixel and honeypot links.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<usize>,
    /// Header fields to send it with: `List-Unsubscribe` and
    /// `List-Unsubscribe-Post`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    /// Its VERP envelope sender, when the server has a bounce domain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub envelope_from: Option<String>,
    /// Why a suppressed recipient gets nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why a refused letter was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<LetterError>,
}

/// A batch's results, one per letter in its order, and their counts.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct BatchAnswer {
    pub tracked: usize,
    pub suppressed: usize,
    pub refused: usize,
    pub letters: Vec<LetterResult>,
}

/// `POST /api/letters`: one letter.
#[utoipa::path(
    post,
    path = "/api/letters",
    operation_id = "track_letter",
    tag = "letters",
    request_body = LetterIn,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The letter tracked (status tracked), or not because its recipient is suppressed (status suppressed)", body = LetterResult),
        (status = 400, description = "A body that is not JSON, or over its limit", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope letters:write", body = ErrorBody),
        (status = 422, description = "The letter breaks a rule; the message names the field", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable, or this server's seal key may not seal new tokens (the message says why)", body = ErrorBody),
    )
)]
pub(crate) async fn track_letter(
    caller: ApiCaller,
    State(state): State<ApiState>,
    JsonBody(letter): JsonBody<Value, MAX_LETTER_BODY_BYTES>,
) -> Result<Json<LetterResult>, ApiError> {
    caller.require(Scope::LettersWrite)?;
    let mut results = track_all(&state, vec![letter], "").await?;
    let result = results.pop().ok_or_else(|| {
        ApiError::Unavailable("no result for the letter (a fault of the server)".to_owned())
    })?;
    if let Some(error) = result.error {
        return Err(ApiError::Unprocessable {
            code: "invalid_field",
            message: format!("{}: {}", error.field, error.message),
        });
    }
    Ok(Json(result))
}

/// `POST /api/letters/batch`: up to 1,000 letters, one result each.
#[utoipa::path(
    post,
    path = "/api/letters/batch",
    operation_id = "track_letters",
    tag = "letters",
    request_body = LetterBatch,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "One result per letter in the batch's order: tracked, suppressed, or refused naming its index and field", body = BatchAnswer),
        (status = 400, description = "A body that is not the JSON expected, or over 64 MiB", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope letters:write", body = ErrorBody),
        (status = 422, description = "No letter, or more than 1,000", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable (nothing stored), or this server's seal key may not seal new tokens (the message says why)", body = ErrorBody),
    )
)]
pub(crate) async fn track_letters(
    caller: ApiCaller,
    State(state): State<ApiState>,
    JsonBody(batch): JsonBody<LetterBatch, MAX_BATCH_BYTES>,
) -> Result<Json<BatchAnswer>, ApiError> {
    caller.require(Scope::LettersWrite)?;
    let count = batch.letters.len();
    if count == 0 || count > MAX_LETTERS {
        return Err(ApiError::Unprocessable {
            code: "invalid_field",
            message: format!(
                "letters: 1 to {MAX_LETTERS} letters a call, not {count}; split the batch"
            ),
        });
    }
    let letters = track_all(&state, batch.letters, "letters").await?;
    let counted = |status| letters.iter().filter(|l| l.status == status).count();
    Ok(Json(BatchAnswer {
        tracked: counted(LetterStatus::Tracked),
        suppressed: counted(LetterStatus::Suppressed),
        refused: counted(LetterStatus::Refused),
        letters,
    }))
}

/// A letter whose fields passed the checks.
struct ValidLetter {
    index: usize,
    mailing: Mailing,
    email: String,
    html: String,
    text: Option<String>,
}

/// Every letter's result, in order. `place` is what a field is inside of
/// (`letters` for a batch, nothing for one letter).
async fn track_all(
    state: &ApiState,
    letters: Vec<Value>,
    place: &str,
) -> Result<Vec<LetterResult>, ApiError> {
    let mut results: Vec<Option<LetterResult>> = vec![None; letters.len()];
    let mut valid = Vec::new();
    for (index, value) in letters.into_iter().enumerate() {
        match checked(index, value) {
            Ok(letter) => valid.push(letter),
            Err((field, refusal)) => {
                let field = field_path(place, index, &field);
                results[index] = Some(refused(index, field, refusal.to_string()));
            }
        }
    }
    let pool = &state.stats.pool;
    let emails: Vec<&str> = valid.iter().map(|l| l.email.as_str()).collect();
    let suppressed = suppressions::suppressed_among(pool, &emails).await?;
    let erased = privacy::erased_among(pool, &emails).await?;
    let opted_out: HashSet<String> = tracking_optouts::opted_out_among(pool, &emails).await?;
    let (valid, kept_out): (Vec<ValidLetter>, Vec<ValidLetter>) = valid
        .into_iter()
        .partition(|l| !suppressed.contains(&l.email) && !erased.contains(&l.email));
    for letter in kept_out {
        let reason = if erased.contains(&letter.email) {
            ERASED
        } else {
            SUPPRESSED
        };
        results[letter.index] = Some(LetterResult {
            recipient: Some(letter.email),
            reason: Some(reason.to_owned()),
            ..empty(letter.index, LetterStatus::Suppressed)
        });
    }
    if !valid.is_empty() {
        let tracker = state.letters.tracker().await?;
        let one_letters = valid
            .iter()
            .map(|l| OneLetter {
                mailing: l.mailing.clone(),
                recipient: LetterRecipient {
                    email: l.email.clone(),
                    opted_out: opted_out.contains(&l.email),
                },
                html: vec![l.html.as_str()],
            })
            .collect();
        let tracked = tracker
            .track_each(one_letters)
            .await
            .map_err(|err| match err {
                TrackLetterError::Store(err) => ApiError::Store(err),
                other => ApiError::Failed {
                    what: "tracking the letters",
                    source: other.into(),
                },
            })?;
        for (letter, outcome) in valid.iter().zip(tracked) {
            let result = match outcome {
                Ok(done) => tracked_result(letter, done),
                Err(refusal) => refused(
                    letter.index,
                    field_path(place, letter.index, refused_field(&refusal)),
                    refusal.to_string(),
                ),
            };
            results[letter.index] = Some(result);
        }
    }
    Ok(results
        .into_iter()
        .enumerate()
        .map(|(index, result)| {
            result.unwrap_or_else(|| {
                refused(index, field_path(place, index, ""), "not tracked".into())
            })
        })
        .collect())
}

/// `letters[3].recipient`, `letters[3]`, `recipient`, or `body`.
fn field_path(place: &str, index: usize, field: &str) -> String {
    match (place.is_empty(), field.is_empty()) {
        (true, true) => "body".to_owned(),
        (true, false) => field.to_owned(),
        (false, true) => format!("{place}[{index}]"),
        (false, false) => format!("{place}[{index}].{field}"),
    }
}

/// The field a tracking refusal is about.
fn refused_field(refusal: &TrackLetterError) -> &'static str {
    use crate::builder::mailing_context::PrepareError;
    match refusal {
        TrackLetterError::Prepare(PrepareError::Template { field, .. }) => field,
        _ => "html",
    }
}

fn empty(index: usize, status: LetterStatus) -> LetterResult {
    LetterResult {
        index,
        status,
        recipient: None,
        letter_id: None,
        html: None,
        text: None,
        track: None,
        links: None,
        rows: None,
        headers: None,
        envelope_from: None,
        reason: None,
        error: None,
    }
}

fn refused(index: usize, field: String, message: String) -> LetterResult {
    LetterResult {
        error: Some(LetterError {
            field,
            code: "invalid_field".to_owned(),
            message,
        }),
        ..empty(index, LetterStatus::Refused)
    }
}

fn tracked_result(letter: &ValidLetter, mut done: TrackedLetter) -> LetterResult {
    let html = done.html_parts.pop().unwrap_or_default();
    let text = letter
        .text
        .as_deref()
        .map(|text| track_text(text, &done.links));
    LetterResult {
        recipient: Some(done.email),
        letter_id: Some(done.letter_id),
        html: Some(html),
        text,
        track: Some(done.mode.as_str().to_owned()),
        links: Some(done.links.len()),
        rows: Some(done.rows),
        headers: Some(done.headers),
        envelope_from: done.envelope_from,
        ..empty(letter.index, LetterStatus::Tracked)
    }
}

/// What is wrong with a letter's field; its text is the answer's message.
#[derive(Debug, thiserror::Error)]
enum FieldRefusal {
    /// A rule of this module, said in its own words.
    #[error("{0}")]
    Rule(String),
    #[error(transparent)]
    MailingId(#[from] crate::mailing_id::MailingIdError),
    #[error("not an email address: {0}")]
    Recipient(#[source] crate::address::AddressError),
    #[error(transparent)]
    Track(#[from] crate::builder::track_mode::UnknownMode),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// The letter at `index` read and checked, or the field (relative to
/// the letter; empty: the letter itself) and what is wrong with it.
fn checked(index: usize, value: Value) -> Result<ValidLetter, (String, FieldRefusal)> {
    let letter = read_letter(value)?;
    let bad = |field: &str, refusal: FieldRefusal| (field.to_owned(), refusal);
    let rule = |field: &str, message: String| bad(field, FieldRefusal::Rule(message));
    let mailing_id =
        MailingId::parse(&letter.mailing_id).map_err(|e| bad("mailing_id", e.into()))?;
    let email = Email::parse(&letter.recipient)
        .map_err(|e| bad("recipient", FieldRefusal::Recipient(e)))?;
    check_from(&letter.from).map_err(|message| rule("from", message))?;
    check_subject(&letter.subject).map_err(|message| rule("subject", message))?;
    for (field, text) in [("html", Some(&letter.html)), ("text", letter.text.as_ref())] {
        if let Some(text) = text.filter(|t| t.len() > DEFAULT_MAX_LETTER_BYTES) {
            let size = text.len();
            return Err(rule(
                field,
                format!("{size} bytes, over the limit of {DEFAULT_MAX_LETTER_BYTES}"),
            ));
        }
    }
    let track = match letter.track.as_deref() {
        Some(mode) => TrackMode::parse(mode).map_err(|e| bad("track", e.into()))?,
        None => TrackMode::default(),
    };
    let tags = letter
        .tags
        .iter()
        .map(|tag| tag.trim())
        .filter(|tag| !tag.is_empty())
        .map(str::to_owned)
        .collect();
    let mailing = Mailing {
        mailing_id,
        subject: letter.subject,
        from: letter.from,
        html: String::new(),
        html_source: PathBuf::from("POST /api/letters"),
        pool: "default".to_owned(),
        tags,
        personalize: false,
        proxy_images: true,
        track,
        stop_tracking_footer: false,
        honeypot: true,
        filter_safe: true,
        list_manage_url: None,
        utm: None,
    };
    Ok(ValidLetter {
        index,
        mailing,
        email: email.into_string(),
        html: letter.html,
        text: letter.text,
    })
}

/// The letter's fields, each of its JSON type, before serde reads them:
/// so that what is wrong names its field.
fn read_letter(value: Value) -> Result<LetterIn, (String, FieldRefusal)> {
    const TEXTS: [&str; 5] = ["mailing_id", "recipient", "from", "subject", "html"];
    const OPTIONAL_TEXTS: [&str; 2] = ["text", "track"];
    let Value::Object(fields) = &value else {
        return Err((
            String::new(),
            FieldRefusal::Rule("a letter is a JSON object".to_owned()),
        ));
    };
    for (name, field) in fields {
        let fits = match name.as_str() {
            n if TEXTS.contains(&n) => field.is_string(),
            n if OPTIONAL_TEXTS.contains(&n) => field.is_string() || field.is_null(),
            "tags" => field
                .as_array()
                .is_some_and(|tags| tags.iter().all(Value::is_string)),
            _ => {
                return Err((
                    name.clone(),
                    FieldRefusal::Rule(format!(
                        "unknown field; a letter has {}, {}, tags",
                        TEXTS.join(", "),
                        OPTIONAL_TEXTS.join(", ")
                    )),
                ))
            }
        };
        if !fits {
            let want = if name == "tags" {
                "a list of strings"
            } else {
                "a string"
            };
            return Err((name.clone(), FieldRefusal::Rule(format!("must be {want}"))));
        }
    }
    if let Some(missing) = TEXTS.iter().find(|name| !fields.contains_key(**name)) {
        return Err((
            (*missing).to_owned(),
            FieldRefusal::Rule("missing".to_owned()),
        ));
    }
    serde_json::from_value(value).map_err(|e| (String::new(), e.into()))
}

/// A sender as `build` takes it: a mailbox whose address is one.
fn check_from(from: &str) -> Result<(), String> {
    let mailbox = from
        .parse::<lettre::message::Mailbox>()
        .ok()
        .filter(|_| !from.chars().any(char::is_control));
    let address_fits = mailbox.is_some_and(|m| Email::parse(m.email.as_ref()).is_ok());
    if !address_fits {
        return Err(format!(
            "{from:?} is not an address (`Name <news@example.com>` or `news@example.com`)"
        ));
    }
    Ok(())
}

fn check_subject(subject: &str) -> Result<(), String> {
    let chars = subject.chars().count();
    if chars > MAX_SUBJECT_CHARS {
        return Err(format!(
            "{chars} characters, over the limit of {MAX_SUBJECT_CHARS}"
        ));
    }
    if subject.chars().any(char::is_control) {
        return Err("control characters (a line break, a tab) are not allowed".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn letter() -> Value {
        json!({
            "mailing_id": "m1", "recipient": "Ann@Example.com", "from": "News <news@example.com>",
            "subject": "Hi", "html": "<a href=\"https://example.com/\">x</a>"
        })
    }

    fn field_of(value: Value) -> String {
        checked(0, value)
            .err()
            .map(|(field, _)| field)
            .unwrap_or_default()
    }

    #[test]
    fn a_good_letter_passes_with_its_recipient_normalised() {
        let valid = checked(4, letter()).unwrap();
        assert_eq!(valid.index, 4);
        assert_eq!(valid.email, "ann@example.com");
        assert_eq!(valid.mailing.track, TrackMode::All);
    }

    #[test]
    fn each_broken_field_is_named() {
        let mut cases = Vec::new();
        for (field, bad) in [
            ("recipient", json!("not-an-address")),
            ("recipient", json!(3)),
            ("from", json!("nobody")),
            ("mailing_id", json!("")),
            ("subject", json!("two\nlines")),
            ("track", json!("sometimes")),
            ("tags", json!(["a", 1])),
            ("surprise", json!(1)),
        ] {
            let mut value = letter();
            value[field] = bad;
            cases.push((field, field_of(value)));
        }
        let mut missing = letter();
        missing.as_object_mut().unwrap().remove("html");
        cases.push(("html", field_of(missing)));
        cases.push(("", field_of(json!([1]))));
        for (want, got) in cases {
            assert_eq!(got, want);
        }
    }

    #[test]
    fn field_paths_name_the_place() {
        assert_eq!(field_path("letters", 3, "html"), "letters[3].html");
        assert_eq!(field_path("letters", 3, ""), "letters[3]");
        assert_eq!(field_path("", 0, "html"), "html");
        assert_eq!(field_path("", 0, ""), "body");
    }
}
