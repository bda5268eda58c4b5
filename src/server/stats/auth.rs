//! Access to the stats routes: the middleware that checks a request's
//! bearer token or login cookie, and the login form, login and logout (see
//! the parent module's docs; the credentials are in `credentials.rs`).

use super::credentials::{cookie, new_session_id, session_hash, Access, COOKIE, SESSION_TTL};
use super::error::StatsError;
use super::state::StatsState;
use crate::server::guesses;
use crate::server::request::{read_body, MAX_FORM_BYTES};
use crate::store::dashboard_sessions;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};

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
        if let Err(blocked) = state.auth.guesses.wrong(client, what).await {
            return guesses::too_many(blocked, StatsError::TooMany);
        }
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
        if let Err(blocked) = state.auth.guesses.wrong(client, "login_form").await {
            let page = LOGIN_PAGE.replacen("<form", TOO_MANY_MESSAGE, 1);
            return Ok(guesses::too_many(blocked, Html(page)));
        }
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
    let value = HeaderValue::from_str(cookie).map_err(StatsError::Cookie)?;
    let mut response = Redirect::to(to).into_response();
    response.headers_mut().insert(header::SET_COOKIE, value);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::super::credentials::{bearer, constant_time_eq, Auth};
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
