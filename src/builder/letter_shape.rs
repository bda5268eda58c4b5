//! A letter's shape (which tracking steps run, which parts go before
//! `</body>`: one plan per shape) and the HTML of those parts: the
//! honeypot, the stop-tracking footer and the pixel.

/// What decides a letter's structure besides its values: which tracking
/// steps run and which parts go before `</body>`. One plan per shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LetterShape {
    pub(super) rewritten: bool,
    pub(super) links: bool,
    /// Images through the proxy (not in `last_open_day` letters).
    pub(super) images: bool,
    pub(super) honeypot: bool,
    pub(super) footer: bool,
    pub(super) pixel: bool,
}

/// The slots of the tail before `</body>`, in this order.
pub(super) const TAIL_HONEYPOT: usize = 0;
pub(super) const TAIL_FOOTER: usize = 1;
pub(super) const TAIL_PIXEL: usize = 2;

/// What goes before `</body>`: the honeypot, the opt-out footer, the pixel,
/// each where the shape has it, with `urls` in the `TAIL_*` slots.
pub(super) fn tail_html(shape: LetterShape, urls: &[String; 3]) -> String {
    let mut tail = String::new();
    if shape.honeypot {
        tail.push_str(&honeypot_html(&urls[TAIL_HONEYPOT]));
    }
    if shape.footer {
        tail.push_str(&stop_tracking_footer(&urls[TAIL_FOOTER]));
    }
    if shape.pixel {
        tail.push_str(&pixel_html(&urls[TAIL_PIXEL]));
    }
    tail
}

fn pixel_html(url: &str) -> String {
    format!(
        r#"<img src="{url}" width="1" height="1" alt="" style="display:block;border:0;width:1px;height:1px" />{}"#,
        unlisted_link(url)
    )
}

/// The honeypot link: an `<area>` outside any `<map>`, which no browser
/// draws, no keyboard reaches and no accessibility tree holds, and which
/// text browsers (`lynx -dump`, `w3m -dump`) do not list, unlike an
/// `<a>` however hidden (checked in `tests/it/filters.rs`); a scanner that
/// walks the letter's hrefs follows it. It points to linktrack itself
/// (`/c/`, served as a honeypot), never to the sender's site; the text part
/// leaves it out.
fn honeypot_html(url: &str) -> String {
    unlisted_link(url)
}

/// An `href` no reader sees or follows (see [`honeypot_html`]). Beside the
/// pixel it gives the pixel's URL a twin, so the letter's count of URLs
/// keeps its parity (rspamd's `URI_COUNT_ODD` counts an `<img>` but not a
/// lone `<area>`; docs/domains.md).
fn unlisted_link(url: &str) -> String {
    format!(
        r#"<area href="{url}" aria-hidden="true" tabindex="-1" alt="" style="display:none;mso-hide:all" />"#
    )
}

/// The optional footer (`stop_tracking_footer`): one short line before
/// `</body>`, its link ours, so never rewritten.
fn stop_tracking_footer(url: &str) -> String {
    format!(
        r#"<p style="font-size:12px;line-height:16px;color:#666666;text-align:center">Prefer not to have opens and clicks of these emails recorded? <a href="{url}" style="color:#666666">Stop tracking me</a></p>"#
    )
}
