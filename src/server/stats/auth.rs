//! Access to the stats routes: bearer token or login cookie (see the parent
//! module's docs).

use super::{StatsError, StatsState};
use crate::server::guesses::{self, GuessLimiter};
use crate::server::request::{read_body, MAX_FORM_BYTES};
use crate::store::dashboard_sessions;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use sha2::{Digest, Sha256};
use sqlx::MySqlPool;
use std::sync::Arc;
use std::time::Duration;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "lt_session";

/// How long a login lasts unless the browser logs out first.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// Wrong secrets (tokens posted or sent as bearer, unknown session
/// cookies) one client network may present within [`LOGIN_WINDOW`] before
/// every further attempt answers 429 until a window has passed (the
/// server's one limiter, `server/guesses.rs`).
pub const MAX_FAILED_LOGINS: u32 = guesses::MAX_WRONG_GUESSES;
pub const LOGIN_WINDOW: Duration = guesses::GUESS_WINDOW;

/// The configured credentials. Cheap to clone.
#[derive(Clone, Default)]
pub struct Auth {
    token: Option<Arc<str>>,
    /// The browser login is on (a secret is configured).
    login: bool,
    /// The cookie is sent over https only: the base URL is https, so a
    /// browser that reached the dashboard over plain http must not carry it.
    pub secure_cookie: bool,
    /// Take the client address of the login rate limit from our own
    /// proxy's `X-Forwarded-For` (the server's `--trust-forwarded-for`).
    pub trust_forwarded_for: bool,
    /// How long a new session lasts.
    pub session_ttl: Option<Duration>,
    /// The server's one limiter of wrong secrets (shared with the admin
    /// listener's token check).
    pub guesses: GuessLimiter,
    /// Longest wait for the login form's body.
    pub body_deadline: Option<Duration>,
}

/// What a request's credentials come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Allowed,
    /// No credentials at all (nothing guessed).
    Missing,
    /// A wrong bearer token or an unknown session cookie: a guess.
    Wrong(&'static str),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secrets.
        f.debug_struct("Auth")
            .field("enabled", &self.token.is_some())
            .field("login", &self.login)
            .finish()
    }
}

impl Auth {
    pub fn new(api_token: Option<&str>, secret: Option<&str>) -> Auth {
        let token = api_token.map(str::trim).filter(|t| !t.is_empty());
        let login = token.is_some() && secret.is_some_and(|s| !s.is_empty());
        Auth {
            token: token.map(Arc::from),
            login,
            ..Auth::default()
        }
    }

    /// False when no API token is configured: everything answers 404.
    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    /// Whether the request carries the token or a live session cookie, or
    /// guessed wrong, or brought nothing.
    pub(crate) async fn access(
        &self,
        pool: &MySqlPool,
        headers: &HeaderMap,
    ) -> Result<Access, StatsError> {
        let Some(token) = self.token.as_deref() else {
            return Ok(Access::Missing);
        };
        let mut access = Access::Missing;
        if let Some(given) = bearer(headers) {
            if constant_time_eq(given.as_bytes(), token.as_bytes()) {
                return Ok(Access::Allowed);
            }
            access = Access::Wrong("api_token");
        }
        match cookie(headers, COOKIE) {
            Some(id) if self.login => {
                if dashboard_sessions::is_live(pool, &session_hash(id)).await? {
                    return Ok(Access::Allowed);
                }
                Ok(Access::Wrong("session_cookie"))
            }
            _ => Ok(access),
        }
    }

    fn token_matches(&self, given: &str) -> bool {
        self.token
            .as_deref()
            .is_some_and(|t| constant_time_eq(given.trim().as_bytes(), t.as_bytes()))
    }

    fn cookie_attributes(&self) -> &'static str {
        if self.secure_cookie {
            "; Path=/; HttpOnly; SameSite=Strict; Secure"
        } else {
            "; Path=/; HttpOnly; SameSite=Strict"
        }
    }
}

/// The session id as the database keeps it: its SHA-256, so a copy of the
/// table logs nobody in.
fn session_hash(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// A new session id: 256 bits from the operating system's CSPRNG, hex.
fn new_session_id() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Compares without an early exit (the `subtle` crate), so the time taken
/// does not tell how many leading bytes matched. (The length is not secret.)
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
}

fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Middleware on every protected route: 404 when off; 401 for the API and a
/// redirect to the login form for pages when the request lacks credentials.
pub(crate) async fn require(
    State(state): State<StatsState>,
    request: Request,
    next: Next,
) -> Response {
    if !state.auth.enabled() {
        return StatsError::Off.into_response();
    }
    let client = guesses::client_address(
        state.auth.trust_forwarded_for,
        request.extensions(),
        request.headers(),
    );
    // A blocked network is refused before its credentials are looked at:
    // a right token is no use from it either, and a cookie costs no read.
    if let Err(blocked) = state.auth.guesses.check(client).await {
        return guesses::too_many(blocked, StatsError::TooMany);
    }
    let wrong = match state.auth.access(&state.pool, request.headers()).await {
        Ok(Access::Allowed) => return next.run(request).await,
        Ok(Access::Missing) => None,
        Ok(Access::Wrong(what)) => Some(what),
        Err(e) => return e.into_response(),
    };
    if let Some(what) = wrong {
        state.auth.guesses.wrong(client, what).await;
    }
    if request.uri().path().starts_with("/api/") || !state.auth.login {
        StatsError::Unauthorized.into_response()
    } else if wrong == Some("session_cookie") {
        // An ended session: the browser forgets its cookie, so its next
        // pages are not counted as guesses again.
        let cookie = format!("{COOKIE}=; Max-Age=0{}", state.auth.cookie_attributes());
        redirect_with_cookie("/login", &cookie).unwrap_or_else(IntoResponse::into_response)
    } else {
        Redirect::to("/login").into_response()
    }
}

const LOGIN_PAGE: &str = include_str!("templates/login.html");

/// Put before the login form when the token posted was wrong.
const WRONG_TOKEN_MESSAGE: &str =
    "<p role=\"alert\" style=\"color:#b00020\">That token is not right. Try again.</p>\n<form";

/// Put before the login form when the address is over the limit.
const TOO_MANY_MESSAGE: &str =
    "<p role=\"alert\" style=\"color:#b00020\">Too many wrong tokens from this address. Wait and try again.</p>\n<form";

/// `GET /login`: the form (404 when the API or the login is off).
pub(crate) async fn login_form(
    State(state): State<StatsState>,
) -> Result<Html<&'static str>, StatsError> {
    if !state.auth.login {
        return Err(StatsError::Off);
    }
    Ok(Html(LOGIN_PAGE))
}

/// `GET /`: where the dashboard is, when it is on: the login form, or,
/// without one (no `LINKTRACK_SECRET`), the mailings page, which takes the
/// bearer token. Off, `/` is unknown (404) like every dashboard path.
pub(crate) async fn home(State(state): State<StatsState>) -> Result<Redirect, StatsError> {
    match (state.auth.enabled(), state.auth.login) {
        (false, _) => Err(StatsError::Off),
        (true, true) => Ok(Redirect::to("/login")),
        (true, false) => Ok(Redirect::to("/mailings")),
    }
}

#[derive(serde::Deserialize)]
pub(crate) struct LoginForm {
    token: String,
}

/// The login form's fields (`application/x-www-form-urlencoded`).
fn parse_login_form(bytes: &[u8]) -> Result<LoginForm, StatsError> {
    let mut token = None;
    for (name, value) in url::form_urlencoded::parse(bytes) {
        if name == "token" {
            token = Some(value.into_owned());
        }
    }
    token
        .map(|token| LoginForm { token })
        .ok_or_else(|| StatsError::BadRequest("the login form has no token field".to_owned()))
}

/// `POST /login`: a correct token starts a new session (a new random id on
/// every login) and goes to the index; wrong tokens are counted per client
/// network and answered 429 with `Retry-After` past the limit. Whether the
/// form is on, and whether the network is blocked, is settled before the
/// body is read; the body is read within a size and a deadline.
pub(crate) async fn login(
    State(state): State<StatsState>,
    request: Request,
) -> Result<Response, StatsError> {
    if !state.auth.login {
        return Err(StatsError::Off);
    }
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    let client =
        guesses::client_address(state.auth.trust_forwarded_for, &parts.extensions, &headers);
    if let Err(blocked) = state.auth.guesses.check(client).await {
        let page = LOGIN_PAGE.replacen("<form", TOO_MANY_MESSAGE, 1);
        return Ok(guesses::too_many(blocked, Html(page)));
    }
    let deadline = state
        .auth
        .body_deadline
        .unwrap_or(crate::server::request::DEFAULT_BODY_DEADLINE);
    let form = match read_body(&headers, body, MAX_FORM_BYTES, deadline).await {
        Ok(bytes) => parse_login_form(&bytes)?,
        Err(refused) => return Ok(refused.into_response()),
    };
    if !state.auth.token_matches(&form.token) {
        state.auth.guesses.wrong(client, "login_form").await;
        // A browser posted the form: it gets the form again, saying why.
        let page = LOGIN_PAGE.replacen("<form", WRONG_TOKEN_MESSAGE, 1);
        return Ok((StatusCode::UNAUTHORIZED, Html(page)).into_response());
    }
    // A cookie the browser brought from before is ended: a login always
    // starts a fresh session (no fixation).
    if let Some(old) = cookie(&headers, COOKIE) {
        dashboard_sessions::delete(&state.pool, &session_hash(old)).await?;
    }
    let ttl = state.auth.session_ttl.unwrap_or(SESSION_TTL);
    let id = new_session_id();
    dashboard_sessions::create(&state.pool, &session_hash(&id), ttl).await?;
    let cookie = format!(
        "{COOKIE}={id}; Max-Age={}{}",
        ttl.as_secs(),
        state.auth.cookie_attributes()
    );
    redirect_with_cookie("/mailings", &cookie)
}

/// `POST /logout`: ends the session on the server and clears the cookie.
pub(crate) async fn logout(
    State(state): State<StatsState>,
    headers: HeaderMap,
) -> Result<Response, StatsError> {
    if !state.auth.login {
        return Err(StatsError::Off);
    }
    if let Some(id) = cookie(&headers, COOKIE) {
        dashboard_sessions::delete(&state.pool, &session_hash(id)).await?;
    }
    let cookie = format!("{COOKIE}=; Max-Age=0{}", state.auth.cookie_attributes());
    redirect_with_cookie("/login", &cookie)
}

fn redirect_with_cookie(to: &str, cookie: &str) -> Result<Response, StatsError> {
    let value = HeaderValue::from_str(cookie)
        .map_err(|e| StatsError::BadRequest(format!("session cookie: {e}")))?;
    let mut response = Redirect::to(to).into_response();
    response.headers_mut().insert(header::SET_COOKIE, value);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: header::HeaderName, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn off_without_a_token_even_with_a_secret() {
        let auth = Auth::new(None, Some("s"));
        assert!(!auth.enabled());
        assert!(!auth.login);
        assert!(Auth::new(Some("  "), None).token.is_none());
        assert!(!Auth::new(Some("t"), None).login);
        assert!(Auth::new(Some("t"), Some("s")).login);
    }

    #[test]
    fn bearer_is_read_case_insensitively_and_whole() {
        assert_eq!(
            bearer(&headers(header::AUTHORIZATION, "Bearer t0ken")),
            Some("t0ken")
        );
        assert_eq!(
            bearer(&headers(header::AUTHORIZATION, "bearer t0ken")),
            Some("t0ken")
        );
        assert_eq!(bearer(&headers(header::AUTHORIZATION, "Basic t0ken")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn session_ids_are_random_and_stored_only_hashed() {
        let (a, b) = (new_session_id(), new_session_id());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert_ne!(session_hash(&a), session_hash(&b));
        assert_ne!(hex::encode(session_hash(&a)), a);
        let jar = headers(header::COOKIE, &format!("a=b; {COOKIE}={a}"));
        assert_eq!(cookie(&jar, COOKIE), Some(a.as_str()));
    }

    #[test]
    fn the_login_form_is_read_by_field() {
        assert_eq!(
            parse_login_form(b"a=1&token=t%2B0+k").unwrap().token,
            "t+0 k"
        );
        assert!(parse_login_form(b"tok=x").is_err());
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
