//! Building the HTML of one letter: personalise, then rewrite links.
//!
//! 1. `personalize`: a mailing's creative and subject are compiled once as
//!    minijinja templates ([`Template`]) and rendered per recipient, HTML
//!    auto-escaped for the body and not for the subject. A recipient missing a
//!    field the template uses is an error that names the field.
//! 2. [`rewrite()`]: in the personalised HTML every `http(s)` link in `<a>`,
//!    `<area>` and VML elements (also inside Outlook conditional comments)
//!    becomes a tracked click URL, every `<img src>` a proxied image URL, and
//!    the open pixel goes in before `</body>`. The caller's `replace` callback
//!    mints the token and returns the new URL for each [`FoundLink`].
//!
//! Personalisation runs first because merge fields may build hrefs.
//!
//! 3. [`plan`]: both steps and the text part done once per mailing with
//!    sentinels in place of every per-letter value, then filled per letter
//!    (used only where that gives the same bytes; see the module).
//! 4. [`text_links`]: a plain text part given with the HTML (`POST
//!    /api/letters`), its copies of the HTML's tracked links replaced by
//!    their tracked URLs.
//!
//! # Byte-exactness, and why the rewriter splices
//!
//! Everything in a letter that is not a rewritten URL must stay byte for byte
//! as the author wrote it (CRLF, multi-line tags, quoting, spacing). lol_html
//! re-serialises a whole start tag when one attribute is set, so it is used
//! only to *find* tags, comments and `</body>`; a small scanner
//! (`start_tag`) finds the attribute value inside the tag's raw bytes and the
//! output is the input with those ranges replaced. Conditional comments are
//! parsed the same way, as HTML of their own, with offsets mapped back.

mod address_text;
mod charref;
pub mod link_template;
pub(crate) mod personalize;
pub mod plan;
pub mod rewrite;
pub mod short_letter;
mod start_tag;
pub mod text_links;
pub mod utm;

pub use address_text::registrable_domain;
pub use personalize::{
    count_empty_values, preview, preview_bounded, preview_text, PreviewLimited, PreviewLimits,
    RenderError, Template, TemplateError,
};
pub use rewrite::{
    positions_left_as_written, rewrite, FoundKind, FoundLink, RewriteError, RewriteOptions,
};
