//! The HTTP handlers. Each one checks the token, finds the link, records
//! the hit and answers; the work lives in [`AppState`] and the modules it uses.

use super::error::ServerError;
use super::hosts::ServedFor;
use super::image::ProxyError;
use super::request::{
    ClickRoute, ImageRoute, OptOutRoute, PixelRoute, RequestMeta, RouteToken, TokenRefusal,
    Tracked, UnsubscribeRoute,
};
use super::state::AppState;
use super::{hits, pages};
use crate::kind::{EventKind, LinkKind};
use crate::store::events::suppress_unsubscribed;
use crate::token::Token;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

/// The smallest transparent GIF: 1×1, 43 bytes.
pub(crate) const PIXEL_GIF: [u8; 43] = [
    0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x01, 0x00, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xff, 0xff, 0xff, 0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3b,
];

/// Headers every tracking answer carries: never cached (each hit must reach
/// us to be counted) and never leaking our URL to the destination.
fn no_store(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// `GET|HEAD /c/{token}`: redirect to the stored URL. A HEAD is answered the
/// same way and journaled as a bot event (link checkers use HEAD), so it is
/// never counted as a person's click.
///
/// Once the link's row is gone, a token sealed with a link template still
/// leads where it did, recorded as a late click: mailing and
/// position only, nobody's address.
///
/// Either way the target is the link's as built unless the sender
/// repointed it since, with the mailing's UTM tags added
/// ([`LinkRules`](super::link_rules::LinkRules)).
pub(crate) async fn click(
    State(state): State<AppState>,
    meta: RequestMeta,
    tracked: Tracked<ClickRoute>,
) -> Result<Response, ServerError> {
    let location = match tracked {
        Tracked::Live { token, link } => {
            if link.kind == LinkKind::Honeypot {
                // Only machines follow the invisible link: nothing to show them.
                hits::journal_honeypot(&state, token, &link, meta);
                return Ok(no_store(StatusCode::NO_CONTENT.into_response()));
            }
            let target =
                state
                    .link_rules
                    .target(&link.mailing_id, link.position, link.letter_id, &link.url);
            let location = redirect_target(&target)?;
            hits::journal_hit(&state, EventKind::Click, token, Some(&*link), meta);
            location
        }
        Tracked::Late {
            token, template, ..
        } => {
            let target =
                state
                    .link_rules
                    .target(&template.mailing_id, template.position, 0, &template.url);
            let location = redirect_target(&target)?;
            hits::journal_late(&state, EventKind::Click, token, &template, meta);
            location
        }
        Tracked::Unreached {
            token, template, ..
        } => {
            let location = redirect_target(&template.url)?;
            journal_unreached(&state, EventKind::Click, token, meta)?;
            location
        }
    };
    Ok(found(location))
}

/// A click's answer, built directly: the same status and headers in the
/// same order as `(StatusCode::FOUND, [(LOCATION, location)])` then
/// [`no_store`] gave, without the tuple's conversions.
fn found(location: HeaderValue) -> Response {
    let mut response = Response::new(axum::body::Body::empty());
    *response.status_mut() = StatusCode::FOUND;
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, location);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// Journal a hit the database could not name (its link's row unread): with
/// its token alone, as an open is, for the replay to name its letter. Not
/// journaled (the journal is full or stopped), it is not answered either:
/// a 503 tells the reader to come back.
fn journal_unreached(
    state: &AppState,
    kind: EventKind,
    token: Token,
    meta: RequestMeta,
) -> Result<(), ServerError> {
    if hits::journal_hit(state, kind, token, None, meta) {
        Ok(())
    } else {
        Err(ServerError::Unavailable(
            "the database is away and the journal took no event".to_owned(),
        ))
    }
}

/// The `Location` for a stored URL. Only http(s) is followed: the builder
/// stores nothing else, and a `javascript:` or `data:` URL that got into the
/// table some other way must not be served from our domain.
fn redirect_target(url: &str) -> Result<HeaderValue, ServerError> {
    let url = header_safe_url(url);
    let http = url.split_once(':').is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
    });
    if !http {
        tracing::warn!("refusing to redirect to a stored non-http(s) URL");
        return Err(ServerError::NotFound);
    }
    let value = match url {
        // A stored URL is nearly always header-safe as it is: its one copy
        // is the header's own.
        Cow::Borrowed(url) => HeaderValue::from_str(url),
        Cow::Owned(url) => HeaderValue::from_maybe_shared(axum::body::Bytes::from(url)),
    };
    value.map_err(|invalid| ServerError::StoredUrl(invalid.into()))
}

/// Percent-encode the bytes a `Location` header cannot carry (non-ASCII,
/// controls, space); everything else is passed through as stored, borrowed
/// when nothing needs encoding.
fn header_safe_url(url: &str) -> Cow<'_, str> {
    let url = url.trim();
    if url.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Cow::Borrowed(url);
    }
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(url.len() + 8);
    for byte in url.bytes() {
        if byte.is_ascii_graphic() {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
    }
    Cow::Owned(out)
}

/// `GET /o/{token}.gif`: the pixel. Opens are the most frequent hit, so an
/// open reads nothing: a well-formed, current token of the pixel's kind is
/// journaled as it is, and the replay looks its link up (in batches) and
/// drops the open if the token names none. A token of another kind is 404
/// and records nothing (the one kind check, [`RouteToken`]); a malformed
/// one, or one past retention, gets the pixel and records nothing.
pub(crate) async fn pixel(
    State(state): State<AppState>,
    meta: RequestMeta,
    served: Option<axum::Extension<ServedFor>>,
    token: Result<RouteToken<PixelRoute>, TokenRefusal>,
) -> Result<Response, ServerError> {
    match token {
        Ok(RouteToken {
            token,
            expired: false,
            checked_at,
            sealed,
            ..
        }) => {
            if let Some(axum::Extension(served)) = &served {
                if !pixel_served(&state, served, sealed.as_ref()).await {
                    return Err(ServerError::NotFound);
                }
            }
            hits::journal_hit_at(&state, EventKind::Open, token, None, meta, checked_at);
        }
        Err(TokenRefusal::WrongKind) => return Err(ServerError::NotFound),
        Ok(_) | Err(TokenRefusal::Malformed) => {}
    }
    Ok(pixel_response())
}

/// Whether an added tracking host serves this pixel: its mailing, known
/// from the token's template when this server holds it (a live mailing's),
/// is the host's sender's. A pixel whose template is not held is judged by
/// the host list alone: an open reads no link.
async fn pixel_served(
    state: &AppState,
    served: &ServedFor,
    sealed: Option<&crate::token::Plaintext>,
) -> bool {
    let template = sealed
        .filter(|plain| plain.template != 0)
        .and_then(|plain| state.offline.get(plain.template));
    match template {
        Some(template) => served.serves(&template.mailing_id, true).await,
        None => true,
    }
}

/// The pixel's answer, built directly: the same headers in the same order
/// as `([(CONTENT_TYPE, "image/gif")], body)` then [`no_store`] gave
/// (`Content-Type`, `Cache-Control`, `Referrer-Policy`), without the
/// `application/octet-stream` the byte body set first and the tuple then
/// replaced, or the checks of a header value given as text (work every
/// open would repeat for the same bytes).
fn pixel_response() -> Response {
    let mut response = Response::new(axum::body::Body::from(axum::body::Bytes::from_static(
        &PIXEL_GIF,
    )));
    // Inserted, not copied from a map built once: a copy has room for its
    // three headers only, and grows (a reallocation) when the layers above
    // add theirs.
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("image/gif"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// `GET /u/{token}`: the confirmation page (a GET never unsubscribes).
/// Once the row is gone, nobody can be unsubscribed by this link: the page
/// says so and names the mailing's list-management contact, if it has one.
pub(crate) async fn unsubscribe_page(
    State(state): State<AppState>,
    tracked: Tracked<UnsubscribeRoute>,
) -> Result<Response, ServerError> {
    let page = match tracked {
        Tracked::Live { link, .. } if !link.email.is_empty() => {
            pages::unsubscribe_confirm(&unsubscribe_target(&link))
        }
        Tracked::Live { link, .. } => nobodys_unsubscribe_page(&state, &link.mailing_id).await,
        Tracked::Late { template, .. } => late_unsubscribe_page(&state, &template).await,
        // The address is in the row, unread: the page names the mailing.
        Tracked::Unreached { template, .. } => {
            pages::unsubscribe_confirm(&pages::UnsubscribeTarget {
                email: "",
                mailing_id: &template.mailing_id,
            })
        }
    };
    Ok(no_store(page.into_response()))
}

/// The page of an unsubscribe link whose row is gone.
async fn late_unsubscribe_page(
    state: &AppState,
    template: &crate::store::link_templates::LinkTemplate,
) -> axum::response::Html<String> {
    nobodys_unsubscribe_page(state, &template.mailing_id).await
}

/// The page of an unsubscribe link that names nobody any more (its row
/// gone, or its address erased): it unsubscribed nobody, and says where
/// the mailing's readers manage their subscription.
async fn nobodys_unsubscribe_page(
    state: &AppState,
    mailing_id: &str,
) -> axum::response::Html<String> {
    let contact = crate::store::stats::list_management(&state.pool, mailing_id);
    // The page is shown even when the contact cannot be read.
    let contact = state.bounded(contact).await.ok().flatten();
    pages::unsubscribe_expired(contact.as_ref())
}

/// `POST /u/{token}`: RFC 8058 one-click (`List-Unsubscribe=One-Click`) or
/// the confirmation form. Any body is accepted: the POST itself is the
/// request. Idempotent.
///
/// If the link is cached but the database is away, the replay applies the
/// suppression later, reading the address from the link's row (the journal
/// holds no address): a one-click unsubscribe is sent once and must not be
/// lost.
pub(crate) async fn unsubscribe(
    State(state): State<AppState>,
    meta: RequestMeta,
    tracked: Tracked<UnsubscribeRoute>,
) -> Result<Response, ServerError> {
    let (token, link) = match tracked {
        // An erased letter's link names nobody: nothing to do or record.
        Tracked::Live { link, .. } if link.email.is_empty() => {
            let page = nobodys_unsubscribe_page(&state, &link.mailing_id).await;
            return Ok(no_store(page.into_response()));
        }
        Tracked::Live { token, link } => (token, link),
        // Nobody to unsubscribe, and nothing recorded: say what happened.
        Tracked::Late { template, .. } => {
            let page = late_unsubscribe_page(&state, &template).await;
            return Ok(no_store(page.into_response()));
        }
        // The replay reads the address from the row and suppresses it.
        Tracked::Unreached {
            token, template, ..
        } => {
            journal_unreached(&state, EventKind::Unsubscribe, token, meta)?;
            let target = pages::UnsubscribeTarget {
                email: "",
                mailing_id: &template.mailing_id,
            };
            return Ok(no_store(pages::unsubscribed(&target).into_response()));
        }
    };
    let emails = [link.email.as_str()];
    let suppress = suppress_unsubscribed(&state.pool, &emails);
    let deferred = match state.bounded(suppress).await {
        Ok(()) => None,
        Err(err) if err.is_unavailable() => Some(err),
        Err(err) => return Err(err),
    };
    let journaled = hits::journal_hit(&state, EventKind::Unsubscribe, token, Some(&*link), meta);
    if let Some(err) = deferred {
        if !journaled {
            return Err(err);
        }
        tracing::warn!(%err, "suppression deferred to the journal replay");
    }
    Ok(no_store(
        pages::unsubscribed(&unsubscribe_target(&link)).into_response(),
    ))
}

/// Whom the unsubscribe pages name: the link's address (masked by the
/// page) and its mailing.
fn unsubscribe_target(link: &super::state::ServedLink) -> pages::UnsubscribeTarget<'_> {
    pages::UnsubscribeTarget {
        email: &link.email,
        mailing_id: &link.mailing_id,
    }
}

/// `GET /t/{token}`: "stop tracking me", the confirmation page. A GET
/// records nothing (link scanners follow every link).
pub(crate) async fn stop_tracking_page(
    tracked: Tracked<OptOutRoute>,
) -> Result<Response, ServerError> {
    opted_out_address(tracked)?;
    Ok(no_store(pages::stop_tracking_confirm().into_response()))
}

/// `POST /t/{token}`: the recipient withdraws from tracking (not from the
/// mailing list): the address goes on `tracking_optouts`, and later builds
/// send it untracked. Idempotent; records no event (it is not a hit).
///
/// A browser's POST from another site (`Sec-Fetch-Site: cross-site`, or an
/// `Origin` other than the base URL's) records nothing: it gets the
/// confirmation page of this site instead (403). Unlike `/u/`, whose RFC
/// 8058 one-click POSTs come from mailbox providers, nothing needs this
/// route cross-site.
pub(crate) async fn stop_tracking(
    State(state): State<AppState>,
    headers: HeaderMap,
    tracked: Tracked<OptOutRoute>,
) -> Result<Response, ServerError> {
    let address = opted_out_address(tracked)?;
    if is_cross_site(&headers, &state.settings.base_url) {
        let page = (StatusCode::FORBIDDEN, pages::stop_tracking_from_elsewhere());
        return Ok(no_store(page.into_response()));
    }
    let email = [crate::address::normalize(&address)];
    state
        .bounded(crate::store::tracking_optouts::add(
            &state.pool,
            &email,
            "link",
        ))
        .await?;
    // This server's own hits honour it at once; the others within their
    // refresh (docs/privacy.md).
    state.privacy.note_opt_out(&email[0]);
    Ok(no_store(pages::tracking_stopped().into_response()))
}

/// Whether a browser sent this request from another site's page: it says
/// so (`Sec-Fetch-Site: cross-site`), or its `Origin` is not the origin of
/// `base_url` (`null`, the origin of sandboxed and privacy-sensitive
/// contexts, is foreign too). A request without either header (a script,
/// an old browser) is not refused on this ground.
fn is_cross_site(headers: &HeaderMap, base_url: &str) -> bool {
    let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if fetch_site.is_some_and(|site| site.eq_ignore_ascii_case("cross-site")) {
        return true;
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    let origin_of = |text: &str| {
        url::Url::parse(text)
            .ok()
            .map(|url| url.origin())
            .filter(url::Origin::is_tuple)
    };
    let ours = origin_of(base_url);
    let theirs = origin.to_str().ok().and_then(origin_of);
    ours.is_none() || theirs.is_none() || ours != theirs
}

/// The address a "stop tracking me" token names. Its kind was checked by
/// the extractor; a row without an address, or one that is gone (opt-out
/// links have no template), names nobody.
fn opted_out_address(tracked: Tracked<OptOutRoute>) -> Result<String, ServerError> {
    match tracked {
        Tracked::Live { link, .. } if !link.email.is_empty() => Ok(link.email.clone()),
        Tracked::Live { .. } => Err(ServerError::NotFound),
        Tracked::Late { .. } => Err(ServerError::Gone),
        Tracked::Unreached { .. } => Err(ServerError::Unavailable(
            "the database is away: the address is not known here".to_owned(),
        )),
    }
}

/// `GET /i/{token}`: the stored image, through the checked proxy.
///
/// Once the row is gone, an image sealed with its template is still
/// proxied (the letter keeps its pictures), recording nothing.
pub(crate) async fn image(
    State(state): State<AppState>,
    meta: RequestMeta,
    tracked: Tracked<ImageRoute>,
) -> Result<Response, ServerError> {
    let url = match &tracked {
        Tracked::Live { token, link } => {
            hits::journal_hit(&state, EventKind::Image, *token, Some(&**link), meta);
            &link.url
        }
        Tracked::Late { template, .. } => &template.url,
        Tracked::Unreached {
            token, template, ..
        } => {
            journal_unreached(&state, EventKind::Image, *token, meta)?;
            &template.url
        }
    };
    let image = state
        .images
        .get(url)
        .await
        .map_err(ServerError::BadGateway)?;
    let content_type = HeaderValue::from_str(&image.content_type).map_err(|source| {
        ServerError::BadGateway(Arc::new(ProxyError::UnusableContentType {
            content_type: image.content_type.clone(),
            source,
        }))
    })?;
    // The body is someone else's: an SVG could carry script, so it must not
    // run or be sniffed as anything else on our domain.
    let response = (
        [
            (header::CONTENT_TYPE, content_type),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; sandbox"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        image.body.clone(),
    )
        .into_response();
    Ok(no_store(response))
}

/// `GET /healthz`: the process is up.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: 200 when the database answers within a second, the
/// journal writes and its filesystem has room, else 503 (naming what is
/// down, never the database's error text: that goes to the log) (a node
/// whose journal cannot write is drained: its events go the slower way,
/// `journal::fallback`). Room has hysteresis: under the low threshold the
/// node is unready until space is back over the higher one, and `detail`
/// says so with the figures.
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let journal_writes = state.recorder.health().is_writable();
    let space = state.recorder.space();
    let probe = crate::store::ping(&state.pool);
    let database = match tokio::time::timeout(Duration::from_secs(1), probe).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(Some(err)),
        Err(_) => Err(None),
    };
    let journal = match (journal_writes, &space) {
        (false, _) => "unwritable",
        (true, Err(_)) => "low_space",
        (true, Ok(())) => "ok",
    };
    let mut body = serde_json::json!({
        "database": if database.is_ok() { "ok" } else { "unavailable" },
        "journal": journal,
    });
    if let Err(low) = &space {
        body["journal_space"] = serde_json::json!({
            "free_bytes": low.free,
            "unready_under_bytes": low.min,
            "ready_over_bytes": low.resume,
        });
        body["detail"] = serde_json::Value::from(low.to_string());
    }
    // The database's error text (user names, hosts) stays in the log.
    if let Err(failure) = &database {
        match failure {
            Some(err) => tracing::warn!(
                error = %crate::error_report::chain(err),
                "/readyz: the database is unavailable"
            ),
            None => tracing::warn!(
                error = "no answer within 1s",
                "/readyz: the database is unavailable"
            ),
        }
        body["detail"] = serde_json::Value::from("database unavailable");
    }
    if let Some(router) = &state.cluster {
        add_topology(&mut body, router.source());
    }
    // Redis only feeds live figures: its absence is reported, but the
    // server stays ready (redirects and events do not need it).
    if let (Ok(()), Some(live)) = (&database, &state.live) {
        let redis = if live.ping().await {
            "ok"
        } else {
            "unavailable"
        };
        body["redis"] = serde_json::Value::from(redis);
    }
    let status = if database.is_ok() && journal_writes && space.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// On a Spider head: where the routed lookups' topology came from
/// (`topology`: `head` or `saved`), and, when from the saved file, when it
/// was saved and a sentence in `detail` (docs/serve.md, "Endpoints").
fn add_topology(body: &mut serde_json::Value, source: crate::store::cluster::TopologySource) {
    use crate::store::cluster::TopologySource;
    match source {
        TopologySource::Head => body["topology"] = serde_json::Value::from("head"),
        TopologySource::Saved { file, saved_at } => {
            body["topology"] = serde_json::Value::from("saved");
            body["topology_saved_at"] = serde_json::Value::from(saved_at.to_rfc3339());
            let said = format!(
                "link lookups use the cluster topology saved at {} in {} (the head could not \
                 be read at start)",
                saved_at.to_rfc3339(),
                file.display()
            );
            let detail = match body["detail"].as_str() {
                Some(before) => format!("{before}; {said}"),
                None => said,
            };
            body["detail"] = serde_json::Value::from(detail);
        }
    }
}

/// `GET /metrics`: Prometheus text format.
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// `GET /demo/{file}`: a picture of the demo's letters, on the demo's
/// stand-in CDN ([`super::serve_demo_images`]), so its proxied images show
/// something.
pub(crate) async fn demo_image(
    axum::extract::Path(file): axum::extract::Path<String>,
) -> Result<Response, ServerError> {
    let bytes = crate::demo::image(&file).ok_or(ServerError::NotFound)?;
    Ok(([(header::CONTENT_TYPE, "image/png")], bytes).into_response())
}

/// Anything else.
pub(crate) async fn not_found() -> ServerError {
    ServerError::NotFound
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer built by hand is the one the generic way gave: status,
    /// headers (names, values and order) and body, byte for byte.
    #[tokio::test]
    async fn the_pixel_answer_is_what_the_tuple_and_no_store_gave() {
        let before =
            no_store(([(header::CONTENT_TYPE, "image/gif")], PIXEL_GIF.as_slice()).into_response());
        let now = pixel_response();
        assert_eq!(now.status(), before.status());
        assert_eq!(now.version(), before.version());
        let pairs = |r: &Response| {
            r.headers()
                .iter()
                .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
                .collect::<Vec<_>>()
        };
        assert_eq!(pairs(&now), pairs(&before));
        assert_eq!(
            pairs(&now)[0],
            ("content-type".to_owned(), b"image/gif".to_vec())
        );
        let body = |r: Response| axum::body::to_bytes(r.into_body(), 1024);
        let (now, before) = (body(now).await.unwrap(), body(before).await.unwrap());
        assert_eq!(now, before);
        assert_eq!(now.as_ref(), PIXEL_GIF.as_slice());
    }

    #[tokio::test]
    async fn a_click_is_answered_as_the_tuple_and_no_store_answered_it() {
        let location = HeaderValue::from_static("https://a.example/x");
        let now = found(location.clone());
        let before = no_store((StatusCode::FOUND, [(header::LOCATION, location)]).into_response());
        assert_eq!(now.status(), before.status());
        assert_eq!(now.headers(), before.headers());
        let order = |r: &Response| r.headers().keys().cloned().collect::<Vec<_>>();
        assert_eq!(order(&now), order(&before));
        let body = |r: Response| axum::body::to_bytes(r.into_body(), 1024);
        assert_eq!(body(now).await.unwrap(), body(before).await.unwrap());
    }

    #[test]
    fn the_pixel_is_a_gif() {
        assert!(PIXEL_GIF.starts_with(b"GIF89a"));
        assert_eq!(PIXEL_GIF.len(), 43);
    }

    #[test]
    fn only_http_urls_are_redirect_targets() {
        assert!(redirect_target("https://a.example/").is_ok());
        assert!(redirect_target("HTTP://a.example/").is_ok());
        for bad in [
            "javascript:alert(1)",
            "data:text/html,x",
            "//evil.example",
            "",
        ] {
            assert!(
                matches!(redirect_target(bad), Err(ServerError::NotFound)),
                "{bad}"
            );
        }
    }

    #[test]
    fn locations_are_made_header_safe() {
        assert_eq!(
            header_safe_url(" https://a.example/x?q=1 "),
            "https://a.example/x?q=1"
        );
        assert_eq!(
            header_safe_url("https://a.example/é"),
            "https://a.example/%C3%A9"
        );
        assert_eq!(
            header_safe_url("https://a.example/a b"),
            "https://a.example/a%20b"
        );
    }

    #[test]
    fn cross_site_posts_are_told_apart() {
        let base = "https://t.example.com";
        let with = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, HeaderValue::from_static(value));
            }
            is_cross_site(&headers, base)
        };
        assert!(!with(&[]), "no browser headers: not refused on this ground");
        assert!(!with(&[
            ("sec-fetch-site", "same-origin"),
            ("origin", "https://t.example.com")
        ]));
        assert!(!with(&[("origin", "https://T.example.com:443")]));
        assert!(with(&[("sec-fetch-site", "cross-site")]));
        assert!(with(&[("origin", "https://evil.example")]));
        assert!(
            with(&[("origin", "http://t.example.com")]),
            "another scheme"
        );
        assert!(with(&[("origin", "null")]));
    }
}
