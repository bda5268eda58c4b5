//! The click map's images: the creative's `<img>`s would load
//! from the sender's image hosts, which the dashboard's policy forbids
//! (`img-src 'self' data:`, so the operator's browser contacts nobody
//! else), and showed as broken icons. The server fetches each through its
//! own image proxy (the same SSRF checks, size limit and cache as `/i/`)
//! and writes it into the copy as a `data:` URI; an image that cannot be
//! fetched becomes a neutral placeholder of the same size. The policy is
//! unchanged.

use super::super::image::ImageProxy;
use base64::Engine;
use lol_html::{element, rewrite_str, RewriteStrSettings};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

/// Images inlined per page; past them, placeholders (a page stays small).
const MAX_IMAGES: usize = 40;
/// Largest image inlined (bytes); a larger one gets the placeholder.
const MAX_IMAGE_BYTES: usize = 512 * 1024;
/// The longest the page waits for its images, all together.
const FETCH_DEADLINE: Duration = Duration::from_secs(3);

/// A grey box that says "image", drawn at the `<img>`'s own size.
pub(crate) const PLACEHOLDER: &str = "data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIHdpZHRoPSIxMjAiIGhlaWdodD0iNjAiIHZpZXdCb3g9IjAgMCAxMjAgNjAiIHByZXNlcnZlQXNwZWN0UmF0aW89Im5vbmUiPjxyZWN0IHdpZHRoPSIxMjAiIGhlaWdodD0iNjAiIGZpbGw9IiNlMmU4ZjAiLz48dGV4dCB4PSI2MCIgeT0iMzQiIGZvbnQtZmFtaWx5PSJzYW5zLXNlcmlmIiBmb250LXNpemU9IjEyIiBmaWxsPSIjNzE4MDk2IiB0ZXh0LWFuY2hvcj0ibWlkZGxlIj5pbWFnZTwvdGV4dD48L3N2Zz4=";

/// `html` with every `<img>` shown from a `data:` URI: its picture,
/// fetched through `proxy`, or [`PLACEHOLDER`]. `srcset` is dropped (the
/// browser would try its remote candidates).
pub(crate) async fn inline(html: &str, proxy: Option<&ImageProxy>) -> String {
    let sources = image_sources(html);
    let mut inlined: BTreeMap<String, String> = BTreeMap::new();
    if let Some(proxy) = proxy {
        let wanted: Vec<&String> = sources
            .iter()
            .filter(|src| src.starts_with("https://") || src.starts_with("http://"))
            .take(MAX_IMAGES)
            .collect();
        let fetches = futures_util::future::join_all(
            wanted
                .iter()
                .map(|src| async move { (*src, data_uri(proxy, src).await) }),
        );
        if let Ok(results) = tokio::time::timeout(FETCH_DEADLINE, fetches).await {
            for (src, uri) in results {
                if let Some(uri) = uri {
                    inlined.insert(src.clone(), uri);
                }
            }
        }
    }
    replace_sources(html, &inlined).unwrap_or_else(|err| {
        tracing::warn!(%err, "click map images left as they were");
        html.to_owned()
    })
}

/// The `src` of every `<img>`, once each, in document order.
fn image_sources(html: &str) -> Vec<String> {
    let found: RefCell<Vec<String>> = RefCell::default();
    let _ = rewrite_str(
        html,
        RewriteStrSettings::new().append_element_content_handler(element!("img[src]", |el| {
            if let Some(src) = el.get_attribute("src") {
                let mut found = found.borrow_mut();
                if !found.contains(&src) {
                    found.push(src);
                }
            }
            Ok(())
        })),
    );
    found.into_inner()
}

/// The image as a `data:` URI, if the proxy brings one small enough.
async fn data_uri(proxy: &ImageProxy, url: &str) -> Option<String> {
    match proxy.get(url).await {
        Ok(image) if image.body.len() <= MAX_IMAGE_BYTES => {
            let kind = image.content_type.split(';').next().unwrap_or("").trim();
            if !kind.starts_with("image/") || kind.contains(['"', '<', '>', ' ']) {
                return None;
            }
            let body = base64::engine::general_purpose::STANDARD.encode(&image.body);
            Some(format!("data:{kind};base64,{body}"))
        }
        Ok(_) => None,
        Err(err) => {
            tracing::debug!(%err, url, "click map image shown as a placeholder");
            None
        }
    }
}

fn replace_sources(
    html: &str,
    inlined: &BTreeMap<String, String>,
) -> Result<String, lol_html::errors::RewritingError> {
    rewrite_str(
        html,
        RewriteStrSettings::new().append_element_content_handler(element!("img", |el| {
            let src = el.get_attribute("src").unwrap_or_default();
            if !src.starts_with("data:") {
                let shown = inlined.get(&src).map_or(PLACEHOLDER, String::as_str);
                el.set_attribute("src", shown)?;
                if shown == PLACEHOLDER {
                    el.set_attribute("data-lt-placeholder", "")?;
                }
            }
            el.remove_attribute("srcset");
            Ok(())
        })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn without_a_proxy_every_remote_image_is_the_placeholder() {
        let html = r#"<p><img src="https://img.example/a.png" srcset="https://img.example/a2.png 2x" width="10"><img src="data:image/gif;base64,R0lGOD"></p>"#;
        let out = inline(html, None).await;
        assert_eq!(out.matches(PLACEHOLDER).count(), 1, "{out}");
        assert!(!out.contains("img.example"), "{out}");
        assert!(out.contains("data:image/gif;base64,R0lGOD"), "{out}");
        assert!(out.contains(r#"width="10""#), "{out}");
    }

    #[test]
    fn the_placeholder_is_an_svg_box() {
        let svg = base64::engine::general_purpose::STANDARD
            .decode(PLACEHOLDER.trim_start_matches("data:image/svg+xml;base64,"))
            .unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains(">image</text>"),
            "{svg}"
        );
    }
}
