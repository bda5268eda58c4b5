//! The suppression list and the tracking opt-out list over the API, as
//! `linktrack suppressions` and `linktrack tracking-optouts` work them
//! (the same store functions, normalisation and refusals): a page of
//! entries by address after a cursor (scope `suppressions:read`), and add,
//! remove and import a CSV body (scope `suppressions:write`). A tracking
//! opt-out reaches every server through the change log, as from the CLI.

use super::caller::ApiCaller;
use super::error::{ApiError, ErrorBody};
use super::json_body::JsonBody;
use crate::address::Email;
use crate::api_keys::Scope;
use crate::server::stats::StatsState;
use crate::store::address_list::{AddressList, Entry, SUPPRESSIONS, TRACKING_OPTOUTS};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::Json;
use chrono::NaiveDateTime;
use std::collections::HashSet;

/// Entries per page unless `limit` says otherwise, and the most it may say.
pub(crate) const DEFAULT_LIMIT: u32 = 100;
pub(crate) const MAX_LIMIT: u32 = 1_000;
/// Addresses one `POST` may name.
const MAX_ADDRESSES: usize = 1_000;
/// Largest CSV body an import reads.
const MAX_IMPORT_BYTES: usize = 16 << 20;
/// The stored note's length (`reason`, `source`: VARCHAR(64)).
const MAX_NOTE_CHARS: usize = 64;
/// Bad rows an import answer names (the count is always whole).
const MAX_BAD_ROWS: usize = 1_000;

/// A page's query: `after` the last address of the page before, `limit`.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct PageParams {
    /// The `next` of the page before (an address); absent: the first page.
    #[serde(default)]
    pub after: Option<String>,
    /// Entries per page, 1 to 1000 (100 when absent).
    #[serde(default)]
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
}

/// The page size a query asks for: 400 naming `limit` when it is no number
/// from 1 to [`MAX_LIMIT`].
pub(crate) fn page_limit(limit: Option<&str>) -> Result<u32, ApiError> {
    let Some(text) = limit else {
        return Ok(DEFAULT_LIMIT);
    };
    match text.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(ApiError::BadRequest(format!(
            "limit: {text:?} is not a whole number from 1 to {MAX_LIMIT}"
        ))),
    }
}

/// A suppressed address.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct SuppressionEntry {
    pub email: String,
    /// `unsubscribe`, `manual`, `import`, `bounce`, `complaint` or the
    /// operator's own word.
    pub reason: String,
    /// UTC, `YYYY-MM-DDTHH:MM:SS`.
    pub created_at: NaiveDateTime,
}

/// A page of the suppression list, by address.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct SuppressionPage {
    pub entries: Vec<SuppressionEntry>,
    /// Pass as `after` for the next page; `null` on the last one.
    pub next: Option<String>,
}

/// An address that withdrew from tracking.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct OptOutEntry {
    pub email: String,
    /// `link` (the letter's own page), `manual` or the operator's word.
    pub source: String,
    /// UTC, `YYYY-MM-DDTHH:MM:SS`.
    pub created_at: NaiveDateTime,
}

/// A page of the tracking opt-out list, by address.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct OptOutPage {
    pub entries: Vec<OptOutEntry>,
    /// Pass as `after` for the next page; `null` on the last one.
    pub next: Option<String>,
}

/// Addresses to add, and the word stored with them.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddBody {
    /// 1 to 1000 addresses; each is normalised as the builder looks it up.
    #[schema(min_items = 1, max_items = 1000)]
    pub addresses: Vec<String>,
    /// The reason (suppressions; `manual` when absent) or the source
    /// (tracking opt-outs; `manual`), 1 to 64 characters.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 64)]
    pub note: Option<String>,
}

/// An address refused: where it was, what it was, why.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct Refused {
    /// `addresses[N]` (from 0) in a JSON body, `line N` in a CSV body.
    pub at: String,
    pub value: String,
    pub error: String,
}

/// What an add or import did.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct AddReport {
    /// Valid addresses taken (each once).
    pub taken: u64,
    /// Of those, how many were new on the list.
    pub added: u64,
    pub already_listed: u64,
    /// Addresses refused, each with its place (the first 1000).
    pub refused: Vec<Refused>,
    /// How many were refused in all.
    pub refused_count: u64,
}

/// What a removal did.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct Removed {
    /// The address, normalised.
    pub email: String,
}

/// The note to store: given, or the list's default; 422 naming `note`.
fn note(given: Option<&str>, default: &str) -> Result<String, ApiError> {
    match given {
        None => Ok(default.to_owned()),
        Some(word) if word.is_empty() || word.chars().count() > MAX_NOTE_CHARS => {
            Err(ApiError::Unprocessable {
                code: "invalid_field",
                message: format!("note: must be 1 to {MAX_NOTE_CHARS} characters"),
            })
        }
        Some(word) if word.chars().any(char::is_control) => Err(ApiError::Unprocessable {
            code: "invalid_field",
            message: "note: control characters are not allowed".into(),
        }),
        Some(word) => Ok(word.to_owned()),
    }
}

/// Each address parsed once ([`Email::parse`]); the others refused with
/// their place.
fn checked<'a>(items: impl Iterator<Item = (String, &'a str)>) -> (Vec<String>, Vec<Refused>) {
    let mut seen = HashSet::new();
    let (mut valid, mut refused) = (Vec::new(), Vec::new());
    for (at, raw) in items {
        match Email::parse(raw) {
            Ok(email) => {
                if seen.insert(email.clone()) {
                    valid.push(email.into_string());
                }
            }
            Err(why) => refused.push(Refused {
                at,
                value: raw.chars().take(320).collect(),
                error: why.to_string(),
            }),
        }
    }
    (valid, refused)
}

async fn add_checked(
    state: &StatsState,
    list: AddressList,
    valid: Vec<String>,
    mut refused: Vec<Refused>,
    note: &str,
) -> Result<AddReport, ApiError> {
    let mut added = 0;
    for chunk in valid.chunks(MAX_ADDRESSES) {
        added += list.add(&state.pool, chunk, note).await?;
    }
    let refused_count = refused.len() as u64;
    refused.truncate(MAX_BAD_ROWS);
    Ok(AddReport {
        taken: valid.len() as u64,
        added,
        already_listed: (valid.len() as u64).saturating_sub(added),
        refused,
        refused_count,
    })
}

async fn add_json(
    state: &StatsState,
    list: AddressList,
    body: AddBody,
    default_note: &str,
) -> Result<AddReport, ApiError> {
    let note = note(body.note.as_deref(), default_note)?;
    if body.addresses.is_empty() || body.addresses.len() > MAX_ADDRESSES {
        return Err(ApiError::Unprocessable {
            code: "invalid_field",
            message: format!("addresses: give 1 to {MAX_ADDRESSES} addresses"),
        });
    }
    let (valid, refused) = checked(
        body.addresses
            .iter()
            .enumerate()
            .map(|(n, raw)| (format!("addresses[{n}]"), raw.as_str())),
    );
    if let (true, Some(first)) = (valid.is_empty(), refused.first()) {
        return Err(ApiError::Unprocessable {
            code: "invalid_address",
            message: format!(
                "{}: {:?} is not an address: {} (no address was valid)",
                first.at, first.value, first.error
            ),
        });
    }
    add_checked(state, list, valid, refused, &note).await
}

/// The addresses of a CSV body, each with its line: the first field of
/// every line (one row a line: an address holds no line break); blank
/// lines, `#` comments and a first-line header (`email`, `address`)
/// skipped. The delimiter is `;` when the first line has one and no `,`.
fn csv_addresses(text: &str) -> Vec<(String, String)> {
    let delimiter = first_line_delimiter(text);
    let mut rows = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line_number = index + 1;
        let content = crate::address::trim(line);
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        let value = first_field(content, delimiter);
        let value = crate::address::trim(&value);
        if line_number == 1
            && matches!(
                value.to_ascii_lowercase().as_str(),
                "email" | "address" | "e-mail" | "email_address"
            )
        {
            continue;
        }
        rows.push((format!("line {line_number}"), value.to_owned()));
    }
    rows
}

/// A line's first field: up to the delimiter, or a quoted field (`""` a
/// quote in it).
fn first_field(line: &str, delimiter: char) -> String {
    let Some(quoted) = line.strip_prefix('"') else {
        return line.split(delimiter).next().unwrap_or_default().to_owned();
    };
    let mut field = String::new();
    let mut chars = quoted.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' {
            if chars.peek() == Some(&'"') {
                chars.next();
                field.push('"');
                continue;
            }
            return field;
        }
        field.push(c);
    }
    field
}

/// `;` when the first line has a `;` and no `,` (a spreadsheet's CSV in
/// much of Europe), else `,`.
fn first_line_delimiter(text: &str) -> char {
    let first = text.lines().next().unwrap_or_default();
    if first.contains(';') && !first.contains(',') {
        ';'
    } else {
        ','
    }
}

async fn import(
    state: &StatsState,
    list: AddressList,
    body: &Bytes,
    note_param: Option<&str>,
    default_note: &str,
) -> Result<AddReport, ApiError> {
    let note = note(note_param, default_note)?;
    if body.len() > MAX_IMPORT_BYTES {
        return Err(ApiError::BadRequest(format!(
            "body: larger than {MAX_IMPORT_BYTES} bytes; split the file"
        )));
    }
    let text = std::str::from_utf8(body).map_err(|err| {
        ApiError::BadRequest(format!("body: not UTF-8 text (byte {})", err.valid_up_to()))
    })?;
    let rows = csv_addresses(text);
    let (valid, refused) = checked(rows.iter().map(|(at, raw)| (at.clone(), raw.as_str())));
    add_checked(state, list, valid, refused, &note).await
}

async fn remove(state: &StatsState, list: AddressList, email: &str) -> Result<Removed, ApiError> {
    let email = crate::address::normalize(email);
    if list
        .remove(&state.pool, std::slice::from_ref(&email))
        .await?
        == 0
    {
        return Err(ApiError::NotFound(format!("{email:?} is not on the list")));
    }
    Ok(Removed { email })
}

async fn page(
    state: &StatsState,
    list: AddressList,
    params: &PageParams,
) -> Result<(Vec<Entry>, Option<String>), ApiError> {
    let limit = page_limit(params.limit.as_deref())?;
    let entries = list
        .page(&state.pool, params.after.as_deref(), limit)
        .await?;
    let next = if entries.len() == limit as usize {
        entries.last().map(|e| e.email.clone())
    } else {
        None
    };
    Ok((entries, next))
}

/// The note of an import: `?note=`.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ImportParams {
    /// The reason or source stored with each address (1 to 64 characters).
    #[serde(default)]
    #[param(min_length = 1, max_length = 64)]
    pub note: Option<String>,
}

/// `GET /api/suppressions`.
#[utoipa::path(
    get,
    path = "/api/suppressions",
    operation_id = "list_suppressions",
    tag = "lists",
    params(PageParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of the suppression list by address (scope suppressions:read)", body = SuppressionPage),
        (status = 400, description = "A bad limit", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn list_suppressions(
    caller: ApiCaller,
    State(state): State<StatsState>,
    Query(params): Query<PageParams>,
) -> Result<Json<SuppressionPage>, ApiError> {
    caller.require(Scope::SuppressionsRead)?;
    let (entries, next) = page(&state, SUPPRESSIONS, &params).await?;
    let entries = entries
        .into_iter()
        .map(|e| SuppressionEntry {
            email: e.email,
            reason: e.note,
            created_at: e.created_at,
        })
        .collect();
    Ok(Json(SuppressionPage { entries, next }))
}

/// `POST /api/suppressions`.
#[utoipa::path(
    post,
    path = "/api/suppressions",
    operation_id = "add_suppressions",
    tag = "lists",
    request_body = AddBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Added (scope suppressions:write); invalid addresses are refused by place, the others added", body = AddReport),
        (status = 400, description = "The body is not the JSON expected", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 422, description = "No valid address, or a bad note", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn add_suppressions(
    caller: ApiCaller,
    State(state): State<StatsState>,
    JsonBody(body): JsonBody<AddBody>,
) -> Result<Json<AddReport>, ApiError> {
    caller.require(Scope::SuppressionsWrite)?;
    Ok(Json(add_json(&state, SUPPRESSIONS, body, "manual").await?))
}

/// `POST /api/suppressions/import`.
#[utoipa::path(
    post,
    path = "/api/suppressions/import",
    operation_id = "import_suppressions",
    tag = "lists",
    params(ImportParams),
    request_body(content = String, content_type = "text/csv",
        description = "One address per line (the first field of each CSV row; a header `email` is skipped)"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Imported (scope suppressions:write): rows taken, and bad rows by line", body = AddReport),
        (status = 400, description = "The body is not UTF-8 or too large", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 422, description = "A bad note", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn import_suppressions(
    caller: ApiCaller,
    State(state): State<StatsState>,
    Query(params): Query<ImportParams>,
    body: Bytes,
) -> Result<Json<AddReport>, ApiError> {
    caller.require(Scope::SuppressionsWrite)?;
    let report = import(
        &state,
        SUPPRESSIONS,
        &body,
        params.note.as_deref(),
        "import",
    )
    .await?;
    Ok(Json(report))
}

/// `DELETE /api/suppressions/{email}`.
#[utoipa::path(
    delete,
    path = "/api/suppressions/{email}",
    operation_id = "remove_suppression",
    tag = "lists",
    params(("email" = String, Path, description = "The address (normalised before it is looked up)")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Taken off the list (scope suppressions:write)", body = Removed),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 404, description = "The address is not on the list", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn remove_suppression(
    caller: ApiCaller,
    State(state): State<StatsState>,
    Path(email): Path<String>,
) -> Result<Json<Removed>, ApiError> {
    caller.require(Scope::SuppressionsWrite)?;
    Ok(Json(remove(&state, SUPPRESSIONS, &email).await?))
}

/// `GET /api/tracking-optouts`.
#[utoipa::path(
    get,
    path = "/api/tracking-optouts",
    operation_id = "list_tracking_optouts",
    tag = "lists",
    params(PageParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of the tracking opt-out list by address (scope suppressions:read)", body = OptOutPage),
        (status = 400, description = "A bad limit", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn list_tracking_optouts(
    caller: ApiCaller,
    State(state): State<StatsState>,
    Query(params): Query<PageParams>,
) -> Result<Json<OptOutPage>, ApiError> {
    caller.require(Scope::SuppressionsRead)?;
    let (entries, next) = page(&state, TRACKING_OPTOUTS, &params).await?;
    let entries = entries
        .into_iter()
        .map(|e| OptOutEntry {
            email: e.email,
            source: e.note,
            created_at: e.created_at,
        })
        .collect();
    Ok(Json(OptOutPage { entries, next }))
}

/// `POST /api/tracking-optouts`.
#[utoipa::path(
    post,
    path = "/api/tracking-optouts",
    operation_id = "add_tracking_optouts",
    tag = "lists",
    request_body = AddBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Added (scope suppressions:write); every server stops tracking them within seconds", body = AddReport),
        (status = 400, description = "The body is not the JSON expected", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 422, description = "No valid address, or a bad note", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn add_tracking_optouts(
    caller: ApiCaller,
    State(state): State<StatsState>,
    JsonBody(body): JsonBody<AddBody>,
) -> Result<Json<AddReport>, ApiError> {
    caller.require(Scope::SuppressionsWrite)?;
    Ok(Json(
        add_json(&state, TRACKING_OPTOUTS, body, "manual").await?,
    ))
}

/// `POST /api/tracking-optouts/import`.
#[utoipa::path(
    post,
    path = "/api/tracking-optouts/import",
    operation_id = "import_tracking_optouts",
    tag = "lists",
    params(ImportParams),
    request_body(content = String, content_type = "text/csv",
        description = "One address per line (the first field of each CSV row; a header `email` is skipped)"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Imported (scope suppressions:write): rows taken, and bad rows by line", body = AddReport),
        (status = 400, description = "The body is not UTF-8 or too large", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 422, description = "A bad note", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn import_tracking_optouts(
    caller: ApiCaller,
    State(state): State<StatsState>,
    Query(params): Query<ImportParams>,
    body: Bytes,
) -> Result<Json<AddReport>, ApiError> {
    caller.require(Scope::SuppressionsWrite)?;
    let report = import(
        &state,
        TRACKING_OPTOUTS,
        &body,
        params.note.as_deref(),
        "manual",
    )
    .await?;
    Ok(Json(report))
}

/// `DELETE /api/tracking-optouts/{email}`.
#[utoipa::path(
    delete,
    path = "/api/tracking-optouts/{email}",
    operation_id = "remove_tracking_optout",
    tag = "lists",
    params(("email" = String, Path, description = "The address (normalised before it is looked up)")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Tracked again as its mailings say (scope suppressions:write)", body = Removed),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 404, description = "The address is not on the list", body = ErrorBody),
        (status = 429, description = "Too many wrong keys", body = ErrorBody),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    )
)]
pub(crate) async fn remove_tracking_optout(
    caller: ApiCaller,
    State(state): State<StatsState>,
    Path(email): Path<String>,
) -> Result<Json<Removed>, ApiError> {
    caller.require(Scope::SuppressionsWrite)?;
    Ok(Json(remove(&state, TRACKING_OPTOUTS, &email).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_csv_body_gives_each_rows_first_field_with_its_line() {
        let rows = csv_addresses("email,name\nann@example.com,Ann\n\n# a note\n\"bob@example.com\",Bob\nnot an address\n");
        let lines: Vec<(&str, &str)> = rows.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(
            lines,
            [
                ("line 2", "ann@example.com"),
                ("line 5", "bob@example.com"),
                ("line 6", "not an address")
            ]
        );
        let semicolons = csv_addresses("ann@example.com;Ann\n");
        assert_eq!(semicolons[0].1, "ann@example.com");
    }

    #[test]
    fn a_limit_is_a_number_from_1_to_1000() {
        assert_eq!(page_limit(None).unwrap(), DEFAULT_LIMIT);
        assert_eq!(page_limit(Some("7")).unwrap(), 7);
        for bad in ["0", "1001", "-1", "ten", ""] {
            let err = page_limit(Some(bad)).unwrap_err().to_string();
            assert!(err.starts_with("limit:"), "{bad}: {err}");
        }
    }
}
