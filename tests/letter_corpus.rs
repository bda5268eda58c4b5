//! The rewriter against real newsletters (`fixtures/email-corpus/`) and
//! against a synthetic letter with what the corpus lacks.
//!
//! Every check here is independent of the rewriter's own scanner: links are
//! counted with lol_html's attribute API and decoded with `html-escape`.
#![allow(clippy::unwrap_used)] // tests and benchmarks: a failure should stop them loudly

use std::fs;
use std::path::{Path, PathBuf};

use linktrack::letter::{rewrite, FoundKind, FoundLink, RewriteOptions};
use lol_html::{doc_comments, element, HtmlRewriter, Settings};

const OWN_BASE: &str = "https://t.example.com";
const PIXEL: &str =
    "<img src=\"https://t.example.com/o/PIXEL.gif\" width=\"1\" height=\"1\" alt=\"\">";
const TEMPLATE_MARKERS: [&str; 7] = ["{{", "{%", "*|", "<%", "[%", "%%", "${"];

fn corpus_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/email-corpus");
    let entries = fs::read_dir(&dir).unwrap_or_else(|error| {
        panic!("the email corpus is missing at {}: {error}", dir.display())
    });
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "html"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *.html in {}", dir.display());
    files
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn all_on() -> RewriteOptions<'static> {
    RewriteOptions {
        track_links: true,
        proxy_images: true,
        own_base_url: OWN_BASE,
        pixel_html: Some(PIXEL),
        shown_address_base: None,
    }
}

fn marker(call: usize) -> String {
    format!("https://t.test/m/{call}/")
}

/// Rewrites with a unique marker URL per call; returns the output and the links seen.
fn rewrite_with_markers(html: &str) -> (String, Vec<FoundLink>) {
    rewrite_with_markers_and(html, &all_on())
}

fn rewrite_with_markers_and(html: &str, options: &RewriteOptions) -> (String, Vec<FoundLink>) {
    let mut found = Vec::new();
    let output = rewrite(html, options, |link| {
        found.push(link.clone());
        marker(found.len())
    })
    .unwrap();
    (output, found)
}

/// What a browser follows, computed independently of the rewriter.
fn decoded(raw: &str) -> String {
    html_escape::decode_html_entities(raw)
        .trim_matches(|c: char| c <= ' ')
        .replace(['\t', '\n', '\r'], "")
}

fn is_trackable(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    (lower.starts_with("http://") || lower.starts_with("https://"))
        && !TEMPLATE_MARKERS.iter().any(|marker| url.contains(marker))
        && !lower.starts_with(OWN_BASE)
}

/// Every URL the rules say to rewrite, in document order, found with
/// lol_html's own attribute parsing (conditional comments parsed as HTML).
fn trackable_urls(html: &str) -> Vec<(FoundKind, String)> {
    let found = std::cell::RefCell::new(Vec::new());
    census(html, &found, true);
    found.into_inner()
}

fn census(html: &str, found: &std::cell::RefCell<Vec<(FoundKind, String)>>, outer: bool) {
    let record = |kind: FoundKind, value: Option<String>, opted_out: bool| {
        let url = decoded(&value.unwrap_or_default());
        if is_trackable(&url) && !opted_out {
            found.borrow_mut().push((kind, url));
        }
    };
    let mut document_content_handlers = Vec::new();
    if outer {
        document_content_handlers.push(doc_comments!(|comment| {
            let text = comment.text();
            if text.to_ascii_lowercase().starts_with("[if") {
                census(&text, found, false);
            }
            Ok(())
        }));
    }
    let off = |el: &lol_html::html_content::Element| {
        el.get_attribute("data-linktrack")
            .is_some_and(|value| value.trim().eq_ignore_ascii_case("off"))
    };
    let mut settings = Settings::new()
        .with_strict(false)
        .append_element_content_handler(element!("[href]", |el| {
            let name = el.tag_name();
            if name == "a" || name == "area" || name.starts_with("v:") {
                record(FoundKind::Click, el.get_attribute("href"), off(el));
            }
            Ok(())
        }))
        .append_element_content_handler(element!("img[src]", |el| {
            record(FoundKind::Image, el.get_attribute("src"), off(el));
            Ok(())
        }));
    for handler in document_content_handlers {
        settings = settings.append_document_content_handler(handler);
    }
    let mut parser = HtmlRewriter::new(settings, |_: &[u8]| {});
    parser.write(html.as_bytes()).unwrap();
    parser.end().unwrap();
}

/// Puts back the original raw attribute text in place of each marker
/// (dropping the quotes the rewriter adds around unquoted values) and returns
/// the rebuilt document and each raw value, checking every byte in between.
fn rebuild(input: &str, output: &str, calls: usize) -> (String, Vec<String>) {
    let mut rebuilt = String::with_capacity(input.len());
    let mut raw_values = Vec::new();
    let (mut out_at, mut in_at) = (0, 0);
    for call in 1..=calls {
        let marker = marker(call);
        let found_at = out_at
            + output[out_at..]
                .find(&marker)
                .unwrap_or_else(|| panic!("marker {call} missing from the output"));
        let between = &output[out_at..found_at];
        let (copied, added_quote) = if input[in_at..].starts_with(between) {
            (between, false)
        } else {
            let without_quote = between
                .strip_suffix('"')
                .filter(|text| input[in_at..].starts_with(text))
                .unwrap_or_else(|| {
                    panic!(
                        "bytes before marker {call} differ from the input near byte {in_at}: {:?}",
                        &between[between.len().saturating_sub(80)..]
                    )
                });
            (without_quote, true)
        };
        rebuilt.push_str(copied);
        in_at += copied.len();
        let raw_end = if added_quote {
            input[in_at..]
                .find(|c: char| c.is_ascii_whitespace() || c == '>')
                .map_or(input.len(), |end| in_at + end)
        } else {
            let quote = between.chars().last().unwrap();
            assert!(quote == '"' || quote == '\'', "marker {call} is not quoted");
            in_at + input[in_at..].find(quote).unwrap()
        };
        let raw = &input[in_at..raw_end];
        rebuilt.push_str(raw);
        raw_values.push(raw.to_owned());
        in_at = raw_end;
        out_at = found_at + marker.len();
        if added_quote {
            assert_eq!(
                &output[out_at..out_at + 1],
                "\"",
                "closing quote after marker {call}"
            );
            out_at += 1;
        }
    }
    assert_eq!(
        &output[out_at..],
        &input[in_at..],
        "bytes after the last marker differ"
    );
    rebuilt.push_str(&output[out_at..]);
    (rebuilt, raw_values)
}

/// The corpus checks, for one document.
fn check_letter(name: &str, input: &str) -> Vec<FoundLink> {
    let (output, found) = rewrite_with_markers(input);

    // The pixel is there once, before `</body>` when there is one.
    assert_eq!(output.matches(PIXEL).count(), 1, "{name}: pixel");
    let pixel_at = output.find(PIXEL).unwrap();
    let after_pixel = &output[pixel_at + PIXEL.len()..];
    if input.to_ascii_lowercase().contains("</body") {
        assert!(
            after_pixel.to_ascii_lowercase().starts_with("</body"),
            "{name}: pixel not before </body>"
        );
    }
    let output = format!("{}{after_pixel}", &output[..pixel_at]);

    // (1) Every trackable URL was handed to `replace`, in order, decoded, and
    // none is left in the output.
    let expected = trackable_urls(input);
    let seen: Vec<_> = found
        .iter()
        .map(|link| (link.kind, link.url.clone()))
        .collect();
    assert_eq!(seen, expected, "{name}: links found");
    let leftover: Vec<_> = trackable_urls(&output)
        .into_iter()
        .filter(|(_, url)| !url.starts_with("https://t.test/m/"))
        .collect();
    assert!(leftover.is_empty(), "{name}: not rewritten: {leftover:?}");

    // (2) Byte-exactness, and (3) each URL is its raw value decoded.
    let (rebuilt, raw_values) = rebuild(input, &output, found.len());
    assert!(rebuilt == input, "{name}: rebuilt document differs");
    for (link, raw) in found.iter().zip(&raw_values) {
        assert_eq!(link.url, decoded(raw), "{name}: decoding of {raw:?}");
    }

    // Positions count 1, 2, 3… per kind.
    for kind in [FoundKind::Click, FoundKind::Image] {
        let positions: Vec<u32> = found
            .iter()
            .filter(|link| link.kind == kind)
            .map(|link| link.position)
            .collect();
        let expected: Vec<u32> = (1..=positions.len() as u32).collect();
        assert_eq!(positions, expected, "{name}: {kind:?} positions");
    }
    found
}

#[test]
fn every_corpus_letter_is_rewritten_completely_and_byte_exactly() {
    let (mut clicks, mut images, mut clicks_in_vml_letters) = (0, 0, 0);
    for path in corpus_files() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let input = read(&path);
        let found = check_letter(&name, &input);
        let letter_clicks = found.iter().filter(|l| l.kind == FoundKind::Click).count();
        clicks += letter_clicks;
        images += found.len() - letter_clicks;
        if input.contains("<v:") {
            clicks_in_vml_letters += letter_clicks;
        }
    }
    // Sanity: the corpus does exercise the rewriter (at the time of writing:
    // 64 click links, most hrefs being `#` placeholders or merge tags).
    assert!(clicks >= 50, "only {clicks} click links in the corpus");
    assert!(images >= 50, "only {images} images in the corpus");
    assert!(clicks_in_vml_letters > 0, "no links in the VML letters");
}

#[test]
fn everything_off_returns_every_corpus_letter_unchanged() {
    let options = RewriteOptions {
        track_links: false,
        proxy_images: false,
        own_base_url: OWN_BASE,
        pixel_html: None,
        shown_address_base: None,
    };
    for path in corpus_files() {
        let input = read(&path);
        let output = rewrite(&input, &options, |_| unreachable!("nothing to rewrite")).unwrap();
        assert!(output == input, "{} changed", path.display());
    }
}

#[test]
fn replace_returning_the_same_url_keeps_every_letter_meaning_the_same() {
    for path in corpus_files() {
        let input = read(&path);
        let output = rewrite(&input, &all_on(), |link| link.url.clone()).unwrap();
        let without_pixel = output.replacen(PIXEL, "", 1);
        assert_eq!(
            trackable_urls(&without_pixel),
            trackable_urls(&input),
            "{}",
            path.display()
        );
    }
}

/// A letter with what the corpus lacks, CRLF throughout.
fn synthetic_letter() -> String {
    let long_url = format!(
        "https://shop.test/deal?ref={}",
        "abcdef0123&amp;".repeat(400)
    );
    [
        "<!DOCTYPE html>",
        "<html><head><link rel=stylesheet href=\"http://css.test/a.css\"></head>",
        "<BODY>",
        "<p>Grüße — 日本語</p>",
        "<img src=\"http://img.test/map.png\" usemap=\"#m\">",
        "<map name=\"m\"><area shape=rect coords=\"0,0,10,10\" href=\"http://map.test/one\"><area href='HTTP://MAP.TEST/two' alt=x></map>",
        "<a href=\"http://x.test/?a=1&amp;b=2&#38;c=3\">amp</a>",
        &format!("<a href=\"{long_url}\">long</a>"),
        "<a href='https://single.test/'>single</a> <a href=https://unquoted.test/x?y=1>unquoted</a>",
        "<a",
        "   class=\"btn\"",
        "   HREF = \"HTTPS://Multi.Line.test/\"",
        ">multi-line</a>",
        "<a href=\"  https://x.test/a  \">spaces</a>",
        "<!-- <a href=\"http://commented-out.test\">old</a> -->",
        "<!--[if mso]>",
        "<v:roundrect xmlns:v=\"urn:schemas-microsoft-com:vml\" href=\"http://vml.test/\" style=\"height:40px\" arcsize=\"10%\">",
        "<w:anchorlock/><center>Go</center></v:roundrect>",
        "<![endif]-->",
        "<a href=\"https://t.example.com/u/unsubscribe\">unsubscribe</a>",
        "<a href=\"mailto:a@b.test\">mail</a> <a href=\"#top\">top</a>",
        "</BODY>",
        "</html>",
        "",
    ]
    .join("\r\n")
}

#[test]
fn synthetic_letter_passes_the_corpus_checks() {
    let input = synthetic_letter();
    let found = check_letter("synthetic", &input);
    let urls: Vec<(FoundKind, u32, &str)> = found
        .iter()
        .map(|link| {
            (
                link.kind,
                link.position,
                &link.url[..link.url.len().min(40)],
            )
        })
        .collect();
    assert_eq!(
        urls,
        [
            (FoundKind::Image, 1, "http://img.test/map.png"),
            (FoundKind::Click, 1, "http://map.test/one"),
            (FoundKind::Click, 2, "HTTP://MAP.TEST/two"),
            (FoundKind::Click, 3, "http://x.test/?a=1&b=2&c=3"),
            (
                FoundKind::Click,
                4,
                "https://shop.test/deal?ref=abcdef0123&ab"
            ),
            (FoundKind::Click, 5, "https://single.test/"),
            (FoundKind::Click, 6, "https://unquoted.test/x?y=1"),
            (FoundKind::Click, 7, "HTTPS://Multi.Line.test/"),
            (FoundKind::Click, 8, "https://x.test/a"),
            (FoundKind::Click, 9, "http://vml.test/"),
        ]
    );
    let long = &found[4].url;
    assert_eq!(long.len(), "https://shop.test/deal?ref=".len() + 400 * 11);
}

#[test]
fn synthetic_letter_ordinary_comment_is_untouched() {
    let (output, _) = rewrite_with_markers(&synthetic_letter());
    assert!(output.contains("<!-- <a href=\"http://commented-out.test\">old</a> -->"));
    assert!(output.contains("<link rel=stylesheet href=\"http://css.test/a.css\">"));
}

#[test]
fn opted_out_links_keep_their_url_and_lose_the_marker_attribute() {
    let input = "<a href=\"http://keep.test\"\r\n   data-linktrack=\"off\">k</a>\r\n<a data-linktrack-tag=\"ruby\" href=\"http://tag.test\">t</a>";
    let (output, found) = rewrite_with_markers(input);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].tag.as_deref(), Some("ruby"));
    assert!(output.starts_with(
        "<a href=\"http://keep.test\">k</a>\r\n<a href=\"https://t.test/m/1/\">t</a>"
    ));
}

/// No panic, no error, and the byte-exactness checks on arbitrary input:
/// random text, slices of real letters, and "tag soup" built from the pieces
/// that make letters hard.
mod properties {
    use super::*;
    use proptest::prelude::*;

    const SOUP: &[&str] = &[
        "<a",
        "<A",
        "<area",
        "<img",
        "<v:roundrect",
        "<v:rect",
        "<link",
        "<base",
        "<p>",
        "</a>",
        " ",
        "  ",
        "\r\n",
        "\t",
        "href",
        "HREF",
        "src",
        "data-href",
        "title",
        "=",
        " = ",
        "\"",
        "'",
        "http://x.test/",
        "HTTPS://y.test/p?q=1",
        "&amp;",
        "&#38;",
        "{{ x }}",
        "mailto:a@b",
        "#",
        "/",
        ">",
        "/>",
        "<!--",
        "-->",
        "<!--[if mso]>",
        "<![endif]-->",
        "<!--[if !mso]><!-->",
        "<!--<![endif]-->",
        "<script>",
        "</script>",
        "<style>",
        "</style>",
        "<title>",
        "</title>",
        "<textarea>",
        "</textarea>",
        "<svg>",
        "</svg>",
        "<![CDATA[",
        "]]>",
        "<?x ?>",
        "<!DOCTYPE html>",
        "<body>",
        "</body>",
        "<table>",
        "日本",
        "é",
        "x",
    ];

    const TAG_NAMES: &[&str] = &[
        "a",
        "A",
        "area",
        "img",
        "IMG",
        "v:roundrect",
        "v:rect",
        "link",
        "p",
    ];
    /// Without our control attributes, whose removal is deliberate.
    const ATTRIBUTE_NAMES: &[&str] = &[
        "href",
        "HREF",
        "src",
        "title",
        "data-href",
        "class",
        "=x",
        "\"q",
    ];
    const ATTRIBUTE_NAMES_WITH_CONTROLS: &[&str] = &[
        "href",
        "HREF",
        "src",
        "title",
        "data-linktrack",
        "data-linktrack-tag",
        "DATA-LINKTRACK",
    ];
    const EQUALS: &[&str] = &["=", " = ", "=\r\n  ", ""];
    const QUOTES: &[&str] = &["\"", "'", ""];
    const VALUE_PIECES: &[&str] = &[
        "http://x.test/",
        "HTTPS://y.test/p?q=1",
        "https://t.example.com/u/1",
        "&amp;",
        "&#38;",
        "&quot;",
        "{{ x }}",
        "*|UNSUB|*",
        "mailto:a@b",
        "#",
        " ",
        "\r\n",
        "日本",
        "a=b",
        "href=",
        ">",
        "'",
        "\"",
        "/",
        "off",
        "OFF",
    ];
    const SEPARATORS: &[&str] = &[" ", "\r\n   ", "\t", "/", ""];
    const TAG_ENDS: &[&str] = &[">", "/>", " >", ""];

    fn pick(choices: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
        proptest::sample::select(choices)
    }

    /// A start tag with random attributes, spacing and quoting.
    fn start_tag(names: &'static [&'static str]) -> impl Strategy<Value = String> {
        let value = proptest::collection::vec(pick(VALUE_PIECES), 0..4).prop_map(|p| p.concat());
        let attribute = (
            pick(SEPARATORS),
            pick(names),
            pick(EQUALS),
            pick(QUOTES),
            value,
        )
            .prop_map(|(separator, name, equals, quote, value)| {
                if equals.is_empty() {
                    format!("{separator}{name}")
                } else {
                    format!("{separator}{name}{equals}{quote}{value}{quote}")
                }
            });
        (
            pick(TAG_NAMES),
            proptest::collection::vec(attribute, 0..4),
            pick(TAG_ENDS),
        )
            .prop_map(|(name, attributes, end)| format!("<{name} {}{end}", attributes.concat()))
    }

    fn soup() -> impl Strategy<Value = String> {
        soup_of(ATTRIBUTE_NAMES)
    }

    fn soup_with_controls() -> impl Strategy<Value = String> {
        soup_of(ATTRIBUTE_NAMES_WITH_CONTROLS)
    }

    fn soup_of(names: &'static [&'static str]) -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            1 => pick(SOUP).prop_map(str::to_owned),
            1 => start_tag(names),
        ];
        proptest::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
    }

    fn corpus_slice() -> impl Strategy<Value = String> {
        let letters: Vec<String> = corpus_files().iter().map(|path| read(path)).collect();
        (0..letters.len(), any::<prop::sample::Index>(), 0usize..4000).prop_map(
            move |(letter, start, length)| {
                let text = &letters[letter];
                let mut start = start.index(text.len().max(1));
                while !text.is_char_boundary(start) {
                    start -= 1;
                }
                let mut end = (start + length).min(text.len());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text[start..end].to_owned()
            },
        )
    }

    fn without_pixel() -> RewriteOptions<'static> {
        RewriteOptions {
            pixel_html: None,
            shown_address_base: None,
            ..all_on()
        }
    }

    /// Everything but the pixel placement, which `check_letter` covers.
    fn check_exactness(input: &str) -> Result<(), TestCaseError> {
        let (output, found) = rewrite_with_markers_and(input, &without_pixel());
        for call in 1..=found.len() {
            prop_assert_eq!(output.matches(&marker(call)).count(), 1);
        }
        let (rebuilt, raw_values) = rebuild(input, &output, found.len());
        prop_assert_eq!(rebuilt, input);
        for (link, raw) in found.iter().zip(&raw_values) {
            prop_assert_eq!(&link.url, &decoded(raw));
        }
        let seen: Vec<_> = found.iter().map(|l| (l.kind, l.url.clone())).collect();
        prop_assert_eq!(seen, trackable_urls(input));
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_text_never_fails(input in prop_oneof![".{0,400}", soup_with_controls()]) {
            let (output, found) = rewrite_with_markers(&input);
            for call in 1..=found.len() {
                prop_assert!(output.contains(&marker(call)));
            }
            prop_assert!(output.contains(PIXEL));
        }

        #[test]
        fn tag_soup_is_rewritten_exactly(input in soup()) {
            check_exactness(&input)?;
        }

        #[test]
        fn corpus_slices_are_rewritten_exactly(input in corpus_slice()) {
            check_exactness(&input)?;
        }

        #[test]
        fn with_everything_off_nothing_changes(input in prop_oneof![soup(), corpus_slice(), ".{0,200}"]) {
            let options = RewriteOptions { track_links: false, proxy_images: false, own_base_url: OWN_BASE, pixel_html: None, shown_address_base: None };
            let output = rewrite(&input, &options, |link| link.url.clone()).unwrap();
            prop_assert_eq!(output, input);
        }

        #[test]
        fn returning_the_same_url_keeps_every_link(
            input in prop_oneof![soup(), corpus_slice()]
        ) {
            let output = rewrite(&input, &without_pixel(), |link| link.url.clone()).unwrap();
            prop_assert_eq!(trackable_urls(&output), trackable_urls(&input));
        }
    }
}

/// The corpus is shipped with its provenance: every letter is listed in
/// SOURCES.tsv, and every repository it names has its licence text.
#[test]
fn every_corpus_letter_has_a_source_and_a_licence() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/email-corpus");
    let sources = read(&dir.join("SOURCES.tsv"));
    let mut rows = sources
        .lines()
        .skip(1)
        .map(|line| line.split('\t').collect::<Vec<_>>());
    let listed: Vec<(String, String)> = rows
        .by_ref()
        .map(|fields| (fields[0].to_string(), fields[1].to_string()))
        .collect();
    for path in corpus_files() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let (_, repo) = listed
            .iter()
            .find(|(file, _)| *file == name)
            .unwrap_or_else(|| panic!("{name} is not listed in SOURCES.tsv"));
        let licence = dir
            .join("LICENSES")
            .join(format!("{}.txt", repo.replace('/', "__")));
        let text = read(&licence);
        assert!(
            text.contains("Permission is hereby granted") || text.contains("Apache License"),
            "{} does not hold a licence text",
            licence.display()
        );
    }
}

/// A clone needs nothing beside it: no file of the repository points at a
/// folder outside it (the corpus used to be read from one).
#[test]
fn no_file_refers_to_a_folder_outside_the_repository() {
    let outside = concat!("..", "/shared");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut stack = vec![root.to_path_buf()];
    let mut checked = 0;
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(name.as_str(), "target" | ".git" | "demo-out") {
                    stack.push(path);
                }
                continue;
            }
            if let Ok(text) = fs::read_to_string(&path) {
                checked += 1;
                assert!(
                    !text.contains(outside),
                    "{} refers to {outside}",
                    path.display()
                );
            }
        }
    }
    assert!(checked > 50, "only {checked} files read");
}

/// Byte offsets just after `<a` of the first `limit` anchors whose
/// double-quoted `href` is trackable (found by plain text search, independent
/// of the rewriter's scanner).
fn trackable_anchor_offsets(html: &str, limit: usize) -> Vec<usize> {
    let mut offsets = Vec::new();
    let mut from = 0;
    while let Some(at) = html[from..].find("<a ").map(|i| from + i) {
        from = at + 3;
        let Some(end) = html[at..].find('>').map(|i| at + i) else {
            break;
        };
        let tag = &html[at..end];
        let Some(href_at) = tag.find(" href=\"") else {
            continue;
        };
        let value = &tag[href_at + 7..];
        let Some(value) = value.split('"').next() else {
            continue;
        };
        if is_trackable(&decoded(value)) && offsets.len() < limit {
            offsets.push(at + 2);
        }
    }
    offsets
}

/// The letter with `markers[i]` inserted (with a space before it) at `offsets[i]`.
fn insert_markers(html: &str, offsets: &[usize], markers: &[&str]) -> String {
    let mut out = String::with_capacity(html.len() + 64);
    let mut copied = 0;
    for (offset, marker) in offsets.iter().zip(markers) {
        out.push_str(&html[copied..*offset]);
        out.push(' ');
        out.push_str(marker);
        copied = *offset;
    }
    out.push_str(&html[copied..]);
    out
}

#[test]
fn sendgrid_and_mailgun_markers_opt_links_out_like_ours_on_corpus_letters() {
    let mut letters_marked = 0;
    for path in corpus_files() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let input = read(&path);
        let offsets = trackable_anchor_offsets(&input, 2);
        if offsets.len() < 2 {
            continue;
        }
        letters_marked += 1;
        let foreign = insert_markers(
            &input,
            &offsets,
            &["clicktracking=\"off\"", "disable-tracking=\"TRUE\""],
        );
        let ours = insert_markers(&input, &offsets, &["data-linktrack=\"off\""; 2]);
        let (baseline_out, baseline) = rewrite_with_markers(&input);
        let (foreign_out, foreign_found) = rewrite_with_markers(&foreign);
        let (ours_out, _) = rewrite_with_markers(&ours);
        assert!(
            foreign_out == ours_out,
            "{name}: differs from data-linktrack=\"off\""
        );
        assert_eq!(
            foreign_found.len(),
            baseline.len() - 2,
            "{name}: links found"
        );
        for marker in ["clicktracking", "disable-tracking"] {
            assert_eq!(
                foreign_out.matches(marker).count(),
                input.matches(marker).count(),
                "{name}: {marker} left in the output"
            );
        }
        // The two links are as written: their start tags, marker gone, are in
        // the output as they are in the input.
        for offset in &offsets {
            let end = input[*offset..].find('>').unwrap() + offset;
            let tag = &input[offset - 2..=end];
            assert!(foreign_out.contains(tag), "{name}: {tag} not kept");
            assert!(!baseline_out.contains(tag) || input.matches(tag).count() > 1);
        }
        // A marker asking for tracking (`clicktracking="on"`) is removed and
        // the link tracked: the output is the unmarked letter's.
        let on = insert_markers(&input, &offsets[..1], &["clicktracking=\"on\""]);
        assert!(rewrite_with_markers(&on).0 == baseline_out, "{name}: on");
    }
    assert!(
        letters_marked >= 3,
        "only {letters_marked} corpus letters with two trackable links"
    );
}
