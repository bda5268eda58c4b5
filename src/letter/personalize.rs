//! Personalisation: a mailing's HTML and subject as minijinja templates.
//!
//! A [`Template`] is compiled once per mailing and rendered once per
//! recipient. Undefined values are an error (minijinja's strict mode), and
//! before rendering the recipient's fields are checked against the names the
//! template uses, so the error says which field is missing rather than where
//! rendering stopped. JSON `null` renders as nothing (not minijinja's `none`),
//! because a recipient's empty field must not print a word into the letter.
//!
//! An empty value printed (an empty or blank string, `null`) is counted per
//! thread ([`count_empty_values`]): the build warns about letters that
//! printed one. `default` gives such a field a value of its own
//! (`{{ first_name | default("there") }}`): unlike minijinja's, it takes an
//! empty or blank string and `null` as missing too, which is what a
//! recipients file's empty column means.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::fmt;

use minijinja::{AutoEscape, Environment, UndefinedBehavior};

thread_local! {
    /// Empty values printed by renders on this thread: [`count_empty_values`].
    static EMPTY_VALUES: Cell<u32> = const { Cell::new(0) };
}

/// Run `render` (renders of [`Template`]s on this thread) and count the
/// empty values they printed: a merge field left empty by the recipient's
/// row, where no `default` filled it.
pub fn count_empty_values<T>(render: impl FnOnce() -> T) -> (T, u32) {
    let before = EMPTY_VALUES.with(Cell::get);
    let out = render();
    let after = EMPTY_VALUES.with(Cell::get);
    (out, after.wrapping_sub(before))
}

/// `null`, undefined, or a string of nothing but white space.
fn is_empty_value(value: &minijinja::Value) -> bool {
    value.is_none()
        || value.is_undefined()
        || value.as_str().is_some_and(|text| text.trim().is_empty())
}

/// The `default` filter (and its alias `d`): `fallback` when the value is
/// missing, `null` or an empty or blank string; with `lax` true also for
/// any other false value (Jinja's `default(x, true)`).
fn default_filter(
    value: &minijinja::Value,
    fallback: Option<minijinja::Value>,
    lax: Option<bool>,
) -> minijinja::Value {
    if is_empty_value(value) || (lax == Some(true) && !value.is_true()) {
        fallback.unwrap_or_else(|| minijinja::Value::from(""))
    } else {
        value.clone()
    }
}
use serde_json::{Map, Value};

/// One mailing's template (HTML body or subject line), compiled.
pub struct Template {
    name: String,
    environment: Environment<'static>,
    variables: BTreeSet<String>,
}

impl fmt::Debug for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Template")
            .field("name", &self.name)
            .field("variables", &self.variables)
            .finish_non_exhaustive()
    }
}

/// The template does not compile (for instance a Handlebars `{{#each}}`
/// creative: such a mailing must be sent with personalisation off).
#[derive(Debug, thiserror::Error)]
#[error("template {name:?}{}: {reason}", line_suffix(*line))]
pub struct TemplateError {
    pub name: String,
    /// 1-based line of the error, when minijinja knows it.
    pub line: Option<usize>,
    pub reason: String,
}

/// One recipient's letter could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("recipient has no field {field:?}, which template {template:?} uses")]
    MissingField { template: String, field: String },
    #[error("template {template:?}{}: {reason}", line_suffix(*line))]
    Template {
        template: String,
        line: Option<usize>,
        reason: String,
    },
}

fn line_suffix(line: Option<usize>) -> String {
    line.map(|line| format!(" line {line}")).unwrap_or_default()
}

fn reason(error: &minijinja::Error) -> String {
    match error.detail() {
        Some(detail) => format!("{}: {detail}", error.kind()),
        None => error.kind().to_string(),
    }
}

impl Template {
    /// Compiles `source`. `html = true` HTML-escapes every value (the letter
    /// body); `false` writes values as they are (the subject line).
    pub fn compile(name: &str, source: &str, html: bool) -> Result<Template, TemplateError> {
        let compile_error = |error: minijinja::Error| TemplateError {
            name: name.to_owned(),
            line: error.line(),
            reason: reason(&error),
        };
        let mut environment = environment(html);
        environment
            .add_template_owned(name.to_owned(), source.to_owned())
            .map_err(compile_error)?;
        let variables = {
            let template = environment.get_template(name).map_err(compile_error)?;
            // `range`, `dict`, `namespace`… look like variables to the parser
            // but are the environment's globals, not recipient fields.
            template
                .undeclared_variables(false)
                .into_iter()
                .filter(|variable| !environment.globals().any(|(global, _)| global == variable))
                .collect()
        };
        Ok(Template {
            name: name.to_owned(),
            environment,
            variables,
        })
    }

    /// The top-level names the template reads (`user` for `{{ user.name }}`).
    pub fn variables(&self) -> BTreeSet<String> {
        self.variables.clone()
    }

    /// Renders the template for one recipient.
    pub fn render(&self, context: &Map<String, Value>) -> Result<String, RenderError> {
        if let Some(missing) = self
            .variables
            .iter()
            .find(|field| !context.contains_key(field.as_str()))
        {
            return Err(RenderError::MissingField {
                template: self.name.clone(),
                field: missing.clone(),
            });
        }
        let render_error = |error: minijinja::Error| RenderError::Template {
            template: self.name.clone(),
            line: error.line(),
            reason: reason(&error),
        };
        self.environment
            .get_template(&self.name)
            .and_then(|template| template.render(minijinja::value::Serde(context)))
            .map_err(render_error)
    }
}

fn environment(html: bool) -> Environment<'static> {
    let mut environment = Environment::new();
    environment.set_undefined_behavior(UndefinedBehavior::Strict);
    let escape = if html {
        AutoEscape::Html
    } else {
        AutoEscape::None
    };
    environment.set_auto_escape_callback(move |_| escape.clone());
    // Jinja drops a template's final newline by default; a letter is sent as written.
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .build();
    // The default delimiters always build; keep the default syntax otherwise.
    if let Ok(syntax) = syntax {
        environment.set_syntax(syntax);
    }
    environment.add_filter("default", default_filter);
    environment.add_filter("d", default_filter);
    environment.set_formatter(|out, state, value| {
        if is_empty_value(value) {
            EMPTY_VALUES.with(|count| count.set(count.get().wrapping_add(1)));
        }
        if value.is_none() {
            return Ok(());
        }
        if *state.auto_escape() == AutoEscape::Html && !value.is_safe() {
            // minijinja's HTML escaping also writes `/` as `&#x2f;`, which
            // turns every URL value (unsubscribe_url above all) into an
            // unreadable entity soup some link scanners mishandle. These five
            // characters are all that text and quoted attributes need.
            let text = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            return out
                .write_str(&escape_html(&text))
                .map_err(minijinja::Error::from);
        }
        minijinja::escape_formatter(out, state, value)
    });
    environment
}

/// Escape the characters that can end text or a quoted attribute.
pub(crate) fn escape_html(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(['&', '<', '>', '"', '\'']) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            other => escaped.push(other),
        }
    }
    std::borrow::Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn default_fills_empty_blank_and_null_fields_and_empty_values_are_counted() {
        let template = Template::compile(
            "subject",
            "{{ first_name | default(\"there\") }}, {{ city }}",
            false,
        )
        .unwrap();
        for (name, greeting) in [
            (json!(""), "there"),
            (json!("  "), "there"),
            (json!(null), "there"),
            (json!("Ann"), "Ann"),
        ] {
            let (out, empty) = count_empty_values(|| {
                template.render(&context(json!({"first_name": name, "city": "Oslo"})))
            });
            assert_eq!(out.unwrap(), format!("{greeting}, Oslo"), "{name}");
            assert_eq!(empty, 0, "{name}");
        }
        let (out, empty) = count_empty_values(|| {
            template.render(&context(json!({"first_name": "Ann", "city": ""})))
        });
        assert_eq!(out.unwrap(), "Ann, ");
        assert_eq!(empty, 1);
        let lax = Template::compile("s", "{{ n | default(\"none\", true) }}", false).unwrap();
        assert_eq!(lax.render(&context(json!({"n": 0}))).unwrap(), "none");
        assert_eq!(lax.render(&context(json!({"n": 3}))).unwrap(), "3");
    }

    fn context(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn html_values_are_escaped() {
        let template = Template::compile("body", "<p>Hello {{ name }}!</p>", true).unwrap();
        let out = template
            .render(&context(
                json!({"name": "<script>alert('x')</script> & co"}),
            ))
            .unwrap();
        assert_eq!(
            out,
            "<p>Hello &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; co!</p>"
        );
    }

    #[test]
    fn urls_in_values_stay_readable_in_attributes() {
        let template = Template::compile("body", "<a href=\"{{ url }}\">x</a>", true).unwrap();
        let out = template
            .render(&context(
                json!({"url": "https://t.example/u/0a?x=1&y=\"2\""}),
            ))
            .unwrap();
        assert_eq!(
            out,
            "<a href=\"https://t.example/u/0a?x=1&amp;y=&quot;2&quot;\">x</a>"
        );
    }

    #[test]
    fn subject_is_not_escaped() {
        let template = Template::compile("subject", "{{ name }} & <you>: 50% off", false).unwrap();
        let out = template
            .render(&context(json!({"name": "Tom & Jerry"})))
            .unwrap();
        assert_eq!(out, "Tom & Jerry & <you>: 50% off");
    }

    #[test]
    fn non_ascii_names() {
        let template =
            Template::compile("body", "{{ name }}様、{{ city }}へようこそ\n", true).unwrap();
        let out = template
            .render(&context(
                json!({"name": "山田 太郎", "city": "Zürich — Genève"}),
            ))
            .unwrap();
        assert_eq!(out, "山田 太郎様、Zürich — Genèveへようこそ\n");
    }

    #[test]
    fn missing_field_is_named() {
        let template =
            Template::compile("body", "{{ first_name }} {{ user.last }} {{ plan }}", true).unwrap();
        let error = template
            .render(&context(json!({"first_name": "A", "plan": "pro"})))
            .unwrap_err();
        assert!(
            matches!(&error, RenderError::MissingField { field, .. } if field == "user"),
            "{error:?}"
        );
        assert!(error.to_string().contains("\"user\""), "{error}");
    }

    #[test]
    fn missing_attribute_of_a_present_field_is_a_render_error() {
        let template = Template::compile("body", "line one\n{{ user.last }}", true).unwrap();
        let error = template.render(&context(json!({"user": {}}))).unwrap_err();
        assert!(
            matches!(error, RenderError::Template { line: Some(2), .. }),
            "{error:?}"
        );
    }

    #[test]
    fn variables_are_top_level_names_without_globals_or_locals() {
        let source = "{% for item in items %}{{ item.name }}{% endfor %}{{ user.email }}\
                      {% set greeting = 'hi' %}{{ greeting }}{% for i in range(3) %}{{ i }}{% endfor %}";
        let template = Template::compile("body", source, true).unwrap();
        let expected: BTreeSet<String> = ["items", "user"].map(String::from).into();
        assert_eq!(template.variables(), expected);
    }

    #[test]
    fn handlebars_creative_is_refused_with_its_line() {
        let source = "<html>\n<body>\n{{#each items}}<li>{{this}}</li>{{/each}}\n</body>";
        let error = Template::compile("creative", source, true).unwrap_err();
        assert_eq!(error.line, Some(3), "{error:?}");
        assert!(error.to_string().contains("line 3"), "{error}");
        assert!(error.to_string().contains("syntax error"), "{error}");
    }

    #[test]
    fn unclosed_block_is_refused() {
        let error = Template::compile("x", "a\n{% if x %}\nb", true).unwrap_err();
        assert!(error.line.is_some(), "{error:?}");
    }

    #[test]
    fn other_engines_merge_tags_in_text_pass_through() {
        let source = "<a href=\"*|UNSUB|*\">u</a> <%= name %> %%first%% $name";
        let template = Template::compile("body", source, true).unwrap();
        assert!(template.variables().is_empty());
        assert_eq!(template.render(&Map::new()).unwrap(), source);
    }

    #[test]
    fn null_renders_as_nothing_and_trailing_newline_is_kept() {
        let template = Template::compile("body", "Hi {{ nick }}!\r\n", true).unwrap();
        let out = template.render(&context(json!({"nick": null}))).unwrap();
        assert_eq!(out, "Hi !\r\n");
    }

    #[test]
    fn numbers_and_booleans_render() {
        let template =
            Template::compile("body", "{{ n }} {% if vip %}VIP{% endif %}", true).unwrap();
        let out = template
            .render(&context(json!({"n": 3, "vip": true})))
            .unwrap();
        assert_eq!(out, "3 VIP");
    }
}

/// A template shown without a recipient (the dashboard's title and click
/// map): every field reads as a neutral placeholder `‹name›`, never as
/// template syntax. Never fails: a template that does not render that way
/// (a loop over a field, say) has its tags replaced textually.
///
/// Unbounded: for the builder's own checks and tests. Anything on a request
/// path uses [`preview_bounded`] (a creative's loops run as written) or
/// [`preview_text`] (nothing runs).
pub fn preview(source: &str, html: bool) -> String {
    // Why it does not render is no matter here: the tags go either way.
    let rendered = Template::compile("preview", source, html)
        .ok()
        .and_then(|template| template.render(&placeholders(&template)).ok());
    rendered.unwrap_or_else(|| strip_tags(source))
}

/// What a preview may spend: a hostile creative (two nested
/// `range(10000)` loops, `'x' * 100000` five hundred times) must not hold a
/// thread for seconds or grow the process by hundreds of megabytes.
#[derive(Debug, Clone, Copy)]
pub struct PreviewLimits {
    /// minijinja instructions (about one per tag, loop turn or text chunk).
    pub fuel: u64,
    /// Bytes of output.
    pub max_output: usize,
    /// Nesting of macros, includes and blocks.
    pub recursion: usize,
}

impl Default for PreviewLimits {
    fn default() -> Self {
        PreviewLimits {
            fuel: 50_000,
            max_output: 4 << 20,
            recursion: 32,
        }
    }
}

/// The template ran past a [`PreviewLimits`] bound.
#[derive(Debug, thiserror::Error)]
#[error("the template exceeds the preview's limits ({0})")]
pub struct PreviewLimited(pub String);

/// [`preview`] within `limits`: a template that compiles but cannot render
/// with placeholders is stripped textually as there; one that runs past a
/// limit is an error, for the caller to say so (and show [`preview_text`]).
pub fn preview_bounded(
    source: &str,
    html: bool,
    limits: PreviewLimits,
) -> Result<String, PreviewLimited> {
    let Ok(mut template) = Template::compile("preview", source, html) else {
        return Ok(strip_tags(source));
    };
    template.environment.set_fuel(Some(limits.fuel));
    template.environment.set_recursion_limit(limits.recursion);
    let context = placeholders(&template);
    let mut out = CappedWriter {
        bytes: Vec::new(),
        max: limits.max_output,
    };
    let rendered = template
        .environment
        .get_template("preview")
        .and_then(|t| t.render_captured_to(minijinja::value::Serde(&context), &mut out));
    match rendered {
        Ok(_) => Ok(String::from_utf8_lossy(&out.bytes).into_owned()),
        Err(err) if err.kind() == minijinja::ErrorKind::OutOfFuel => Err(PreviewLimited(format!(
            "more than {} instructions",
            limits.fuel
        ))),
        Err(_) if out.bytes.len() >= limits.max_output => Err(PreviewLimited(format!(
            "more than {} bytes of output",
            limits.max_output
        ))),
        Err(err) if err.to_string().contains("recursion") => Err(PreviewLimited(format!(
            "nesting deeper than {}",
            limits.recursion
        ))),
        Err(_) => Ok(strip_tags(source)),
    }
}

/// A template shown with its tags removed and `{{ field }}` as `‹field›`:
/// nothing in it runs. For subjects on the dashboard's pages.
pub fn preview_text(source: &str) -> String {
    strip_tags(source)
}

/// Every field the template reads, as `‹name›`.
fn placeholders(template: &Template) -> Map<String, Value> {
    template
        .variables()
        .into_iter()
        .map(|name| {
            let placeholder = Value::String(format!("‹{name}›"));
            (name, placeholder)
        })
        .collect()
}

/// An output buffer that refuses to grow past `max` bytes (the write fails,
/// which stops the render).
struct CappedWriter {
    bytes: Vec<u8>,
    max: usize,
}

impl std::io::Write for CappedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.max {
            self.bytes.resize(self.max, b' ');
            return Err(std::io::Error::other("preview output limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `{{ expr }}` → `‹expr›`; `{% … %}` and `{# … #}` are dropped.
fn strip_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find(['{']) {
        let (before, from) = rest.split_at(start);
        out.push_str(before);
        let close = match from.get(..2) {
            Some("{{") => "}}",
            Some("{%") => "%}",
            Some("{#") => "#}",
            _ => {
                out.push('{');
                rest = &from[1..];
                continue;
            }
        };
        let Some(end) = from[2..].find(close) else {
            // An unterminated tag: its text without the braces.
            out.push_str(from[2..].trim());
            return out;
        };
        if close == "}}" {
            out.push('‹');
            out.push_str(from[2..2 + end].trim());
            out.push('›');
        }
        rest = &from[2 + end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod preview_tests {
    use super::{preview, preview_bounded, PreviewLimits};

    #[test]
    fn a_runaway_template_stops_at_the_preview_limits() {
        let loops = "{% if first_name is startingwith('‹') %}{% for i in range(10000) %}\
                     {% for j in range(10000) %}{{ j }}{% endfor %}{% endfor %}{% endif %}";
        let err = preview_bounded(loops, false, PreviewLimits::default()).unwrap_err();
        assert!(err.to_string().contains("instructions"), "{err}");
        // Text whose output alone is past the cap: minijinja charges string
        // repetition (`'x' * 100000`) by its length, so a repeated string
        // runs out of fuel before it reaches the cap.
        let big = format!("{}{{{{ first_name }}}}", "x".repeat(5 << 20));
        let err = preview_bounded(&big, true, PreviewLimits::default()).unwrap_err();
        assert!(err.to_string().contains("bytes of output"), "{err}");
        assert_eq!(
            preview_bounded("Hi {{ first_name }}", false, PreviewLimits::default()).unwrap(),
            "Hi ‹first_name›"
        );
    }

    #[test]
    fn fields_read_as_placeholders_never_as_template_syntax() {
        assert_eq!(
            preview("{{ first_name }}, this week…", false),
            "‹first_name›, this week…"
        );
        assert_eq!(
            preview("<p>Hello {{ first_name }} <{{ email }}></p>", true),
            "<p>Hello ‹first_name› <‹email›></p>"
        );
    }

    #[test]
    fn a_template_that_cannot_render_without_data_is_stripped_textually() {
        let out = preview(
            "{% for i in items %}<li>{{ i.name }}</li>{% endfor %}{{ x",
            false,
        );
        assert!(!out.contains("{%"), "{out}");
        assert_eq!(out, "<li>‹i.name›</li>x");
    }
}
