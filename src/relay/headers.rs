//! A message's header block, read and edited as bytes (RFC 5322 fields,
//! folded lines included): a field's value, fields removed, fields added.
//! What is not edited stays byte for byte.

/// The end of the top header block: the offset just past its blank line.
/// `None` when the message has no blank line after its fields.
pub(crate) fn header_block_end(raw: &[u8]) -> Option<usize> {
    if raw.starts_with(b"\r\n") {
        return Some(2); // no fields at all, then the body
    }
    memchr::memmem::find(raw, b"\r\n\r\n").map(|at| at + 4)
}

/// The fields of a header block, each with its folded lines: (name, the
/// whole field's bytes).
fn fields(block: &[u8]) -> Vec<(&[u8], &[u8])> {
    let mut found: Vec<(&[u8], &[u8])> = Vec::new();
    let mut start = 0;
    while start < block.len() {
        let end = match memchr::memmem::find(&block[start..], b"\r\n") {
            Some(at) => start + at + 2,
            None => block.len(),
        };
        let line = &block[start..end];
        let folded = line.first().is_some_and(|b| *b == b' ' || *b == b'\t');
        match found.last_mut() {
            Some((_, field)) if folded => {
                // Extend the previous field over its continuation line.
                let field_start = field.as_ptr() as usize - block.as_ptr() as usize;
                *field = &block[field_start..end];
            }
            _ => {
                let name = line.split(|b| *b == b':').next().unwrap_or_default();
                found.push((name, line));
            }
        }
        start = end;
    }
    found
}

/// The unfolded value of the first field `name` (any case) in the
/// message's top header block.
pub(crate) fn field_value(raw: &[u8], name: &str) -> Option<String> {
    let block = &raw[..header_block_end(raw)?];
    fields(block)
        .into_iter()
        .find(|(field, _)| field.trim_ascii().eq_ignore_ascii_case(name.as_bytes()))
        .map(|(field, whole)| {
            let value = &whole[field.len() + 1..];
            String::from_utf8_lossy(value)
                .replace("\r\n", "")
                .trim()
                .to_owned()
        })
}

/// Every field `name` (any case) of the message's top header block, each
/// whole: its name, value, folded lines and line end, byte for byte.
pub(crate) fn whole_fields<'a>(raw: &'a [u8], name: &str) -> Vec<&'a [u8]> {
    let Some(end) = header_block_end(raw) else {
        return Vec::new();
    };
    fields(&raw[..end])
        .into_iter()
        .filter(|(field, _)| field.trim_ascii().eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, whole)| whole)
        .collect()
}

/// The message without the top-block fields equal byte for byte to one
/// of `dropped` (as [`whole_fields`] gives them); the rest as it was.
pub(crate) fn without_whole_fields(raw: &[u8], dropped: &[Vec<u8>]) -> Vec<u8> {
    let Some(end) = header_block_end(raw) else {
        return raw.to_vec();
    };
    let mut out = Vec::with_capacity(raw.len());
    for (_, whole) in fields(&raw[..end]) {
        if !dropped.iter().any(|d| d.as_slice() == whole) {
            out.extend_from_slice(whole);
        }
    }
    out.extend_from_slice(&raw[end..]);
    out
}

/// `block` (a header block) without the fields named in `names`
/// (lowercase), folded lines and all.
pub(crate) fn without_fields(block: &[u8], names: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(block.len());
    for (name, whole) in fields(block) {
        let lower = name.trim_ascii().to_ascii_lowercase();
        if !names.iter().any(|n| n.as_bytes() == lower) {
            out.extend_from_slice(whole);
        }
    }
    out
}

/// The message with `names` removed from its top header block and `added`
/// (complete `Name: value` lines, no line ends) put first.
pub(crate) fn edit_top_fields(raw: &[u8], names: &[&str], added: &[String]) -> Vec<u8> {
    let Some(end) = header_block_end(raw) else {
        return raw.to_vec();
    };
    let mut out = Vec::with_capacity(raw.len() + 256);
    for line in added {
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(&without_fields(&raw[..end], names));
    out.extend_from_slice(&raw[end..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_and_removed_with_their_folded_lines() {
        let raw = b"X-Linktrack-Mailing: spring\r\n 2026\r\nSubject: hi\r\n\r\nbody\r\n";
        assert_eq!(
            field_value(raw, "x-linktrack-mailing").as_deref(),
            Some("spring 2026")
        );
        assert_eq!(field_value(raw, "subject").as_deref(), Some("hi"));
        assert_eq!(field_value(raw, "to"), None);
        let edited = edit_top_fields(
            raw,
            &["x-linktrack-mailing"],
            &["List-Unsubscribe: <u>".into()],
        );
        assert_eq!(
            edited,
            b"List-Unsubscribe: <u>\r\nSubject: hi\r\n\r\nbody\r\n"
        );
    }
}
