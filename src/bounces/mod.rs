//! Mail that comes back: bounces and complaints read
//! ([`parse`](parse::parse), the text bounces in `text.rs`), classified
//! (`classify.rs`, the table of docs/bounces.md), matched to their letter
//! and acted on (`ingest.rs`, messages read from `sources.rs`, providers'
//! webhook events read in `providers.rs`): a hard bounce or a complaint
//! suppresses the address at once, soft bounces after [`SoftPolicy`]'s
//! count, a policy block never; every decision is stored, and goes out as
//! an `email.bounced` or `email.complained` event ([`EventsOut`]).

mod bare_address;
pub mod classify;
mod events_out;
pub mod ingest;
pub mod mailbox;
pub mod parse;
pub mod providers;
pub mod read;
pub mod reading;
pub mod reasons;
mod report;
mod soft_policy;
pub mod sources;
mod text;
mod vendors;

pub use classify::Class;
pub use events_out::EventsOut;
pub use report::{Failure, Kind, Report};
pub use soft_policy::SoftPolicy;

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fixture(name: &str) -> Report {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/bounces")
            .join(name);
        parse::parse(&std::fs::read(&path).unwrap()).unwrap()
    }

    /// The one failure of a bounce fixture: (format, recipient, status, class).
    fn one_failure(name: &str) -> (&'static str, String, Option<String>, Option<Class>) {
        match fixture(name).kind {
            Kind::Bounce { format, failures } => {
                assert_eq!(failures.len(), 1, "{name}: {failures:?}");
                let f = &failures[0];
                (format, f.recipient.clone(), f.status.clone(), f.class)
            }
            other => panic!("{name}: {other:?}"),
        }
    }

    const VERP: &str = "bounces+01890000000070008000000000000000@bounces.example.com";
    const LETTER: &str = "<4242.spring-2026@news.example.com>";

    #[test]
    fn every_bounce_fixture_names_its_recipient_status_and_class() {
        let hard = Some(Class::Hard);
        let soft = Some(Class::Soft);
        type Row<'a> = (&'a str, &'a str, &'a str, Option<&'a str>, Option<Class>);
        let rows: &[Row] = &[
            (
                "postfix-dsn-user-unknown.eml",
                "dsn",
                "nobody@example.org",
                Some("5.1.1"),
                hard,
            ),
            (
                "postfix-dsn-mailbox-full.eml",
                "dsn",
                "nobody@example.org",
                Some("4.2.2"),
                soft,
            ),
            (
                "postfix-dsn-dmarc.eml",
                "dsn",
                "nobody@example.org",
                Some("5.7.1"),
                Some(Class::Policy),
            ),
            (
                "ses-dsn-mailbox-full.eml",
                "dsn",
                "full@example.com",
                Some("5.2.2"),
                soft,
            ),
            (
                "exim-user-unknown.eml",
                "exim",
                "gone@example.org",
                Some("5.1.1"),
                hard,
            ),
            (
                "qmail-no-mailbox.eml",
                "qmail",
                "nobody@example.net",
                Some("5.1.1"),
                hard,
            ),
            (
                "sendmail-user-unknown.eml",
                "sendmail",
                "olduser@example.com",
                Some("5.1.1"),
                hard,
            ),
            (
                "exchange-ndr-not-found.eml",
                "exchange",
                "someone@contoso.example.com",
                Some("5.1.10"),
                hard,
            ),
            (
                "gmail-address-not-found.eml",
                "gmail",
                "missing.person@gmail.com",
                Some("5.1.1"),
                hard,
            ),
            (
                "yahoo-no-account.eml",
                "yahoo",
                "ghost@yahoo.com",
                None,
                hard,
            ),
        ];
        for (name, format, recipient, status, class) in rows {
            let got = one_failure(name);
            assert_eq!(
                (got.0, got.1.as_str(), got.2.as_deref(), got.3),
                (*format, *recipient, *status, *class),
                "{name}"
            );
            let report = fixture(name);
            assert_eq!(
                report.original_message_id.as_deref(),
                Some(LETTER),
                "{name}"
            );
            assert_eq!(
                report
                    .verp
                    .first()
                    .map(|t| crate::token::bounce_address(t, "bounces.example.com")),
                Some(VERP.to_owned()),
                "{name}"
            );
            assert!(report.message_id.is_some(), "{name}");
        }
    }

    #[test]
    fn complaints_name_their_recipient_or_only_their_letter() {
        let report = fixture("arf-abuse.eml");
        assert_eq!(
            report.kind,
            Kind::Complaint {
                feedback_type: "abuse".into(),
                recipient: Some("reader@example.org".into())
            }
        );
        assert_eq!(report.original_message_id.as_deref(), Some(LETTER));
        assert_eq!(report.verp.len(), 1);
        let redacted = fixture("arf-abuse-redacted.eml");
        assert_eq!(
            redacted.kind,
            Kind::Complaint {
                feedback_type: "abuse".into(),
                recipient: Some("redacted@isp.example.net".into())
            }
        );
        assert_eq!(
            redacted.verp.len(),
            1,
            "the Return-Path still names the letter"
        );
        assert!(matches!(
            fixture("arf-not-spam.eml").kind,
            Kind::NotABounce { .. }
        ));
    }

    #[test]
    fn auto_replies_warnings_replies_and_truncated_reports_are_no_bounces() {
        assert_eq!(fixture("vacation-auto-reply.eml").kind, Kind::AutoReply);
        assert_eq!(fixture("postfix-dsn-delayed.eml").kind, Kind::NoFailure);
        assert!(matches!(
            fixture("not-a-bounce.eml").kind,
            Kind::NotABounce { .. }
        ));
        assert!(matches!(
            fixture("dsn-truncated.eml").kind,
            Kind::NotABounce { .. }
        ));
    }

    #[test]
    fn every_fixture_is_read_and_listed_in_sources() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bounces");
        let sources = std::fs::read_to_string(dir.join("SOURCES.md")).unwrap();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".eml") {
                assert!(
                    sources.contains(&format!("| {name} |")),
                    "{name} not in SOURCES.md"
                );
                fixture(&name);
            }
        }
    }

    /// Real bounces of other MTAs and providers (sisimai's public set,
    /// fixtures/bounces/set-of-emails/SOURCES.md): each read, one file at
    /// a time, as the class sisimai's reason for it falls in.
    #[test]
    fn real_public_bounces_are_classed_as_the_reference_parser_classes_them() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bounces/set-of-emails");
        let sources = std::fs::read_to_string(dir.join("SOURCES.md")).unwrap();
        let rows: Vec<(&str, &str, &str)> = sources
            .lines()
            .filter(|line| line.starts_with("| ") && line.contains(".eml |"))
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                Some((*cells.get(1)?, *cells.get(3)?, *cells.get(4)?))
            })
            .collect();
        assert!(rows.len() >= 35, "{rows:?}");
        let mut wrong = Vec::new();
        for (name, kind, status) in &rows {
            let raw = std::fs::read(dir.join(name)).unwrap();
            let reading = reading::Reading::of(&read::read(&raw).unwrap());
            let read_status = reading
                .status
                .as_deref()
                .and_then(|s| s.split_whitespace().next())
                .unwrap_or("–");
            if reading.kind != *kind || read_status != *status {
                wrong.push(format!(
                    "{name}: {kind} {status} expected, read {reading:?}"
                ));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".eml") {
                assert!(
                    sources.contains(&format!("| {name} |")),
                    "{name} not in SOURCES.md"
                );
            }
        }
    }

    #[test]
    fn garbage_is_no_message_and_nothing_panics() {
        assert_eq!(parse::parse(b""), Err(parse::ParseError::NotAMessage));
        let raw = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/bounces/postfix-dsn-user-unknown.eml"),
        )
        .unwrap();
        // Every prefix of a real DSN parses to something, never a panic.
        for end in (0..raw.len()).step_by(7) {
            let _ = parse::parse(&raw[..end]);
        }
    }

    /// Every fixture, cut at every third byte (sisimai's samples at every
    /// eleventh): read and said, never a panic.
    #[test]
    fn truncated_real_messages_are_read_and_said() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bounces");
        let public = dir.join("set-of-emails");
        let entries = std::fs::read_dir(&dir)
            .unwrap()
            .chain(std::fs::read_dir(&public).unwrap());
        for entry in entries {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "eml") {
                let raw = std::fs::read(&path).unwrap();
                let step = if path.starts_with(&public) { 11 } else { 3 };
                for end in (0..raw.len()).step_by(step) {
                    if let Ok(report) = read::read(&raw[..end]) {
                        let _ = reading::Reading::of(&report).to_string();
                    }
                }
            }
        }
    }

    fn fixture_bytes() -> Vec<Vec<u8>> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bounces");
        let mut all: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "eml"))
            .collect();
        all.sort();
        all.iter().map(|p| std::fs::read(p).unwrap()).collect()
    }

    proptest::proptest! {
        /// Random bytes: read or refused, never a panic.
        #[test]
        fn random_bytes_never_panic(raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4096)) {
            if let Ok(report) = read::read(&raw) {
                let _ = reading::Reading::of(&report).to_string();
            }
        }

        /// Real messages with bytes overwritten at random places.
        #[test]
        fn damaged_real_messages_never_panic(
            which in 0usize..64,
            damage in proptest::collection::vec((proptest::prelude::any::<u16>(), proptest::prelude::any::<u8>()), 1..40),
        ) {
            let fixtures = fixture_bytes();
            let mut raw = fixtures[which % fixtures.len()].clone();
            for (at, byte) in damage {
                let at = at as usize % raw.len();
                raw[at] = byte;
            }
            if let Ok(report) = read::read(&raw) {
                let _ = reading::Reading::of(&report).to_string();
            }
        }
    }
}
