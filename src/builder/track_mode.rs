//! How much of a letter is tracked: the mailing file's `track`, a
//! recipient's `linktrack_track` column, and a recipient's own opt-out
//! (which makes it [`TrackMode::None`]).

use std::fmt;

/// The recipients-file column that overrides the mailing's mode per letter.
pub const RECIPIENT_COLUMN: &str = "linktrack_track";

/// One tracking mode. Unsubscribing works the same in every one of them:
/// it is not tracking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TrackMode {
    /// Clicks and opens, per recipient (`true`, `"all"`, `"both"`).
    #[default]
    All,
    /// Links rewritten, no pixel.
    Clicks,
    /// The pixel, links left as written.
    Opens,
    /// Nothing tracked (`false`, `"none"`): links as written, no pixel.
    None,
    /// Clicks and opens counted per mailing and link, but every letter
    /// shares one row per link, so no row or event names the recipient.
    Anonymous,
    /// The CNIL's deliverability exemption (docs/privacy.md): the pixel
    /// only, and of its opens only the UTC day of the address's last one,
    /// one row per address, overwritten. No events, links as written, no
    /// images proxied.
    LastOpenDay,
}

/// A `track` value that is none of the names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown tracking mode {0:?} (expected clicks, opens, all, none, anonymous, last_open_day, true or false)"
)]
pub struct UnknownMode(pub String);

impl TrackMode {
    pub const ALL: [TrackMode; 6] = [
        TrackMode::All,
        TrackMode::Clicks,
        TrackMode::Opens,
        TrackMode::None,
        TrackMode::Anonymous,
        TrackMode::LastOpenDay,
    ];

    /// The name stored and shown (`all`, `clicks`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            TrackMode::All => "all",
            TrackMode::Clicks => "clicks",
            TrackMode::Opens => "opens",
            TrackMode::None => "none",
            TrackMode::Anonymous => "anonymous",
            TrackMode::LastOpenDay => "last_open_day",
        }
    }

    /// A name, `both`, `true` or `false`, case and surrounding space ignored.
    pub fn parse(text: &str) -> Result<TrackMode, UnknownMode> {
        let name = text.trim().to_ascii_lowercase();
        match name.as_str() {
            "true" | "both" => Ok(TrackMode::All),
            "false" => Ok(TrackMode::None),
            _ => TrackMode::ALL
                .into_iter()
                .find(|mode| mode.as_str() == name)
                .ok_or_else(|| UnknownMode(text.to_owned())),
        }
    }

    /// A JSON value of the mailing file or a recipients line: a boolean or a name.
    pub fn from_json(value: &serde_json::Value) -> Result<TrackMode, UnknownMode> {
        match value {
            serde_json::Value::Bool(true) => Ok(TrackMode::All),
            serde_json::Value::Bool(false) => Ok(TrackMode::None),
            serde_json::Value::String(text) => TrackMode::parse(text),
            other => Err(UnknownMode(other.to_string())),
        }
    }

    pub fn tracks_clicks(self) -> bool {
        matches!(
            self,
            TrackMode::All | TrackMode::Clicks | TrackMode::Anonymous
        )
    }

    pub fn tracks_opens(self) -> bool {
        matches!(
            self,
            TrackMode::All | TrackMode::Opens | TrackMode::Anonymous | TrackMode::LastOpenDay
        )
    }

    /// Images go through the proxy (whose loads are events): not in
    /// `last_open_day` letters, which record nothing but the day.
    pub fn proxies_images(self) -> bool {
        self.is_tracked() && self != TrackMode::LastOpenDay
    }

    /// Anything at all is tracked (the letter can offer "stop tracking me").
    pub fn is_tracked(self) -> bool {
        self != TrackMode::None
    }
}

impl fmt::Display for TrackMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for TrackMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        TrackMode::from_json(&value)
            .map_err(|e| serde::de::Error::custom(format_args!("field `track`: {e}")))
    }
}

/// The recipient's own mode from its `linktrack_track` field: `None` when
/// the field is absent, null or blank (the mailing's mode applies). A
/// value that is not a mode is the line's reject, naming the value.
pub fn recipient_mode(
    fields: &serde_json::Map<String, serde_json::Value>,
) -> Result<Option<TrackMode>, super::reject::Reject> {
    match fields.get(RECIPIENT_COLUMN) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(text)) if text.trim().is_empty() => Ok(None),
        Some(value) => TrackMode::from_json(value)
            .map(Some)
            .map_err(|e| super::reject::Reject::TrackMode(e.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_booleans_and_aliases_parse() {
        for mode in TrackMode::ALL {
            assert_eq!(TrackMode::parse(mode.as_str()), Ok(mode));
        }
        assert_eq!(TrackMode::parse(" Both "), Ok(TrackMode::All));
        assert_eq!(TrackMode::parse("FALSE"), Ok(TrackMode::None));
        assert_eq!(TrackMode::from_json(&json!(false)), Ok(TrackMode::None));
        assert_eq!(TrackMode::from_json(&json!(true)), Ok(TrackMode::All));
        assert_eq!(
            TrackMode::parse("cliks").unwrap_err().to_string(),
            "unknown tracking mode \"cliks\" (expected clicks, opens, all, none, anonymous, last_open_day, true or false)"
        );
        assert!(TrackMode::from_json(&json!(1)).is_err());
    }

    #[test]
    fn what_each_mode_tracks() {
        let table: Vec<(bool, bool)> = TrackMode::ALL
            .iter()
            .map(|m| (m.tracks_clicks(), m.tracks_opens()))
            .collect();
        assert_eq!(
            table,
            [
                (true, true),
                (true, false),
                (false, true),
                (false, false),
                (true, true),
                (false, true)
            ]
        );
    }

    #[test]
    fn the_recipient_column_is_optional_and_checked() {
        let fields = |v: serde_json::Value| v.as_object().cloned().unwrap();
        assert_eq!(recipient_mode(&fields(json!({"email": "a@b.c"}))), Ok(None));
        assert_eq!(
            recipient_mode(&fields(json!({"linktrack_track": " "}))),
            Ok(None)
        );
        assert_eq!(
            recipient_mode(&fields(json!({"linktrack_track": "opens"}))),
            Ok(Some(TrackMode::Opens))
        );
        let reject = recipient_mode(&fields(json!({"linktrack_track": "maybe"}))).unwrap_err();
        assert_eq!(
            reject.to_string(),
            "field `linktrack_track`: unknown tracking mode \"maybe\" (expected clicks, opens, all, none, anonymous, last_open_day, true or false)"
        );
    }
}
