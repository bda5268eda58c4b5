//! The seal key ring's policy (docs/token.md, "Rotating the secret"): given
//! the keys an installation has recorded and the ring a builder, server or
//! rotation opens with, what to record and what to warn about, or why the
//! ring is refused ([`KeyRefusal`]). A plain function of its inputs: the
//! store reads the records and applies the decision in one transaction
//! (`store/seal_keys.rs`).

use super::key_refusal::KeyRefusal;
use chrono::{DateTime, NaiveDate, Utc};

/// Who opens the ring, which decides what it must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `build`: seals with the current key, which must be the database's
    /// current key.
    Build,
    /// `serve`: opens tokens; the ring must hold every key whose tokens
    /// live (sealed within `keep_days`) and the current key.
    Serve { keep_days: u32 },
    /// `secrets rotate`: the given key becomes the current one; the ring
    /// must hold the keys whose tokens live, as `serve` will need them.
    Rotate { keep_days: u32 },
}

/// Where the ring's current key comes from: a refusal names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CurrentSecret {
    /// `LINKTRACK_SECRET` is set.
    Given,
    /// `LINKTRACK_SECRET` is unset: the key of the installation's random
    /// part alone.
    Unset,
}

/// Whether the ring's current key may become the database's current key
/// when the database knows another (`--new-secret`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewKey {
    Refused,
    Allowed,
}

/// One recorded key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub fingerprint: String,
    pub current_since: DateTime<Utc>,
    pub last_sealed_on: Option<NaiveDate>,
    pub how: String,
    pub retired_at: Option<DateTime<Utc>>,
}

/// What the policy found to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The ring is fine as recorded.
    Known,
    /// Record the current key (`how`) as the current one: new, or made
    /// current again.
    MakeCurrent { how: &'static str },
    /// Nothing is recorded yet: check the key against the stored tokens
    /// (none: record it as the first).
    FirstSeen,
}

/// A ring's verdict: what to do, and what to warn about (keys the
/// server lacks whose tokens are past retention; ring keys the database
/// has never seen).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub decision: Decision,
    pub warnings: Vec<String>,
}

/// The fingerprints of a ring: its current key's and the previous keys'.
#[derive(Debug, Clone, Copy)]
pub struct RingKeys<'a> {
    pub current: &'a str,
    pub previous: &'a [String],
}

impl RingKeys<'_> {
    fn holds(&self, fingerprint: &str) -> bool {
        self.current == fingerprint || self.previous.iter().any(|p| p == fingerprint)
    }
}

/// The policy for one opening of a ring: who opens it, how its current
/// key was given, whether a new key may become current, and the day.
#[derive(Debug, Clone, Copy)]
pub struct RingPolicy {
    pub purpose: Purpose,
    pub secret: CurrentSecret,
    pub new_key: NewKey,
    pub today: NaiveDate,
}

impl RingPolicy {
    /// Decide about `ring` against the `records` of the database.
    pub fn decide(&self, records: &[KeyRecord], ring: RingKeys<'_>) -> Result<Verdict, KeyRefusal> {
        let Some(newest) = records.iter().max_by_key(|r| r.current_since) else {
            return Ok(Verdict {
                decision: self.first_key(),
                warnings: Vec::new(),
            });
        };
        let decision = self.decision(records, newest, ring.current)?;
        let warnings = match self.purpose {
            Purpose::Serve { keep_days } | Purpose::Rotate { keep_days } => {
                let becomes_current = matches!(decision, Decision::MakeCurrent { .. });
                self.check_live_keys(records, newest, ring, keep_days, becomes_current)?
            }
            Purpose::Build => Vec::new(),
        };
        Ok(Verdict { decision, warnings })
    }

    /// Nothing recorded yet.
    fn first_key(&self) -> Decision {
        match self.new_key {
            NewKey::Allowed => Decision::MakeCurrent { how: "new-secret" },
            NewKey::Refused => Decision::FirstSeen,
        }
    }

    fn unset(&self) -> bool {
        self.secret == CurrentSecret::Unset
    }

    /// What to do with the ring's current key `ours`, `newest` being the
    /// database's current key.
    fn decision(
        &self,
        records: &[KeyRecord],
        newest: &KeyRecord,
        ours: &str,
    ) -> Result<Decision, KeyRefusal> {
        let known = records.iter().find(|r| r.fingerprint == ours);
        let since = newest.current_since.date_naive();
        let may_become_current = self.new_key == NewKey::Allowed;
        let new_secret = Decision::MakeCurrent { how: "new-secret" };
        match (known, self.purpose) {
            (_, Purpose::Rotate { .. }) if newest.fingerprint == ours => {
                Err(KeyRefusal::AlreadyCurrent {
                    fingerprint: ours.to_owned(),
                })
            }
            (_, Purpose::Rotate { .. }) => Ok(Decision::MakeCurrent { how: "rotate" }),
            (None, _) if may_become_current => Ok(new_secret),
            (None, _) => Err(KeyRefusal::Unknown {
                fingerprint: ours.to_owned(),
                unset: self.unset(),
                current: newest.fingerprint.clone(),
                since,
            }),
            (Some(record), Purpose::Build) if record.fingerprint != newest.fingerprint => {
                if may_become_current {
                    Ok(new_secret)
                } else {
                    Err(KeyRefusal::NotCurrent {
                        fingerprint: ours.to_owned(),
                        unset: self.unset(),
                        current: newest.fingerprint.clone(),
                        since,
                    })
                }
            }
            (Some(record), Purpose::Build) if record.retired_at.is_some() => {
                if may_become_current {
                    Ok(new_secret)
                } else {
                    Err(KeyRefusal::Retired {
                        fingerprint: ours.to_owned(),
                    })
                }
            }
            (Some(_), _) => Ok(Decision::Known),
        }
    }

    /// A server's (or a rotation's) ring must hold every key whose links
    /// live and the current one; keys past retention and ring keys the
    /// database never saw are warnings.
    fn check_live_keys(
        &self,
        records: &[KeyRecord],
        newest: &KeyRecord,
        ring: RingKeys<'_>,
        keep_days: u32,
        becomes_current: bool,
    ) -> Result<Vec<String>, KeyRefusal> {
        let mut warnings = Vec::new();
        for record in records.iter().filter(|r| r.retired_at.is_none()) {
            if ring.holds(&record.fingerprint) {
                continue;
            }
            let live_until = record
                .last_sealed_on
                .and_then(|day| day.checked_add_days(chrono::Days::new(u64::from(keep_days))));
            let is_current = record.fingerprint == newest.fingerprint && !becomes_current;
            let live = live_until.is_some_and(|until| until >= self.today);
            if is_current || live {
                return Err(KeyRefusal::MissingFromRing {
                    fingerprint: record.fingerprint.clone(),
                    why: why_needed(record, is_current, live_until),
                });
            }
            if record.last_sealed_on.is_some() {
                warnings.push(format!(
                    "the seal key {} is not in the ring: its links are past --keep-days \
                     ({keep_days}), and expired ones no longer lead to their link template \
                     (docs/token.md, \"What an expired link does\")",
                    record.fingerprint
                ));
            }
        }
        for fingerprint in ring.previous {
            if records.iter().all(|r| &r.fingerprint != fingerprint) {
                warnings.push(format!(
                    "a key of LINKTRACK_PREVIOUS_SECRETS ({fingerprint}) is not one this \
                     database has seen; it opens nothing sealed since seal keys are recorded"
                ));
            }
        }
        Ok(warnings)
    }
}

/// Why a key the ring lacks is still needed, for its refusal.
fn why_needed(record: &KeyRecord, is_current: bool, live_until: Option<NaiveDate>) -> String {
    match (is_current, record.last_sealed_on, live_until) {
        (true, None, _) => format!(
            "the current key since {}, which new letters are sealed with",
            record.current_since.date_naive()
        ),
        (true, Some(day), _) => format!(
            "the current key since {}, which new letters are sealed with; \
             last sealed on {day}",
            record.current_since.date_naive()
        ),
        (false, Some(day), Some(until)) => {
            format!("sealed links until {day}, live until {until}")
        }
        _ => "its links are live".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn day(text: &str) -> NaiveDate {
        text.parse().unwrap()
    }

    fn record(fingerprint: &str, since: &str, sealed: Option<&str>) -> KeyRecord {
        KeyRecord {
            fingerprint: fingerprint.into(),
            current_since: day(since).and_hms_opt(12, 0, 0).unwrap().and_utc(),
            last_sealed_on: sealed.map(day),
            how: "first".into(),
            retired_at: None,
        }
    }

    fn ring(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| (*k).to_owned()).collect()
    }

    const TODAY: &str = "2026-12-02";
    const SERVE: Purpose = Purpose::Serve { keep_days: 90 };

    fn run(
        records: &[KeyRecord],
        keys: &[&str],
        new_secret: bool,
        purpose: Purpose,
    ) -> Result<Verdict, KeyRefusal> {
        let policy = RingPolicy {
            purpose,
            secret: CurrentSecret::Given,
            new_key: if new_secret {
                NewKey::Allowed
            } else {
                NewKey::Refused
            },
            today: day(TODAY),
        };
        let keys = ring(keys);
        let (current, previous) = keys.split_first().expect("a test ring has a key");
        policy.decide(records, RingKeys { current, previous })
    }

    #[test]
    fn a_first_key_is_checked_against_the_stored_tokens() {
        let verdict = run(&[], &["aa"], false, Purpose::Build).unwrap();
        assert_eq!(verdict.decision, Decision::FirstSeen);
        let verdict = run(&[], &["aa"], true, SERVE).unwrap();
        assert_eq!(
            verdict.decision,
            Decision::MakeCurrent { how: "new-secret" }
        );
    }

    #[test]
    fn an_unknown_key_is_refused_unless_it_is_new() {
        let records = [record("aa", "2026-11-01", Some("2026-12-01"))];
        for purpose in [Purpose::Build, SERVE] {
            let err = run(&records, &["bb"], false, purpose).unwrap_err();
            assert!(matches!(err, KeyRefusal::Unknown { .. }), "{err}");
            let text = err.to_string();
            assert!(
                text.contains("bb") && text.contains("current key is aa"),
                "{text}"
            );
            assert!(text.contains("linktrack secrets rotate"), "{text}");
        }
        let verdict = run(&records, &["bb"], true, Purpose::Build).unwrap();
        assert_eq!(
            verdict.decision,
            Decision::MakeCurrent { how: "new-secret" }
        );
        assert_eq!(
            run(&records, &["aa"], false, Purpose::Build)
                .unwrap()
                .decision,
            Decision::Known
        );
    }

    #[test]
    fn a_builder_with_the_replaced_key_is_refused() {
        let records = [
            record("aa", "2026-11-01", Some("2026-12-01")),
            record("bb", "2026-12-01", None),
        ];
        let err = run(&records, &["aa"], false, Purpose::Build).unwrap_err();
        assert!(matches!(err, KeyRefusal::NotCurrent { .. }), "{err}");
        assert!(
            err.to_string().contains("key bb replaced on 2026-12-01"),
            "{err}"
        );
        // A server may run with it, as long as its ring holds the current key.
        assert_eq!(
            run(&records, &["aa", "bb"], false, SERVE).unwrap().decision,
            Decision::Known
        );
        let err = run(&records, &["aa"], false, SERVE).unwrap_err();
        assert!(
            err.to_string()
                .contains("bb (the current key since 2026-12-01"),
            "{err}"
        );
    }

    #[test]
    fn a_server_needs_every_key_whose_links_live() {
        let records = [
            record("old", "2026-01-01", Some("2026-08-01")),
            record("aa", "2026-08-01", Some("2026-12-01")),
            record("bb", "2026-12-01", Some("2026-12-02")),
        ];
        // aa sealed until 2026-12-01: live until 2027-03-01.
        let err = run(&records, &["bb"], false, SERVE).unwrap_err();
        assert_eq!(
            err,
            KeyRefusal::MissingFromRing {
                fingerprint: "aa".into(),
                why: "sealed links until 2026-12-01, live until 2027-03-01".into()
            }
        );
        assert!(
            err.to_string().contains("linktrack secrets retire aa"),
            "{err}"
        );
        // `old` is past retention: a warning, not a refusal.
        let verdict = run(&records, &["bb", "aa"], false, SERVE).unwrap();
        assert_eq!(verdict.decision, Decision::Known);
        assert_eq!(verdict.warnings.len(), 1, "{:?}", verdict.warnings);
        assert!(verdict.warnings[0].contains("old"));
        // A retired key is not needed.
        let mut retired = records.clone();
        retired[1].retired_at = Some(Utc::now());
        assert!(run(&retired, &["bb"], false, SERVE).is_ok());
    }

    #[test]
    fn rotate_needs_the_live_keys_and_a_new_one() {
        let records = [record("aa", "2026-11-01", Some("2026-12-01"))];
        let rotate = Purpose::Rotate { keep_days: 90 };
        let err = run(&records, &["aa"], false, rotate).unwrap_err();
        assert!(matches!(err, KeyRefusal::AlreadyCurrent { .. }), "{err}");
        let err = run(&records, &["bb"], false, rotate).unwrap_err();
        assert!(matches!(err, KeyRefusal::MissingFromRing { .. }), "{err}");
        let verdict = run(&records, &["bb", "aa"], false, rotate).unwrap();
        assert_eq!(verdict.decision, Decision::MakeCurrent { how: "rotate" });
        // A ring key the database never saw is said.
        let verdict = run(&records, &["bb", "aa", "cc"], false, rotate).unwrap();
        assert!(
            verdict.warnings.iter().any(|w| w.contains("(cc)")),
            "{:?}",
            verdict.warnings
        );
    }
}
