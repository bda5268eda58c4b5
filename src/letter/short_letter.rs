//! Short letters with an image, as SpamAssassin sizes them.
//!
//! SpamAssassin's `HTML_IMAGE_ONLY_04` … `_32` fire on an HTML part that
//! has an `<img>` and at most 3,200 characters, in buckets of 400 whose
//! scores go up and down (0.59 to 2.80). A tracked letter is longer than
//! the letter as written (tokens, the pixel), so it can move to a worse
//! bucket, and the pixel alone gives an image to a letter that had none.
//! Past 3,200 characters no bucket applies: such a letter is padded with
//! spaces before `</body>`, which no reader sees and no text part shows.

/// The longest HTML part (in characters) `HTML_IMAGE_ONLY_*` looks at.
pub const IMAGE_ONLY_MAX_CHARS: usize = 3200;

/// Pads `html` with spaces before its last `</body>` (or at its end) to
/// one character past [`IMAGE_ONLY_MAX_CHARS`] when it has an `<img>` and is
/// no longer than that; returns the spaces added.
pub fn pad_past_image_only_sizes(html: &mut String) -> usize {
    if html.len() > 4 * IMAGE_ONLY_MAX_CHARS {
        return 0; // more bytes than 3,200 characters can take
    }
    let chars = html.chars().count();
    if chars > IMAGE_ONLY_MAX_CHARS || !has_image(html) {
        return 0;
    }
    let spaces = IMAGE_ONLY_MAX_CHARS + 1 - chars;
    let at = last_body_end(html).unwrap_or(html.len());
    html.insert_str(at, &" ".repeat(spaces));
    spaces
}

fn has_image(html: &str) -> bool {
    html.as_bytes()
        .windows(4)
        .any(|w| w.eq_ignore_ascii_case(b"<img"))
}

fn last_body_end(html: &str) -> Option<usize> {
    html.as_bytes()
        .windows(6)
        .rposition(|w| w.eq_ignore_ascii_case(b"</body"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_letter_with_an_image_is_padded_before_the_body_end() {
        let mut html = "<p>Hi</p><IMG src=x></BODY></html>".to_owned();
        let added = pad_past_image_only_sizes(&mut html);
        assert_eq!(html.chars().count(), IMAGE_ONLY_MAX_CHARS + 1);
        assert_eq!(added, IMAGE_ONLY_MAX_CHARS + 1 - 34);
        assert!(html.starts_with("<p>Hi</p><IMG src=x>   "));
        assert!(html.ends_with("   </BODY></html>"));
    }

    #[test]
    fn letters_without_images_or_long_enough_stay_as_they_are() {
        let mut plain = "<p>Hi</p>".to_owned();
        assert_eq!(pad_past_image_only_sizes(&mut plain), 0);
        assert_eq!(plain, "<p>Hi</p>");
        let mut long = format!("<img src=x>{}", "é".repeat(IMAGE_ONLY_MAX_CHARS));
        let before = long.clone();
        assert_eq!(pad_past_image_only_sizes(&mut long), 0);
        assert_eq!(long, before);
        // Characters, not bytes: 3,200 of them in more bytes still count.
        let mut wide = format!("<img>{}", "é".repeat(IMAGE_ONLY_MAX_CHARS - 5));
        assert_eq!(pad_past_image_only_sizes(&mut wide), 1);
    }
}
