//! Response headers of every stats answer: nothing behind
//! the login is cached or sniffed, and the dashboard's pages run under a
//! strict Content-Security-Policy.
//!
//! The policy also binds the click map: an `<iframe srcdoc>` inherits its
//! parent's policy, so the creative shown there loads no remote image, style
//! sheet or font (`img-src 'self' data:`), and the operator's browser
//! contacts nobody but this server. The frame's sandbox (no
//! `allow-scripts`) keeps the creative's scripts from running at all.

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

/// SHA-256 of the click map frame's `onload` handler (the only script of
/// the dashboard, in `templates/mailing.html`), allowed by hash; a unit test
/// recomputes it from the template so the two cannot drift apart.
const FRAME_RESIZE_HASH: &str = "sha256-yG9x2NIWSyxMP/+ENrH2yaMz1FJCU5KhJxfbwz/EkuA=";

/// SHA-256 of the mailing page's one `<script>` element, which shows the
/// `<time>` elements and the charts' time labels (`<text data-at>`) in the
/// viewer's time zone (the server cannot know it); the same unit test
/// recomputes it.
const LOCAL_TIMES_HASH: &str = "sha256-7GRej99dEwLeOGl466QjHzWoRd3Ea7obH8THBIX0Nf4=";

/// The dashboard's policy as the pages repeat it in a `<meta>` element (so
/// a saved copy opened from disk is bound too): our own inline style sheet
/// and the creative's inline styles, images from here or `data:`, one
/// hashed event handler and one hashed script, forms posting here only.
pub(crate) fn page_policy() -> String {
    format!(
        "default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
         script-src 'unsafe-hashes' '{FRAME_RESIZE_HASH}' '{LOCAL_TIMES_HASH}'; \
         form-action 'self'; base-uri 'none'"
    )
}

/// The header's policy: the page's, and no framing by anyone (which a
/// `<meta>` policy cannot say).
pub(crate) fn content_security_policy() -> String {
    format!("{}; frame-ancestors 'none'", page_policy())
}

/// Adds `Cache-Control: no-store` and `X-Content-Type-Options: nosniff` to
/// every answer, and the policy to HTML pages.
pub(crate) async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let is_html = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/html"));
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if is_html {
        if let Ok(policy) = HeaderValue::from_str(&content_security_policy()) {
            headers.insert(header::CONTENT_SECURITY_POLICY, policy);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use sha2::{Digest, Sha256};

    #[test]
    fn the_policy_allows_exactly_the_templates_handler() {
        let template = include_str!("templates/mailing.html");
        let start = template.find("onload=\"").expect("the frame's handler") + "onload=\"".len();
        let end = start + template[start..].find('"').expect("its closing quote");
        let digest = Sha256::digest(&template.as_bytes()[start..end]);
        let hash = base64::engine::general_purpose::STANDARD.encode(digest);
        assert_eq!(FRAME_RESIZE_HASH, format!("sha256-{hash}"));
        assert_eq!(template.matches("onload=").count(), 1, "one handler only");
        assert_eq!(template.matches("<script").count(), 1, "one script element");
        let start = template.find("<script>").expect("the script") + "<script>".len();
        let end = start + template[start..].find("</script>").expect("its end");
        let digest = Sha256::digest(&template.as_bytes()[start..end]);
        let hash = base64::engine::general_purpose::STANDARD.encode(digest);
        assert_eq!(LOCAL_TIMES_HASH, format!("sha256-{hash}"));
    }
}
