//! The planned path (`letter::plan`) against the old one, letter by letter:
//! every creative of `fixtures/email-corpus/`, every tracking mode, readers
//! with different fields, and generated templates (proptest). The old path
//! is the definition: the same tokens must give the same bytes (HTML, text
//! part, whole message).

use super::*;
use crate::builder::track_mode::TrackMode;
use crate::letter::Template;
use crate::token::TokenSeal;
use chrono::TimeZone;
use proptest::prelude::*;
use std::path::{Path, PathBuf};

const BASE: &str = "https://t.example.com";

fn mailing(html: &str, personalize: bool) -> Mailing {
    Mailing {
        mailing_id: crate::mailing_id::MailingId::parse("plan-check").unwrap(),
        subject: if personalize {
            "News for {{ first_name }}".into()
        } else {
            "News".into()
        },
        from: "News <news@example.com>".into(),
        html: html.into(),
        html_source: PathBuf::from("test.html"),
        pool: "bulk".into(),
        tags: vec!["weekly".into()],
        personalize,
        proxy_images: true,
        track: TrackMode::All,
        stop_tracking_footer: true,
        honeypot: true,
        filter_safe: true,
        list_manage_url: None,
        utm: None,
    }
}

fn context(mailing: Mailing) -> MailingContext {
    let seal = TokenSeal::derive(Some("plan tests"), b"install key", 0);
    match MailingContext::prepare(mailing, BASE, 1 << 22, seal) {
        Ok(context) => context,
        Err(e) => panic!("prepare: {e}"),
    }
}

fn reader(line: u64, fields: serde_json::Value) -> Recipient {
    let serde_json::Value::Object(mut fields) = fields else {
        panic!("fields are an object")
    };
    let email = format!("reader{line}@example.com");
    fields.insert("email".into(), Value::String(email.clone()));
    Recipient {
        line,
        email: crate::address::Email::parse(&email).unwrap(),
        fields,
    }
}

fn readers() -> Vec<Recipient> {
    vec![
        reader(
            1,
            json!({"first_name": "Ana", "name": "Ana Lima", "city": "Porto"}),
        ),
        reader(
            2,
            json!({"first_name": "José O'Brien & Co", "name": "J", "city": "Zürich <HQ>"}),
        ),
        // Not plain (doubled space, emoji): this letter takes the old path.
        reader(
            3,
            json!({"first_name": "Ma  ria 🎉", "name": "M", "city": "Köln"}),
        ),
        reader(
            4,
            json!({"first_name": "Wei", "name": "W", "city": "\"Quoted\" Town"}),
        ),
    ]
}

/// Builds `recipient`'s letter the old way, then the planned way with the
/// same tokens, and returns both.
fn both_ways(
    planned: &MailingContext,
    old: &MailingContext,
    recipient: &Recipient,
    mode: TrackMode,
) -> Option<(Built, Built)> {
    let made_at = Utc.with_ymd_and_hms(2026, 11, 26, 8, 0, 0).single()?;
    let images = ImageTokens::default();
    let first = build_letter(old, recipient, 7, None, &images, made_at, mode);
    let Ok(first) = first else {
        // Rejected the old way: the planned way must reject alike.
        let again = build_letter(planned, recipient, 7, None, &images, made_at, mode);
        assert_eq!(
            first.as_ref().err().map(ToString::to_string),
            again.as_ref().err().map(ToString::to_string)
        );
        return None;
    };
    let stored = StoredTokens {
        by_position: first
            .new_links
            .iter()
            .map(|row| ((row.kind, row.position), (row.token, row.url.clone())))
            .collect(),
    };
    let second = build_letter(planned, recipient, 7, Some(&stored), &images, made_at, mode)
        .unwrap_or_else(|e| panic!("planned build: {e}"));
    Some((first, second))
}

fn assert_same(name: &str, mode: TrackMode, old: &Built, planned: &Built) {
    let (a, b) = (&old.letter, &planned.letter);
    assert_eq!(a.html, b.html, "{name} {mode}: HTML differs");
    assert_eq!(a.subject, b.subject, "{name} {mode}: subject differs");
    assert_eq!(a.headers, b.headers, "{name} {mode}: headers differ");
    assert_eq!(a.message, b.message, "{name} {mode}: message differs");
}

fn corpus() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/email-corpus");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "html"))
        .map(|path| {
            let html = std::fs::read(&path).unwrap_or_default();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, String::from_utf8_lossy(&html).into_owned())
        })
        .collect();
    files.sort();
    files
}

/// The creative with the reader's fields placed where senders put them:
/// a greeting in the first lines of the body, the unsubscribe URL as a link
/// and as text, the stop-tracking link.
fn personalised(html: &str) -> String {
    let fields = "<p>Hello {{ first_name }} from {{ city }}, {{mailing_id}}.</p>\
                  <p><a href=\"{{ unsubscribe_url }}\">Unsubscribe</a> or paste {{ unsubscribe_url }} \
                  &middot; <a href='{{ stop_tracking_url }}'>stop tracking</a></p>";
    match html
        .find("<body")
        .and_then(|at| html[at..].find('>').map(|end| at + end + 1))
    {
        Some(at) => format!("{}{fields}{}", &html[..at], &html[at..]),
        None => format!("{fields}{html}"),
    }
}

#[test]
fn every_corpus_creative_gives_the_same_letters_both_ways() {
    let files = corpus();
    assert!(
        files.len() >= 38,
        "the corpus has {} creatives",
        files.len()
    );
    let mut planned_creatives = 0;
    for (name, html) in &files {
        let source = personalised(html);
        // Another engine's tags (Handlebars `{{#each}}`) do not compile as
        // templates: such creatives are sent unpersonalised.
        let personalize = Template::compile("html", &source, true).is_ok();
        let creative = if personalize { source } else { html.clone() };
        let planned = context(mailing(&creative, personalize));
        let old = context(mailing(&creative, personalize)).without_plans();
        if planned.is_planned(TrackMode::All) {
            planned_creatives += 1;
        }
        for mode in TrackMode::ALL {
            for recipient in readers() {
                if let Some((a, b)) = both_ways(&planned, &old, &recipient, mode) {
                    assert_same(name, mode, &a, &b);
                }
            }
        }
    }
    // Creatives with `{{`-tags of other engines, `{% %}` or fields inside
    // tags are built the old way; the rest must be planned.
    assert!(
        planned_creatives * 10 >= files.len() * 8,
        "only {planned_creatives} of {} creatives were planned",
        files.len()
    );
}

#[test]
fn what_cannot_be_planned_falls_back_and_says_why() {
    let cases = [
        ("{% if first_name %}<p>Hi</p>{% endif %}", "tag other than"),
        ("<p title=\"{{ first_name }}\">Hi</p>", "inside a tag"),
        (
            "<a href=\"https://shop.example/?u={{ first_name }}\">x</a>",
            "inside a tag",
        ),
        ("<title>{{ first_name }}</title><p>x</p>", "inside a tag"),
        ("<!-- {{ first_name }} --><p>x</p>", "inside a tag"),
        ("<p>Hi {{ first_name|upper }}</p>", "tag other than"),
    ];
    for (html, why) in cases {
        let planned = context(mailing(html, true));
        let reason = match planned.plan_reason(TrackMode::All) {
            Some(reason) => reason,
            None => panic!("{html} was planned"),
        };
        assert!(reason.contains(why), "{html}: {reason}");
        // And its letters are still built, the old way.
        let old = context(mailing(html, true)).without_plans();
        for recipient in readers() {
            if let Some((a, b)) = both_ways(&planned, &old, &recipient, TrackMode::All) {
                assert_same(html, TrackMode::All, &a, &b);
            }
        }
    }
}

#[test]
fn a_plain_creative_with_fields_in_text_is_planned() {
    let html = "<html><body><p>Hi {{ first_name }}</p><a href=\"https://x.example/a\">a</a>\
                <a href=\"{{ unsubscribe_url }}\">u</a></body></html>";
    let planned = context(mailing(html, true));
    for mode in TrackMode::ALL {
        assert!(
            planned.is_planned(mode),
            "{mode}: {:?}",
            planned.plan_reason(mode)
        );
    }
}

/// Pieces of generated creatives: links, images, entities, comments
/// (conditional and plain), fields in text and in attributes, blocks.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z ,.!?]{0,30}",
        Just("&amp; &nbsp; &eacute; &#8212; ".to_owned()),
        (1u8..9).prop_map(|n| format!(
            "<a href=\"https://shop.example/p/{n}?a=1&amp;b=2\">item {n}</a>"
        )),
        (1u8..9).prop_map(|n| format!(
            "<a href='https://shop.example/q/{n}' data-linktrack-tag=\"t{n}\">q</a>"
        )),
        Just("<a href=\"https://x.example/off\" data-linktrack=\"off\">off</a>".to_owned()),
        (1u8..4).prop_map(|n| format!("<img src=\"https://cdn.example/{n}.png\" alt=\"pic {n}\">")),
        Just(
            "<!--[if mso]><v:roundrect href=\"https://x.example/vml\"></v:roundrect><![endif]-->"
                .to_owned()
        ),
        Just("<!-- a note <a href=\"https://x.example/c\">c</a> -->".to_owned()),
        Just("{{ first_name }}".to_owned()),
        Just(" {{ city }} ".to_owned()),
        Just("<span title=\"{{ city }}\">t</span>".to_owned()),
        Just("<a href=\"{{ unsubscribe_url }}\">u</a>".to_owned()),
        Just("{% if city %}in {{ city }}{% endif %}".to_owned()),
        Just("<div style=\"display:none\">hidden {{ first_name }}</div>".to_owned()),
        Just("<table><tr><td>cell</td><td>{{ first_name }}</td></tr></table>".to_owned()),
        Just("<ul><li>one</li><li>two {{ first_name }}</li></ul>".to_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn generated_creatives_give_the_same_letters_both_ways(
        pieces in proptest::collection::vec(piece(), 1..14),
        wrap_body in any::<bool>(),
        first_name in "[A-Za-z][A-Za-z' -]{0,12}[a-z]",
        city in "[A-Za-zé&<\"]{1,10}",
    ) {
        let body = pieces.concat();
        let html = if wrap_body { format!("<html><body>{body}</body></html>") } else { body };
        let planned = context(mailing(&html, true));
        let old = context(mailing(&html, true)).without_plans();
        let recipient = reader(1, json!({"first_name": first_name, "city": city, "name": "N"}));
        for mode in TrackMode::ALL {
            if let Some((a, b)) = both_ways(&planned, &old, &recipient, mode) {
                assert_same(&html, mode, &a, &b);
            }
        }
    }
}

/// Checks each `N.planned.eml` of a directory against `N.reference.eml`
/// with Python's `email` package (policy.default, the strict modern
/// parser): no defects on the message or any part, no line over 998
/// octets, no bare LF, quoted-printable lines of at most 76 characters,
/// and every part's decoded content equal to the reference's. Prints the
/// number of messages checked.
const PYTHON_CHECK: &str = r#"
import os, sys, email
from email import policy

folder = sys.argv[1]
bad = []
checked = 0
for name in sorted(os.listdir(folder)):
    if not name.endswith('.planned.eml'):
        continue
    checked += 1
    base = name[:-len('.planned.eml')]
    raw = open(os.path.join(folder, name), 'rb').read()
    ref = open(os.path.join(folder, base + '.reference.eml'), 'rb').read()
    if any(len(line) > 998 for line in raw.split(b'\r\n')):
        bad.append(base + ': a line over 998 octets')
    if b'\n' in raw.replace(b'\r\n', b''):
        bad.append(base + ': a bare LF')
    planned = email.message_from_bytes(raw, policy=policy.default)
    reference = email.message_from_bytes(ref, policy=policy.default)
    for part in planned.walk():
        if part.defects:
            bad.append('%s: %s defects %r' % (base, part.get_content_type(), part.defects))
        if part.get('Content-Transfer-Encoding') == 'quoted-printable':
            long = [l for l in part.get_payload().split('\r\n') if len(l) > 76]
            long += [l for l in part.get_payload().split('\n') if len(l.rstrip('\r')) > 76]
            if long:
                bad.append('%s: quoted-printable line of %d' % (base, len(long[0])))
    got = [(p.get_content_type(), p.get_content()) for p in planned.walk() if not p.is_multipart()]
    want = [(p.get_content_type(), p.get_content()) for p in reference.walk() if not p.is_multipart()]
    if [t for t, _ in got] != ['text/plain', 'text/html']:
        bad.append('%s: parts %r' % (base, [t for t, _ in got]))
    if got != want:
        bad.append(base + ': decoded parts differ from the reference')
print(checked)
if bad:
    sys.stderr.write('\n'.join(bad[:30]) + '\n')
    sys.exit(1)
"#;

#[test]
fn python_reads_every_planned_corpus_message_as_the_reference_without_defects() {
    let dir = tempfile::tempdir().unwrap();
    let mut written = 0;
    let mut encodings = std::collections::BTreeSet::new();
    for (n, (name, html)) in corpus().iter().enumerate() {
        let source = personalised(html);
        let personalize = Template::compile("html", &source, true).is_ok();
        let creative = if personalize { source } else { html.clone() };
        let planned = context(mailing(&creative, personalize));
        let old = context(mailing(&creative, personalize)).without_plans();
        for mode in TrackMode::ALL {
            if !planned.is_planned(mode) {
                continue;
            }
            for recipient in readers() {
                let Some((a, b)) = both_ways(&planned, &old, &recipient, mode) else {
                    continue;
                };
                assert_same(name, mode, &a, &b);
                for line in b.letter.message.lines() {
                    if let Some(encoding) = line.strip_prefix("Content-Transfer-Encoding: ") {
                        encodings.insert(encoding.to_owned());
                    }
                }
                let stem = format!("{n:02}-{mode}-{}", recipient.line);
                let path = dir.path().join(format!("{stem}.planned.eml"));
                std::fs::write(path, &b.letter.message).unwrap();
                let path = dir.path().join(format!("{stem}.reference.eml"));
                std::fs::write(path, &a.letter.message).unwrap();
                written += 1;
            }
        }
    }
    assert!(written > 500, "only {written} planned letters");
    // The corpus gives the plan both 7bit and quoted-printable parts.
    assert!(
        encodings.contains("7bit") && encodings.contains("quoted-printable"),
        "{encodings:?}"
    );
    let script = dir.path().join("check.py");
    std::fs::write(&script, PYTHON_CHECK).unwrap();
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(dir.path())
        .output()
        .expect("python3 runs (the machine image has CPython)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let checked: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert_eq!(checked, written);
}
