//! One test per rule of the rewriter's contract.

use super::*;

const OWN_BASE: &str = "https://t.example.com";

fn options() -> RewriteOptions<'static> {
    RewriteOptions {
        track_links: true,
        proxy_images: true,
        own_base_url: OWN_BASE,
        pixel_html: None,
        shown_address_base: None,
    }
}

/// Rewrites with markers `https://t.test/c/{position}` / `…/i/{position}` and
/// returns the output and every link `replace` saw.
fn run_with(html: &str, options: &RewriteOptions) -> (String, Vec<FoundLink>) {
    let mut found = Vec::new();
    let out = rewrite(html, options, |link| {
        found.push(link.clone());
        let kind = match link.kind {
            FoundKind::Click => "c",
            FoundKind::Image => "i",
        };
        format!("https://t.test/{kind}/{}", link.position)
    })
    .unwrap();
    (out, found)
}

fn run(html: &str) -> (String, Vec<FoundLink>) {
    run_with(html, &options())
}

fn urls(found: &[FoundLink]) -> Vec<&str> {
    found.iter().map(|link| link.url.as_str()).collect()
}

#[test]
fn anchor_and_area_hrefs_are_clicks_numbered_in_order() {
    let html = r#"<a href="http://a.test/">A</a><map><area shape="rect" href="https://b.test/x"></map><a href="http://a.test/">again</a>"#;
    let (out, found) = run(html);
    assert_eq!(
        out,
        r#"<a href="https://t.test/c/1">A</a><map><area shape="rect" href="https://t.test/c/2"></map><a href="https://t.test/c/3">again</a>"#
    );
    assert_eq!(
        urls(&found),
        ["http://a.test/", "https://b.test/x", "http://a.test/"]
    );
    assert!(found.iter().all(|link| link.kind == FoundKind::Click));
    assert_eq!(
        found.iter().map(|link| link.position).collect::<Vec<_>>(),
        [1, 2, 3]
    );
}

#[test]
fn scheme_is_case_insensitive_and_attribute_name_too() {
    let (out, found) = run(r#"<A HREF="HTTPS://X.test/Path">x</A>"#);
    assert_eq!(out, r#"<A HREF="https://t.test/c/1">x</A>"#);
    assert_eq!(urls(&found), ["HTTPS://X.test/Path"]);
}

#[test]
fn vml_in_conditional_comments_is_counted_where_it_appears() {
    let html = "<a href=\"http://one.test\">1</a>\r\n<!--[if mso]>\r\n<v:roundrect xmlns:v=\"urn:schemas-microsoft-com:vml\" href=\"http://two.test\" style=\"h\">\r\n<w:anchorlock/><center>Go</center></v:roundrect>\r\n<v:rect href='http://three.test'/><v:shape\r\n  href=http://four.test></v:shape>\r\n<![endif]-->\r\n<a href=\"http://five.test\">5</a>";
    let (out, found) = run(html);
    assert_eq!(
        urls(&found),
        [
            "http://one.test",
            "http://two.test",
            "http://three.test",
            "http://four.test",
            "http://five.test"
        ]
    );
    let expected = html
        .replace("\"http://one.test\"", "\"https://t.test/c/1\"")
        .replace("\"http://two.test\"", "\"https://t.test/c/2\"")
        .replace("'http://three.test'", "'https://t.test/c/3'")
        .replace("=http://four.test>", "=\"https://t.test/c/4\">")
        .replace("\"http://five.test\"", "\"https://t.test/c/5\"");
    assert_eq!(out, expected);
}

#[test]
fn conditional_comment_variants_are_rewritten() {
    for opening in [
        "[if mso]>",
        "[if gte mso 9]>",
        "[IF (gte mso 9)|(IE)]>",
        "[if mso | IE]>",
    ] {
        let html = format!("<!--{opening}<a href=\"http://x.test\">x</a><![endif]-->");
        let (out, found) = run(&html);
        assert_eq!(urls(&found), ["http://x.test"], "{opening}");
        assert_eq!(out, html.replace("http://x.test", "https://t.test/c/1"));
    }
}

#[test]
fn ordinary_comments_are_not_rewritten() {
    let html = r#"<!-- old: <a href="http://old.test">x</a> --><!-- [if mso]><a href="http://spaced.test"><![endif]--><a href="http://new.test">y</a>"#;
    let (out, found) = run(html);
    assert_eq!(urls(&found), ["http://new.test"]);
    assert_eq!(out, html.replace("http://new.test", "https://t.test/c/1"));
}

#[test]
fn downlevel_revealed_content_is_ordinary_html() {
    let html = r#"<!--[if !mso]><!--><a href="http://x.test">x</a><!--<![endif]-->"#;
    let (out, found) = run(html);
    assert_eq!(urls(&found), ["http://x.test"]);
    assert_eq!(out, html.replace("http://x.test", "https://t.test/c/1"));
}

#[test]
fn non_http_and_relative_hrefs_are_left_alone() {
    let html = concat!(
        r#"<a href="mailto:a@b.test">m</a><a href="tel:+123">t</a><a href="sms:123">s</a>"#,
        r##"<a href="#top">f</a><a href="javascript:void(0)">j</a><a href="">e</a><a href="   ">w</a>"##,
        r#"<a href>v</a><a href="/relative">r</a><a href="page.html">p</a><a href="//cdn.test/x">pr</a>"#,
        r#"<a href="ftp://x.test">ftp</a><a href="httpx://x.test">hx</a><a name="n">n</a>"#
    );
    let (out, found) = run(html);
    assert!(found.is_empty(), "{found:?}");
    assert_eq!(out, html);
}

#[test]
fn template_tags_of_any_engine_are_left_alone() {
    for url in [
        "http://x.test/{{ user.id }}",
        "http://x.test/{% url %}",
        "http://x.test/?u=*|UNSUB|*",
        "http://x.test/<%= id %>",
        "http://x.test/[% id %]",
        "http://x.test/%%id%%",
        "http://x.test/${id}",
        "{{unsubscribe_url}}",
    ] {
        let escaped = url.replace('<', "&lt;");
        let html = format!("<a href=\"{escaped}\">x</a>");
        let (out, found) = run(&html);
        assert!(found.is_empty(), "{url}");
        assert_eq!(out, html);
    }
}

#[test]
fn own_links_are_never_tracked() {
    let html = r#"<a href="https://t.example.com/u/abc">unsub</a><a href="HTTPS://T.EXAMPLE.COM?x">q</a><a href="https://t.example.com">root</a><a href="https://t.example.com.evil.test/x">evil</a>"#;
    let (out, found) = run(html);
    assert_eq!(urls(&found), ["https://t.example.com.evil.test/x"]);
    assert_eq!(
        out,
        html.replace("https://t.example.com.evil.test/x", "https://t.test/c/1")
    );
}

#[test]
fn empty_own_base_url_exempts_nothing() {
    let options = RewriteOptions {
        own_base_url: "",
        ..options()
    };
    let (_, found) = run_with(r#"<a href="http://x.test">x</a>"#, &options);
    assert_eq!(found.len(), 1);
}

#[test]
fn link_tags_base_and_other_href_carriers_are_not_links() {
    let html = r#"<head><base href="http://base.test/"><link rel="stylesheet" href="http://css.test/a.css"></head><body><div href="http://div.test">d</div><use href="http://svg.test"/></body>"#;
    let (out, found) = run(html);
    assert!(found.is_empty(), "{found:?}");
    assert_eq!(out, html);
}

#[test]
fn opt_out_attribute_is_honoured_and_removed() {
    let html = "<a class=\"b\"\r\n   data-linktrack=\"off\"\r\n   href=\"http://x.test\">x</a><a data-linktrack=OFF href=http://y.test>y</a><a href=\"http://z.test\" data-linktrack='on'>z</a>";
    let (out, found) = run(html);
    assert_eq!(urls(&found), ["http://z.test"]);
    assert_eq!(
        out,
        "<a class=\"b\"\r\n   href=\"http://x.test\">x</a><a href=http://y.test>y</a><a href=\"https://t.test/c/1\">z</a>"
    );
}

#[test]
fn removing_a_glued_attribute_keeps_neighbours_apart() {
    let (out, _) = run(
        r#"<a data-linktrack="off"href="http://x.test">x</a><a x="1"data-linktrack="off"href="http://y.test">y</a>"#,
    );
    assert_eq!(
        out,
        r#"<a href="http://x.test">x</a><a x="1"href="http://y.test">y</a>"#
    );
}

#[test]
fn valueless_opt_out_attribute_is_removed_but_does_not_opt_out() {
    let (out, found) = run(r#"<a data-linktrack href="http://x.test">x</a>"#);
    assert_eq!(found.len(), 1);
    assert_eq!(out, r#"<a href="https://t.test/c/1">x</a>"#);
}

#[test]
fn tag_attribute_fills_found_link_and_is_removed() {
    let html = r#"<a href="http://x.test" data-linktrack-tag=" ruby &amp; gems ">x</a><a data-linktrack-tag="" href="http://y.test">y</a>"#;
    let (out, found) = run(html);
    assert_eq!(found[0].tag.as_deref(), Some("ruby & gems"));
    assert_eq!(found[1].tag, None);
    assert_eq!(
        out,
        r#"<a href="https://t.test/c/1">x</a><a href="https://t.test/c/2">y</a>"#
    );
}

#[test]
fn name_and_utm_attributes_fill_found_link_and_are_removed_byte_exactly() {
    let html = "<a class=\"b\"\r\n  data-linktrack-name=\" cta \"\r\n  href='http://x.test/?utm_source=partner'>x</a>\
                <a data-linktrack-utm=OFF href=http://y.test data-linktrack-name=''>y</a>\
                <a href=\"http://z.test\" data-linktrack-utm=\"on\">z</a>";
    let (out, found) = run(html);
    assert_eq!(found[0].name.as_deref(), Some("cta"));
    assert!(found[0].utm);
    assert_eq!(found[1].name, None);
    assert!(!found[1].utm);
    assert!(found[2].utm, "only \"off\" turns the tags off");
    assert_eq!(
        out,
        "<a class=\"b\"\r\n  href='https://t.test/c/1'>x</a>\
         <a href=\"https://t.test/c/2\">y</a>\
         <a href=\"https://t.test/c/3\">z</a>"
    );
}

#[test]
fn control_attributes_stay_when_the_step_is_off() {
    let html = r#"<a data-linktrack="off" href="http://x.test">x</a><img data-linktrack="off" src="http://i.test/a.png">"#;
    let options = RewriteOptions {
        track_links: false,
        proxy_images: false,
        ..options()
    };
    let (out, found) = run_with(html, &options);
    assert!(found.is_empty());
    assert_eq!(out, html);
}

#[test]
fn images_have_their_own_counter() {
    let html = r#"<img src="http://i.test/1.png"><a href="http://x.test"><img src='https://i.test/2.png' alt=""></a><img src="cid:logo"><img src="data:image/png;base64,AAA"><a href="http://y.test">y</a>"#;
    let (out, found) = run(html);
    let summary: Vec<_> = found
        .iter()
        .map(|link| (link.kind, link.position, link.url.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            (FoundKind::Image, 1, "http://i.test/1.png"),
            (FoundKind::Click, 1, "http://x.test"),
            (FoundKind::Image, 2, "https://i.test/2.png"),
            (FoundKind::Click, 2, "http://y.test"),
        ]
    );
    assert_eq!(
        out,
        r#"<img src="https://t.test/i/1"><a href="https://t.test/c/1"><img src='https://t.test/i/2' alt=""></a><img src="cid:logo"><img src="data:image/png;base64,AAA"><a href="https://t.test/c/2">y</a>"#
    );
}

#[test]
fn each_step_can_be_switched_off() {
    let html = r#"<a href="http://x.test"><img src="http://i.test/a.png"></a>"#;
    let links_only = RewriteOptions {
        proxy_images: false,
        ..options()
    };
    let (out, found) = run_with(html, &links_only);
    assert_eq!(found.len(), 1);
    assert_eq!(
        out,
        r#"<a href="https://t.test/c/1"><img src="http://i.test/a.png"></a>"#
    );
    let images_only = RewriteOptions {
        track_links: false,
        ..options()
    };
    let (out, found) = run_with(html, &images_only);
    assert_eq!(found.len(), 1);
    assert_eq!(
        out,
        r#"<a href="http://x.test"><img src="https://t.test/i/1"></a>"#
    );
}

#[test]
fn urls_are_decoded_as_a_browser_would() {
    let html =
        r#"<a href="http://x.test/?a=1&amp;b=2&#38;c=3&#x26;d=&quot;4&quot;&copy=5&amp">x</a>"#;
    let (out, found) = run(html);
    assert_eq!(
        urls(&found),
        [r#"http://x.test/?a=1&b=2&c=3&d="4"&copy=5&"#]
    );
    assert_eq!(out, r#"<a href="https://t.test/c/1">x</a>"#);
}

#[test]
fn surrounding_whitespace_is_trimmed_and_line_breaks_removed() {
    let (out, found) = run("<a href=\"  https://x.test/a  \">x</a><a href=\"\r\n\thttps://x.test/very/\r\n  long\">y</a>");
    assert_eq!(
        urls(&found),
        ["https://x.test/a", "https://x.test/very/  long"]
    );
    assert_eq!(
        out,
        "<a href=\"https://t.test/c/1\">x</a><a href=\"https://t.test/c/2\">y</a>"
    );
}

#[test]
fn very_long_urls_come_through_whole() {
    let long = format!("https://x.test/?q={}", "a1b2c3&amp;".repeat(600));
    assert!(long.len() > 5000);
    let (_, found) = run(&format!("<a href=\"{long}\">x</a>"));
    assert_eq!(found[0].url, long.replace("&amp;", "&"));
    assert!(found[0].url.len() > 4000);
}

#[test]
fn replacement_is_escaped_for_its_quote_style() {
    let html =
        r#"<a href="http://a.test">a</a><a href='http://b.test'>b</a><a href=http://c.test>c</a>"#;
    let out = rewrite(html, &options(), |_| {
        "https://t.test/c?a=1&b=\"'<".to_owned()
    })
    .unwrap();
    assert_eq!(
        out,
        concat!(
            r#"<a href="https://t.test/c?a=1&amp;b=&quot;'&lt;">a</a>"#,
            r#"<a href='https://t.test/c?a=1&amp;b="&#39;&lt;'>b</a>"#,
            r#"<a href="https://t.test/c?a=1&amp;b=&quot;'&lt;">c</a>"#
        )
    );
}

#[test]
fn odd_formatting_survives_byte_for_byte() {
    let html = "<!DOCTYPE html>\r\n<html lang=\"ja\">\r\n<body>\r\n<p>こんにちは — café</p>\r\n<a\r\n   class = 'btn'   data-href=\"http://decoy.test\"\r\n\ttitle=\"href=http://decoy.test\"\r\n   HREF = 'https://x.test/日本'\r\n   >ボタン</a >\r\n</body>\r\n</html>\r\n";
    let (out, found) = run(html);
    assert_eq!(urls(&found), ["https://x.test/日本"]);
    assert_eq!(
        out,
        html.replace("https://x.test/日本", "https://t.test/c/1")
    );
}

#[test]
fn links_in_raw_text_elements_are_not_links() {
    let html = r#"<style>a{}</style><script>var s='<a href="http://js.test">';</script><title><a href="http://t.test"></title><textarea><a href="http://ta.test"></textarea>"#;
    let (out, found) = run(html);
    assert!(found.is_empty(), "{found:?}");
    assert_eq!(out, html);
}

#[test]
fn pixel_goes_before_the_last_body_end_tag() {
    let options = RewriteOptions {
        pixel_html: Some("<img src=\"https://t.example.com/o/x.gif\">"),
        shown_address_base: None,
        ..options()
    };
    let (out, found) = run_with(
        "<html><BODY>hi<!-- </body> --></BODY >\r\n</html>",
        &options,
    );
    assert!(found.is_empty(), "our own pixel is not proxied: {found:?}");
    assert_eq!(
        out,
        "<html><BODY>hi<!-- </body> --><img src=\"https://t.example.com/o/x.gif\"></BODY >\r\n</html>"
    );
}

#[test]
fn pixel_is_appended_without_a_body_end_tag() {
    let options = RewriteOptions {
        pixel_html: Some("<img src=p>"),
        shown_address_base: None,
        ..options()
    };
    let (out, _) = run_with("<p>fragment</p>", &options);
    assert_eq!(out, "<p>fragment</p><img src=p>");
    let (out, _) = run_with("<body><p>no end</p>", &options);
    assert_eq!(out, "<body><p>no end</p><img src=p>");
}

#[test]
fn everything_off_returns_the_input() {
    let html = "<a href='http://x.test'>x</a>\r\n<img src=http://i.test>";
    let options = RewriteOptions {
        track_links: false,
        proxy_images: false,
        pixel_html: None,
        shown_address_base: None,
        ..options()
    };
    let (out, found) = run_with(html, &options);
    assert!(found.is_empty());
    assert_eq!(out, html);
}

#[test]
fn first_of_duplicate_hrefs_is_the_link() {
    let (out, found) = run(r#"<a href="http://first.test" href="http://second.test">x</a>"#);
    assert_eq!(urls(&found), ["http://first.test"]);
    assert_eq!(
        out,
        r#"<a href="https://t.test/c/1" href="http://second.test">x</a>"#
    );
}

#[test]
fn browser_url_cleans_without_allocating_when_it_can() {
    assert!(matches!(
        browser_url(" http://x.test "),
        Cow::Borrowed("http://x.test")
    ));
    assert_eq!(browser_url("\u{0}http://x.test\u{1F}"), "http://x.test");
    assert_eq!(browser_url("ht\ttp://x.test"), "http://x.test");
}

#[test]
fn sendgrid_and_mailgun_markers_are_aliases_of_the_opt_out() {
    let html = "<a clicktracking=off href=\"http://x.test\">x</a><a href='http://y.test'\n disable-tracking=\"true\">y</a><a clicktracking=\"on\" href=\"http://z.test\">z</a><a disable-tracking=\"false\" href=\"http://w.test\">w</a>";
    let (out, found) = run(html);
    assert_eq!(urls(&found), ["http://z.test", "http://w.test"]);
    assert_eq!(
        out,
        "<a href=\"http://x.test\">x</a><a href='http://y.test'>y</a><a href=\"https://t.test/c/1\">z</a><a href=\"https://t.test/c/2\">w</a>"
    );
}

#[test]
fn foreign_markers_mean_links_only_and_stay_on_images() {
    let html = r#"<img clicktracking="off" src="http://i.test/a.png">"#;
    let (out, found) = run(html);
    assert_eq!(urls(&found), ["http://i.test/a.png"]);
    assert!(out.contains("clicktracking=\"off\""), "{out}");
}

#[test]
fn links_showing_another_sites_address_are_left_as_written_and_keep_their_number() {
    let html = concat!(
        r#"<a href="https://acme-inc.com/">www.acme-inc.com</a>"#,
        r#"<a href="https://shop.brand.example/x">Shop</a>"#,
        r#"<a href="http://brand.example/">Copy: <b>https://www.brand.example/</b></a>"#,
        r#"<a href="https://acme-inc.com/c">Visit <span>HTMLemail.io</span></a>"#,
    );
    let with_rule = RewriteOptions {
        shown_address_base: Some("https://click.brand.example"),
        ..options()
    };
    let (out, found) = run_with(html, &with_rule);
    assert_eq!(
        out,
        concat!(
            r#"<a href="https://acme-inc.com/">www.acme-inc.com</a>"#,
            r#"<a href="https://t.test/c/2">Shop</a>"#,
            r#"<a href="https://t.test/c/3">Copy: <b>https://www.brand.example/</b></a>"#,
            r#"<a href="https://acme-inc.com/c">Visit <span>HTMLemail.io</span></a>"#,
        )
    );
    assert_eq!(
        found.iter().map(|l| l.position).collect::<Vec<_>>(),
        [2, 3],
        "the links left keep numbers 1 and 4"
    );
    assert_eq!(positions_left_as_written(html, &with_rule).unwrap(), [1, 4]);
    // An https:// text behind a plain-http tracking base is a mismatch too.
    let http_base = RewriteOptions {
        shown_address_base: Some("http://click.brand.example"),
        ..options()
    };
    assert_eq!(
        positions_left_as_written(html, &http_base).unwrap(),
        [1, 3, 4]
    );
    // Without the rule every link is tracked, numbered the same.
    let (_, all) = run(html);
    assert_eq!(
        all.iter().map(|l| l.position).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert!(positions_left_as_written(html, &options())
        .unwrap()
        .is_empty());
}

#[test]
fn a_creatives_links_are_numbered_as_its_personalised_letters_will_be() {
    let html = r#"<a href="https://shop.example/u/{{ id }}" data-linktrack-name="mine">Yours</a>
<a href="{{ offer_url }}">Offer</a> <a href="https://x.example/*|MERGE|*">Mailchimp's</a>
<a href="https://shop.example/sale" data-linktrack-name="cta">Sale</a>"#;
    let links = creative_click_links(html, OWN_BASE).unwrap();
    let summary: Vec<(u32, Option<&str>, &str)> = links
        .iter()
        .map(|l| (l.position, l.name.as_deref(), l.url.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            (1, Some("mine"), "https://shop.example/u/{{ id }}"),
            (2, None, "{{ offer_url }}"),
            (3, Some("cta"), "https://shop.example/sale"),
        ]
    );
    // The letter made from it numbers the same links the same way.
    let letter = html
        .replace("{{ id }}", "7")
        .replace("{{ offer_url }}", "https://shop.example/offer");
    let mut positions = Vec::new();
    rewrite(&letter, &options(), |found| {
        if found.kind == FoundKind::Click {
            positions.push((found.position, found.url.clone()));
        }
        String::new()
    })
    .unwrap();
    assert_eq!(
        positions,
        [
            (1, "https://shop.example/u/7".to_owned()),
            (2, "https://shop.example/offer".to_owned()),
            (3, "https://shop.example/sale".to_owned()),
        ]
    );
}
