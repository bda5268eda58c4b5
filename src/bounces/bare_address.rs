//! The bare address in a header value or a line of a text bounce, read
//! the same way by the report reader (`parse.rs`) and the text reader
//! (`text.rs`).

/// The bare address of `Name <a@b>` or `a@b`.
pub(crate) fn plain_address(value: &str) -> Option<String> {
    let inner = match (value.rfind('<'), value.rfind('>')) {
        (Some(open), Some(close)) if open < close => &value[open + 1..close],
        _ => value,
    };
    let inner = inner.trim();
    (inner.contains('@') && !inner.contains(char::is_whitespace)).then(|| inner.to_owned())
}
