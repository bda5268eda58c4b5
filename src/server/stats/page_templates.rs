//! The dashboard's minijinja templates, compiled in, with the filters they
//! use; [`StatsState`](super::StatsState) holds them once built.

use crate::letter;
use minijinja::Environment;

/// The dashboard's templates.
pub(super) fn templates() -> Result<Environment<'static>, minijinja::Error> {
    let mut env = Environment::new();
    // Subjects are templates: shown with placeholders, never as `{{ … }}`,
    // and never run (the index lists 500 of them per request).
    env.add_filter("preview", |subject: String| letter::preview_text(&subject));
    env.add_filter("utc_label", utc_label);
    env.add_template("index.html", include_str!("templates/index.html"))?;
    env.add_template("mailing.html", include_str!("templates/mailing.html"))?;
    Ok(env)
}

/// An RFC 3339 time as `2026-11-22 10:05 UTC`: what the page shows until
/// its script puts the time in the viewer's zone (and what a browser
/// without script keeps). Anything else is shown as it is.
fn utc_label(at: String) -> String {
    match chrono::DateTime::parse_from_rfc3339(&at) {
        Ok(time) => time
            .with_timezone(&chrono::Utc)
            .format("%Y-%m-%d %H:%M UTC")
            .to_string(),
        Err(_) => at,
    }
}
