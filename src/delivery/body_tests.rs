//! The encoder against lettre's (`Body::new`), the definition: whole texts
//! and texts cut into fixed pieces and values at random places.

use super::*;
use proptest::prelude::*;

/// lettre's body for `text`, given CRLF line ends as `message::build`
/// gives it (lettre chooses the encoding before it adds CRs).
fn lettre_body(text: &str) -> EncodedBody {
    let body = Body::new(crlf_line_ends(text).into_owned());
    EncodedBody {
        encoding: body.encoding(),
        bytes: body.into_vec(),
    }
}

/// `pieces` as fixed pieces (even places) and values (odd places).
fn planned(pieces: &[String]) -> Option<EncodedBody> {
    let plan = BodyPlan::compile(pieces.iter().step_by(2).map(String::as_str));
    let chunks: Vec<Chunk<'_>> = pieces
        .iter()
        .enumerate()
        .map(|(i, piece)| {
            if i % 2 == 0 {
                Chunk::Fixed(i / 2)
            } else {
                Chunk::Value(Cow::Borrowed(piece.as_str()))
            }
        })
        .collect();
    plan.encode(&chunks)
}

/// Text that stresses quoted-printable: long words, spaces and tabs before
/// line ends, dots at line starts, `=`, CR and LF alone, non-ASCII.
fn text() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        4 => "[a-zA-Z0-9]{1,90}",
        2 => Just(" ".to_owned()),
        1 => Just("\t".to_owned()),
        1 => Just(".".to_owned()),
        1 => Just("=".to_owned()),
        2 => Just("\n".to_owned()),
        1 => Just("\r\n".to_owned()),
        1 => Just("\r".to_owned()),
        1 => Just(" \n".to_owned()),
        1 => Just("\t\r\n".to_owned()),
        2 => "\\PC{1,8}",
        1 => "[äöüéЖ中🎉]{1,30}",
    ];
    prop::collection::vec(atom, 0..60).prop_map(|atoms| atoms.concat())
}

/// Like [`text`], but mostly ASCII (quoted-printable, not base64).
fn mostly_ascii() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        8 => "[a-zA-Z0-9<>\"/]{1,120}",
        3 => Just(" ".to_owned()),
        1 => Just("\t".to_owned()),
        1 => Just(".".to_owned()),
        1 => Just("=".to_owned()),
        2 => Just("\n".to_owned()),
        1 => Just("\r\n".to_owned()),
        1 => Just(" \r\n".to_owned()),
        1 => Just("\r".to_owned()),
        1 => "[äé–]{1,3}",
    ];
    prop::collection::vec(atom, 0..80).prop_map(|atoms| atoms.concat())
}

/// A text cut at random char boundaries into 1 to 12 pieces.
fn cut(text: String, cuts: Vec<prop::sample::Index>) -> Vec<String> {
    let mut bounds: Vec<usize> = cuts
        .iter()
        .map(|i| i.index(text.len() + 1))
        .filter(|&at| text.is_char_boundary(at))
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    let mut pieces = Vec::new();
    let mut from = 0;
    for at in bounds {
        pieces.push(text[from..at].to_owned());
        from = at;
    }
    pieces.push(text[from..].to_owned());
    pieces
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn whole_texts_encode_as_lettre_encodes_them(text in text()) {
        prop_assert_eq!(encode_text(&text), lettre_body(&text));
    }

    #[test]
    fn mostly_ascii_texts_encode_as_lettre_encodes_them(text in mostly_ascii()) {
        prop_assert_eq!(encode_text(&text), lettre_body(&text));
    }

    #[test]
    fn texts_in_pieces_encode_as_the_whole(
        text in prop_oneof![text(), mostly_ascii()],
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let pieces = cut(text.clone(), cuts);
        match planned(&pieces) {
            Some(body) => prop_assert_eq!(body, lettre_body(&text)),
            // Only where a piece's LF follows the one before's CR.
            None => prop_assert!(pieces
                .iter()
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| w[0].ends_with('\r') && w[1].starts_with('\n'))),
        }
    }

}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A plan's fixed text with slot values that vary in length, as
    /// letters fill them: each letter as lettre would encode it.
    #[test]
    fn one_plan_fills_many_letters(
        fixed in prop::collection::vec(mostly_ascii(), 2..8),
        letters in prop::collection::vec(
            prop::collection::vec("[a-zA-Z0-9 .äé'/:=-]{0,100}", 8), 1..6),
    ) {
        let plan = BodyPlan::compile(fixed.iter().map(String::as_str));
        for values in &letters {
            let mut chunks = Vec::new();
            let mut joined = String::new();
            for (i, piece) in fixed.iter().enumerate() {
                if i > 0 {
                    chunks.push(Chunk::Value(Cow::Borrowed(values[i].as_str())));
                    joined.push_str(&values[i]);
                }
                chunks.push(Chunk::Fixed(i));
                joined.push_str(piece);
            }
            match plan.encode(&chunks) {
                Some(body) => prop_assert_eq!(body, lettre_body(&joined)),
                None => prop_assert!(fixed.iter().any(|f| f.starts_with('\n'))),
            }
        }
    }
}

#[test]
fn a_full_line_puts_its_soft_break_before_the_last_escape() {
    // 75 plain bytes, then `=`: the line is full at 76 and the next escape
    // moves the last one to the next line, as lettre does.
    for n in 70..80 {
        let text = format!("{}={}é{}", "a".repeat(n), "b".repeat(n), " ".repeat(3));
        assert_eq!(encode_text(&text), lettre_body(&text), "{n}");
        let pieces: Vec<String> = vec![
            text[..n].to_owned(),
            text[n..n + 1].to_owned(),
            text[n + 1..].to_owned(),
        ];
        assert_eq!(planned(&pieces), Some(lettre_body(&text)), "{n}");
    }
}

#[test]
fn the_encoding_is_chosen_as_lettre_chooses_it() {
    let short_ascii = "Hello\nworld\n";
    assert_eq!(
        encode_text(short_ascii).encoding,
        ContentTransferEncoding::SevenBit
    );
    let long_ascii = format!("{}\n", "x".repeat(80));
    assert_eq!(
        encode_text(&long_ascii).encoding,
        ContentTransferEncoding::QuotedPrintable
    );
    let cyrillic = "Привет, мир! ".repeat(20);
    assert_eq!(
        encode_text(&cyrillic).encoding,
        ContentTransferEncoding::Base64
    );
    // Line lengths as email-encoding counts them: the first line's LF is
    // counted from 0, every later one from the LF before it.
    for line in 70..80 {
        for text in [
            format!("{}\nshort\n", "y".repeat(line)),
            format!("a\n{}\nb", "y".repeat(line)),
            format!("a\n{}", "y".repeat(line)),
            "y".repeat(line),
        ] {
            assert_eq!(encode_text(&text), lettre_body(&text), "{text:?}");
            let pieces = cut(text.clone(), vec![]);
            assert_eq!(planned(&pieces), Some(lettre_body(&text)));
        }
    }
}

#[test]
fn base64_lines_are_76_characters() {
    let text = "日本語のテキスト".repeat(40);
    let body = encode_text(&text);
    assert_eq!(body, lettre_body(&text));
    let lines: Vec<&[u8]> = body.bytes.split(|&b| b == b'\n').collect();
    assert!(lines[..lines.len() - 1].iter().all(|l| l.len() == 77));
}
