//! The tracked URL of a token, by its link's kind: the URL contract the
//! server answers (`/c/`, `/i/`, `/o/….gif`, `/u/`, `/t/`).

use crate::store::links::LinkKind;
use crate::token::Token;

/// The tracked URL of a token (the URL contract: `/c/`, `/i/`, `/o/….gif`, `/u/`, `/t/`).
pub(crate) fn tracked_url(base_url: &str, kind: LinkKind, token: &Token) -> String {
    tracked_url_of(base_url, kind, &token.to_string())
}

pub(super) fn tracked_url_of(base_url: &str, kind: LinkKind, token: &str) -> String {
    let base = base_url.trim_end_matches('/');
    match kind {
        LinkKind::Click | LinkKind::Honeypot => format!("{base}/c/{token}"),
        LinkKind::Image => format!("{base}/i/{token}"),
        LinkKind::Pixel => format!("{base}/o/{token}.gif"),
        LinkKind::Unsubscribe => format!("{base}/u/{token}"),
        LinkKind::OptOut => format!("{base}/t/{token}"),
    }
}
