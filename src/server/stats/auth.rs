//! Access to the stats routes: bearer token or login cookie (see the parent
//! module's docs).

use super::{StatsError, StatsState};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::Arc;

/// The session cookie's name.
pub const COOKIE: &str = "lt_session";

/// The configured credentials. Cheap to clone.
#[derive(Clone, Default)]
pub struct Auth {
    token: Option<Arc<str>>,
    /// The cookie value a logged-in browser carries, when login is on.
    session: Option<Arc<str>>,
    /// The cookie is sent over https only: the base URL is https, so a
    /// browser that reached the dashboard over plain http must not carry it.
    pub secure_cookie: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secrets.
        f.debug_struct("Auth")
            .field("enabled", &self.token.is_some())
            .field("login", &self.session.is_some())
            .finish()
    }
}

impl Auth {
    pub fn new(api_token: Option<&str>, secret: Option<&str>) -> Auth {
        let token = api_token.map(str::trim).filter(|t| !t.is_empty());
        let secret = secret.filter(|s| !s.is_empty());
        let session = match (token, secret) {
            (Some(token), Some(secret)) => session_value(token, secret),
            _ => None,
        };
        Auth {
            token: token.map(Arc::from),
            session: session.map(Arc::from),
            secure_cookie: false,
        }
    }

    /// False when no API token is configured: everything answers 404.
    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    /// The cookie value for a logged-in browser (for tests and the login).
    pub fn session_cookie(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// True when the request carries the token or a valid session cookie.
    pub fn allows(&self, headers: &HeaderMap) -> bool {
        let Some(token) = self.token.as_deref() else {
            return false;
        };
        if let Some(given) = bearer(headers) {
            if constant_time_eq(given.as_bytes(), token.as_bytes()) {
                return true;
            }
        }
        match (self.session.as_deref(), cookie(headers, COOKIE)) {
            (Some(expected), Some(given)) => {
                constant_time_eq(given.as_bytes(), expected.as_bytes())
            }
            _ => false,
        }
    }

    fn token_matches(&self, given: &str) -> bool {
        self.token
            .as_deref()
            .is_some_and(|t| constant_time_eq(given.trim().as_bytes(), t.as_bytes()))
    }
}

/// HMAC-SHA256(secret, "linktrack-dashboard:" + token), hex.
fn session_value(token: &str, secret: &str) -> Option<String> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).ok()?;
    mac.update(b"linktrack-dashboard:");
    mac.update(token.as_bytes());
    Some(hex::encode(mac.finalize().into_bytes()))
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
pub async fn require(State(state): State<StatsState>, request: Request, next: Next) -> Response {
    if !state.auth.enabled() {
        return StatsError::Off.into_response();
    }
    if state.auth.allows(request.headers()) {
        return next.run(request).await;
    }
    if request.uri().path().starts_with("/api/") || state.auth.session.is_none() {
        StatsError::Unauthorized.into_response()
    } else {
        Redirect::to("/login").into_response()
    }
}

const LOGIN_PAGE: &str = include_str!("templates/login.html");

/// Put before the login form when the token posted was wrong.
const WRONG_TOKEN_MESSAGE: &str =
    "<p role=\"alert\" style=\"color:#b00020\">That token is not right. Try again.</p>\n<form";

/// `GET /login`: the form (404 when the API or the login is off).
pub async fn login_form(State(state): State<StatsState>) -> Result<Html<&'static str>, StatsError> {
    if state.auth.session.is_none() {
        return Err(StatsError::Off);
    }
    Ok(Html(LOGIN_PAGE))
}

#[derive(serde::Deserialize)]
pub struct LoginForm {
    token: String,
}

/// `POST /login`: a correct token sets the session cookie and goes to the index.
pub async fn login(
    State(state): State<StatsState>,
    Form(form): Form<LoginForm>,
) -> Result<Response, StatsError> {
    let Some(session) = state.auth.session.as_deref() else {
        return Err(StatsError::Off);
    };
    if !state.auth.token_matches(&form.token) {
        // A browser posted the form: it gets the form again, saying why.
        let page = LOGIN_PAGE.replacen("<form", WRONG_TOKEN_MESSAGE, 1);
        return Ok((StatusCode::UNAUTHORIZED, Html(page)).into_response());
    }
    let secure = if state.auth.secure_cookie {
        "; Secure"
    } else {
        ""
    };
    let cookie =
        format!("{COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200{secure}");
    let value = HeaderValue::from_str(&cookie)
        .map_err(|e| StatsError::BadRequest(format!("session cookie: {e}")))?;
    let mut response = Redirect::to("/mailings").into_response();
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
        assert!(!auth.allows(&headers(header::AUTHORIZATION, "Bearer ")));
        assert!(Auth::new(Some("  "), None).token.is_none());
    }

    #[test]
    fn bearer_must_match_exactly() {
        let auth = Auth::new(Some("t0ken"), None);
        assert!(auth.allows(&headers(header::AUTHORIZATION, "Bearer t0ken")));
        assert!(auth.allows(&headers(header::AUTHORIZATION, "bearer t0ken")));
        assert!(!auth.allows(&headers(header::AUTHORIZATION, "Bearer t0ke")));
        assert!(!auth.allows(&headers(header::AUTHORIZATION, "Basic t0ken")));
        assert!(!auth.allows(&HeaderMap::new()));
    }

    #[test]
    fn the_cookie_is_an_hmac_that_depends_on_both_values() {
        let auth = Auth::new(Some("t"), Some("s"));
        let session = auth.session_cookie().unwrap().to_owned();
        assert_eq!(session.len(), 64);
        assert_ne!(
            Auth::new(Some("t"), Some("s2")).session_cookie().unwrap(),
            session
        );
        assert_ne!(
            Auth::new(Some("t2"), Some("s")).session_cookie().unwrap(),
            session
        );
        let good = headers(header::COOKIE, &format!("a=b; {COOKIE}={session}"));
        assert!(auth.allows(&good));
        let bad = headers(header::COOKIE, &format!("{COOKIE}={}", &session[1..]));
        assert!(!auth.allows(&bad));
        assert!(Auth::new(Some("t"), None).session_cookie().is_none());
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
