//! How a verdict's reason is stored in `events.bot_reason`, and the one
//! mapping between that and the reason every other part of linktrack
//! sees ([`crate::event::EventRow::bot_reason`], `None` for a person).
//!
//! The column is ASCII `CHAR(32) NOT NULL`, `''` for none (migration
//! 20261230000001): a fixed length, so the settle pass's verdict updates
//! (`UPDATE events SET bot = …, bot_reason = …`, `verdicts.rs`) leave a
//! `ROW_FORMAT=COMPRESSED` row's length as it is and stay in place, where
//! a `VARCHAR … NULL` reason changing length rewrote the record in its
//! compressed page. The set of reasons stays open: any reason of up to 32
//! ASCII bytes is stored as it is, with no list to extend or code to
//! allocate. Every producer (`bots`, `bots::letter_judgement`, the click
//! handler's `honeypot`) makes ASCII codes such as `ua:curl`, `walk` or
//! `proxy:gmail`; anything else is made storable by [`stored`].
//!
//! Writers store [`stored`]; readers select `read_bot_reason!`, which
//! gives the reason or `NULL`, as the column did before.

use std::borrow::Cow;

/// The longest stored reason, in bytes (the column's `CHAR(32)`).
pub const MAX_LEN: usize = 32;

/// The column as a reader selects it: the reason, or `NULL` for none. With
/// a table alias, `read_bot_reason!(e)` reads `e.bot_reason`.
macro_rules! read_bot_reason {
    () => {
        "NULLIF(bot_reason, '')"
    };
    ($alias:ident) => {
        concat!("NULLIF(", stringify!($alias), ".bot_reason, '')")
    };
}
pub(crate) use read_bot_reason;

/// The stored form of `reason`: `''` for none; a byte outside printable
/// ASCII becomes `?` (a multi-byte character one `?` per byte), and the
/// reason is cut at [`MAX_LEN`] bytes, so no reason can fail an insert.
pub fn stored(reason: Option<&str>) -> Cow<'_, str> {
    let Some(reason) = reason else {
        return Cow::Borrowed("");
    };
    let printable = |b: &u8| b.is_ascii_graphic() || *b == b' ';
    if reason.len() <= MAX_LEN && reason.bytes().all(|b| printable(&b)) {
        return Cow::Borrowed(reason);
    }
    Cow::Owned(
        reason
            .bytes()
            .take(MAX_LEN)
            .map(|b| if printable(&b) { b as char } else { '?' })
            .collect(),
    )
}

/// The reason `stored` holds, as a reader sees it through
/// `read_bot_reason!` (`''` is none). For the stored form read as it is.
pub fn from_stored(stored: Option<String>) -> Option<String> {
    stored.filter(|reason| !reason.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_is_empty_and_every_reason_made_today_is_stored_as_it_is() {
        assert_eq!(stored(None), "");
        for reason in [
            "ua:facebookexternalhit",
            "machine:apple_mpp",
            "proxy:gmail",
            "honeypot",
            "time_of_click",
            "walk",
            "burst",
            "net:microsoft",
        ] {
            assert!(matches!(stored(Some(reason)), Cow::Borrowed(r) if r == reason));
            assert_eq!(
                from_stored(Some(stored(Some(reason)).into_owned())).as_deref(),
                Some(reason)
            );
        }
        assert_eq!(from_stored(Some(String::new())), None);
        assert_eq!(from_stored(None), None);
    }

    #[test]
    fn a_reason_the_column_cannot_hold_is_made_storable() {
        assert_eq!(stored(Some("ua:é")), "ua:??");
        assert_eq!(stored(Some("a\tb")), "a?b");
        let long = "x".repeat(40);
        assert_eq!(stored(Some(&long)).len(), MAX_LEN);
    }

    #[test]
    fn readers_select_the_reason_or_null() {
        assert_eq!(read_bot_reason!(), "NULLIF(bot_reason, '')");
        assert_eq!(read_bot_reason!(e), "NULLIF(e.bot_reason, '')");
    }
}
