//! The log every command writes to standard error: human-readable text or
//! JSON lines, filtered by `RUST_LOG`, coloured only on a terminal.

pub(super) fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(log_colour(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR"),
        ))
        .with_writer(std::io::stderr);
    // A second initialisation (tests calling `run` twice) is harmless.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Colour codes only on a terminal, and never when `NO_COLOR` is set to
/// anything (<https://no-color.org>): a log file or a pipe gets plain text.
fn log_colour(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|value| value.is_empty())
}
