//! A personalised link's URL as the creative writes it
//! (`https://shop.example/u/{{ id }}?ref=news`), read back out of the
//! URLs it became, so that a repoint can carry a letter's own values into
//! a new target (`https://shop.example/account/{{ id }}`).
//!
//! No recipient's fields are kept after a build; the values each letter's
//! link was made with are in its stored URL, between the template's fixed
//! text. A field is named by its whole expression (`email|urlencode` is a
//! field of its own), so a value is carried over exactly as it was written
//! into the letter.

use regex::Regex;
use std::collections::HashMap;

/// Why a URL cannot be used as a template for a repoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("a link made with {{% … %}} statements cannot be repointed with fields")]
    Statements,
    #[error("an unclosed {{{{ in the URL")]
    Unclosed,
    #[error("an empty {{{{ }}}} in the URL")]
    EmptyField,
    #[error("field {{{{ {field} }}}} is not in the link's URL (its fields: {known})")]
    UnknownField { field: String, known: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    /// The expression between `{{` and `}}`, its spaces normalised.
    Field(String),
}

/// A URL split into fixed text and fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkTemplate {
    parts: Vec<Part>,
}

impl LinkTemplate {
    /// Split `url` at its `{{ … }}` fields.
    pub fn parse(url: &str) -> Result<LinkTemplate, TemplateError> {
        if url.contains("{%") {
            return Err(TemplateError::Statements);
        }
        let mut parts = Vec::new();
        let mut rest = url;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let after = &rest[open + 2..];
            let close = after.find("}}").ok_or(TemplateError::Unclosed)?;
            let field = normalise(&after[..close]);
            if field.is_empty() {
                return Err(TemplateError::EmptyField);
            }
            parts.push(Part::Field(field));
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        Ok(LinkTemplate { parts })
    }

    /// Whether the URL has any field (else it is the same in every letter).
    pub fn has_fields(&self) -> bool {
        self.fields().next().is_some()
    }

    /// Its fields, in order (a field used twice is named twice).
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Field(field) => Some(field.as_str()),
            Part::Text(_) => None,
        })
    }

    /// The URL with each field replaced by `value(field)`.
    fn fill<'v>(&self, value: impl Fn(&str) -> &'v str) -> String {
        let mut url = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => url.push_str(text),
                Part::Field(field) => url.push_str(value(field)),
            }
        }
        url
    }
}

/// `{{ email | urlencode }}` and `{{email|urlencode}}` are one field.
fn normalise(expression: &str) -> String {
    let mut field = String::new();
    for piece in expression.split_whitespace() {
        field.push_str(piece);
    }
    field
}

/// A new target made from a built link's fields: checked once, then
/// applied to every letter's stored URL at the redirect.
#[derive(Debug, Clone)]
pub struct Refill {
    /// Matches a URL the built template made, one group per field.
    built: Regex,
    built_fields: Vec<String>,
    target: LinkTemplate,
}

impl Refill {
    /// A refill from the link's URL as built to `target`; refused when the
    /// target names a field the built URL does not have.
    pub fn new(built: &str, target: &str) -> Result<Refill, TemplateError> {
        let built_template = LinkTemplate::parse(built)?;
        let target = LinkTemplate::parse(target)?;
        let built_fields: Vec<String> = built_template.fields().map(str::to_owned).collect();
        if let Some(unknown) = target
            .fields()
            .find(|field| !built_fields.iter().any(|f| f == field))
        {
            return Err(TemplateError::UnknownField {
                field: unknown.to_owned(),
                known: known_fields(&built_fields),
            });
        }
        Ok(Refill {
            built: pattern(&built_template),
            built_fields,
            target,
        })
    }

    /// The new target for a letter whose link was built as `stored`; `None`
    /// when `stored` is not a URL the built template makes (or a field
    /// used twice has two values).
    pub fn apply(&self, stored: &str) -> Option<String> {
        let captures = self.built.captures(stored)?;
        let mut values: HashMap<&str, &str> = HashMap::new();
        for (index, field) in self.built_fields.iter().enumerate() {
            let value = captures.get(index + 1)?.as_str();
            if *values.entry(field.as_str()).or_insert(value) != value {
                return None;
            }
        }
        Some(
            self.target
                .fill(|field| values.get(field).copied().unwrap_or_default()),
        )
    }

    /// The target with every field filled with `x`: what the target check
    /// (scheme, host) looks at.
    pub fn sample_target(&self) -> String {
        self.target.fill(|_| "x")
    }
}

/// `^text(.*?)text(.*?)…$`: each field matches as little as it can, so a
/// value ends at the first place the text after it appears.
fn pattern(template: &LinkTemplate) -> Regex {
    let mut pattern = String::from("(?s)^");
    for part in &template.parts {
        match part {
            Part::Text(text) => pattern.push_str(&regex::escape(text)),
            Part::Field(_) => pattern.push_str("(.*?)"),
        }
    }
    pattern.push('$');
    // Only escaped text and fixed groups: the pattern always compiles, and
    // its size is bounded by the URL's (at most 8 KiB).
    Regex::new(&pattern).unwrap_or_else(|_| never_matches())
}

fn never_matches() -> Regex {
    #[allow(clippy::unwrap_used)] // a constant pattern
    Regex::new("[^\\s\\S]").unwrap()
}

fn known_fields(fields: &[String]) -> String {
    if fields.is_empty() {
        return "none".to_owned();
    }
    let mut unique: Vec<&str> = Vec::new();
    for field in fields {
        if !unique.contains(&field.as_str()) {
            unique.push(field);
        }
    }
    unique
        .iter()
        .map(|field| format!("{{{{ {field} }}}}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_letters_values_are_carried_into_the_new_target() {
        let refill = Refill::new(
            "https://shop.example/u/{{ id }}?ref=news&e={{ email|urlencode }}",
            "https://shop.example/account/{{id}}?e={{ email | urlencode }}&v=2",
        )
        .unwrap();
        assert_eq!(
            refill
                .apply("https://shop.example/u/1234?ref=news&e=ann%40example.com")
                .as_deref(),
            Some("https://shop.example/account/1234?e=ann%40example.com&v=2")
        );
        assert_eq!(refill.apply("https://other.example/u/1?ref=news&e=x"), None);
    }

    #[test]
    fn a_field_the_built_url_lacks_is_refused_naming_the_known_ones() {
        let err = Refill::new(
            "https://shop.example/u/{{ id }}",
            "https://shop.example/{{ first_name }}",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "field {{ first_name }} is not in the link's URL (its fields: {{ id }})"
        );
        assert_eq!(
            Refill::new(
                "https://a.example/{% if x %}y{% endif %}",
                "https://b.example/"
            )
            .unwrap_err(),
            TemplateError::Statements
        );
        assert_eq!(
            LinkTemplate::parse("https://a.example/{{ id").unwrap_err(),
            TemplateError::Unclosed
        );
    }

    #[test]
    fn a_field_used_twice_must_have_one_value() {
        let refill = Refill::new(
            "https://a.example/{{ id }}/{{ id }}",
            "https://b.example/{{ id }}",
        )
        .unwrap();
        assert_eq!(
            refill.apply("https://a.example/7/7").as_deref(),
            Some("https://b.example/7")
        );
        assert_eq!(refill.apply("https://a.example/7/8"), None);
    }

    #[test]
    fn text_that_looks_like_a_pattern_is_matched_as_text() {
        let refill = Refill::new(
            "https://a.example/x.y?(a)={{ v }}",
            "https://b.example/{{ v }}",
        )
        .unwrap();
        assert_eq!(
            refill.apply("https://a.example/x.y?(a)=1").as_deref(),
            Some("https://b.example/1")
        );
        assert_eq!(refill.apply("https://a.example/xzy?(a)=1"), None);
    }
}
