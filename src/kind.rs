//! The two kinds every part of linktrack talks about: what a tracked link
//! stands for ([`LinkKind`], `links.kind`) and what happened to it
//! ([`EventKind`], `events.kind`). One type each, with the database's ENUM
//! spelling (sqlx), the journal's and the API's (serde) and the text form
//! (`Display`/`FromStr`) all from the same lowercase names.
//!
//! The sqlx impls are written out rather than derived: sqlx 0.8's derive
//! for MySQL accepts a column only when its flags equal a bare ENUM's, and a
//! real `ENUM(...) NOT NULL` column carries more flags, so every read failed
//! with "mismatched types". These accept what `&str` accepts (ENUM included).

use std::fmt;
use std::str::FromStr;

/// A kind name that is not one of ours (a corrupt row or journal line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} kind {name:?}")]
pub struct UnknownKind {
    pub what: &'static str,
    pub name: String,
}

/// What a tracked URL stands for (`links.kind`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    /// `/c/{token}`: a link in the letter.
    Click,
    /// `/i/{token}`: a proxied image.
    Image,
    /// `/o/{token}.gif`: the open pixel.
    Pixel,
    /// `/u/{token}`: one-click unsubscribe.
    Unsubscribe,
    /// `/t/{token}`: "stop tracking me" (withdraw from tracking, keep the mail).
    OptOut,
    /// `/c/{token}`: the letter's invisible honeypot link; only machines
    /// follow it (docs/serve.md, "Bot verdicts").
    Honeypot,
}

impl LinkKind {
    pub const ALL: [LinkKind; 6] = [
        LinkKind::Click,
        LinkKind::Image,
        LinkKind::Pixel,
        LinkKind::Unsubscribe,
        LinkKind::OptOut,
        LinkKind::Honeypot,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::Click => "click",
            LinkKind::Image => "image",
            LinkKind::Pixel => "pixel",
            LinkKind::Unsubscribe => "unsubscribe",
            LinkKind::OptOut => "optout",
            LinkKind::Honeypot => "honeypot",
        }
    }
}

/// What a token stands for, as its sealed plaintext spells it (docs/token.md):
/// the one list of token kind codes. The request extractor refuses a token
/// whose kind is not its route's, before any database read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// `/c/`: a link in the letter.
    Click = 1,
    /// `/o/`: the open pixel.
    Pixel = 2,
    /// `/i/`: a proxied image.
    Image = 3,
    /// `/u/`: one-click unsubscribe.
    Unsubscribe = 4,
    /// `/t/`: "stop tracking me" (tracking opt-out).
    TrackingOptOut = 5,
    /// The invisible honeypot link that only bots follow (served by `/c/`).
    Honeypot = 6,
    /// A letter's VERP bounce address (`bounces+{token}@{bounce domain}`,
    /// docs/bounces.md): never in a URL, so no route serves it.
    Bounce = 7,
}

impl TokenKind {
    pub const ALL: [TokenKind; 7] = [
        TokenKind::Click,
        TokenKind::Pixel,
        TokenKind::Image,
        TokenKind::Unsubscribe,
        TokenKind::TrackingOptOut,
        TokenKind::Honeypot,
        TokenKind::Bounce,
    ];

    /// The 3-bit code sealed into the token.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The kind a 3-bit code names; 0 is never issued.
    pub fn from_code(code: u8) -> Option<TokenKind> {
        TokenKind::ALL.into_iter().find(|kind| kind.code() == code)
    }
}

impl From<LinkKind> for TokenKind {
    fn from(kind: LinkKind) -> TokenKind {
        match kind {
            LinkKind::Click => TokenKind::Click,
            LinkKind::Pixel => TokenKind::Pixel,
            LinkKind::Image => TokenKind::Image,
            LinkKind::Unsubscribe => TokenKind::Unsubscribe,
            LinkKind::OptOut => TokenKind::TrackingOptOut,
            LinkKind::Honeypot => TokenKind::Honeypot,
        }
    }
}

/// What happened (`events.kind` and the statistics tables).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// A click through `/c/{token}`.
    Click,
    /// The open pixel was loaded.
    Open,
    /// A proxied image was loaded.
    Image,
    /// The recipient unsubscribed.
    Unsubscribe,
}

impl EventKind {
    pub const ALL: [EventKind; 4] = [
        EventKind::Open,
        EventKind::Click,
        EventKind::Image,
        EventKind::Unsubscribe,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Click => "click",
            EventKind::Open => "open",
            EventKind::Image => "image",
            EventKind::Unsubscribe => "unsubscribe",
        }
    }

    /// The plural used for counters (the stats API, Redis keys): `opens`.
    pub fn plural(self) -> &'static str {
        match self {
            EventKind::Click => "clicks",
            EventKind::Open => "opens",
            EventKind::Image => "images",
            EventKind::Unsubscribe => "unsubscribes",
        }
    }
}

macro_rules! text_form {
    ($kind:ident, $what:literal) => {
        impl fmt::Display for $kind {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $kind {
            type Err = UnknownKind;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $kind::ALL
                    .into_iter()
                    .find(|kind| kind.as_str() == s)
                    .ok_or_else(|| UnknownKind {
                        what: $what,
                        name: s.to_owned(),
                    })
            }
        }
    };
}

text_form!(LinkKind, "link");
text_form!(EventKind, "event");

macro_rules! sql_enum {
    ($kind:ident) => {
        impl sqlx::Type<sqlx::MySql> for $kind {
            fn type_info() -> sqlx::mysql::MySqlTypeInfo {
                <str as sqlx::Type<sqlx::MySql>>::type_info()
            }
            fn compatible(ty: &sqlx::mysql::MySqlTypeInfo) -> bool {
                <str as sqlx::Type<sqlx::MySql>>::compatible(ty)
            }
        }

        impl sqlx::Encode<'_, sqlx::MySql> for $kind {
            fn encode_by_ref(
                &self,
                buf: &mut Vec<u8>,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<sqlx::MySql>>::encode(self.as_str(), buf)
            }
        }

        impl sqlx::Decode<'_, sqlx::MySql> for $kind {
            fn decode(
                value: sqlx::mysql::MySqlValueRef<'_>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <&str as sqlx::Decode<sqlx::MySql>>::decode(value)?;
                Ok(text.parse()?)
            }
        }
    };
}

sql_enum!(LinkKind);
sql_enum!(EventKind);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_text_and_json() {
        for kind in LinkKind::ALL {
            assert_eq!(kind.as_str().parse::<LinkKind>(), Ok(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{kind}\""));
        }
        for kind in EventKind::ALL {
            assert_eq!(kind.as_str().parse::<EventKind>(), Ok(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(serde_json::from_str::<EventKind>(&json).unwrap(), kind);
        }
        assert_eq!(
            "opens".parse::<EventKind>().unwrap_err().to_string(),
            "unknown event kind \"opens\""
        );
        assert!(
            "pixel".parse::<EventKind>().is_err(),
            "a link kind, not an event kind"
        );
    }

    #[test]
    fn token_kind_codes_are_fixed() {
        let codes: Vec<u8> = TokenKind::ALL.iter().map(|k| k.code()).collect();
        assert_eq!(
            codes,
            [1, 2, 3, 4, 5, 6, 7],
            "sealed into issued tokens: never renumber"
        );
        for kind in TokenKind::ALL {
            assert_eq!(TokenKind::from_code(kind.code()), Some(kind));
        }
        assert_eq!(TokenKind::from_code(0), None);
        assert_eq!(TokenKind::from_code(8), None);
    }

    #[test]
    fn plurals_name_the_counters() {
        let plurals: Vec<&str> = EventKind::ALL.iter().map(|k| k.plural()).collect();
        assert_eq!(plurals, ["opens", "clicks", "images", "unsubscribes"]);
    }
}
