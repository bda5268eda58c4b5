//! UTM tags added to a link's target when its click is redirected, never
//! written into the letter (filters and readers see the creative's own
//! URLs): the mailing file's `utm` object ([`UtmTags`]), its values
//! rendered per link ([`UtmTags::render`]) and merged into a URL
//! ([`add_parameters`]) so that a parameter the URL already has is never
//! overridden and everything the URL already holds (its own parameters,
//! their encoding, the fragment) stays byte for byte.

use std::borrow::Cow;

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// The variables a tag's value may use.
pub const UTM_VARIABLES: [&str; 3] = ["mailing_id", "position", "name"];

/// The tags, as the mailing file gives them (values may be templates with
/// `{{ mailing_id }}`, `{{ position }}`, `{{ name }}`). An absent or blank
/// tag is not added.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct UtmTags {
    pub source: Option<String>,
    pub medium: Option<String>,
    pub campaign: Option<String>,
    pub term: Option<String>,
    pub content: Option<String>,
}

/// Why a tag's value cannot be used: names the tag and its value; the
/// source is the template engine's reason.
#[derive(Debug, thiserror::Error)]
#[error(
    "utm.{tag}: {value:?} is not a template of {}",
    UTM_VARIABLES.map(|v| format!("{{{{ {v} }}}}")).join(", ")
)]
pub struct UtmError {
    pub tag: &'static str,
    pub value: String,
    #[source]
    pub source: minijinja::Error,
}

/// One link's values for the tags' templates.
#[derive(Debug, Clone, Copy)]
pub struct UtmLink<'a> {
    pub mailing_id: &'a str,
    pub position: u32,
    /// The link's `data-linktrack-name`; empty when it has none.
    pub name: &'a str,
}

/// A tag's parameter name and its value, rendered and percent-encoded for
/// a query string.
pub type EncodedParameter = (&'static str, String);

impl UtmTags {
    /// The tags given, by their query parameter names.
    fn given(&self) -> impl Iterator<Item = (&'static str, &'static str, &str)> {
        [
            ("source", "utm_source", &self.source),
            ("medium", "utm_medium", &self.medium),
            ("campaign", "utm_campaign", &self.campaign),
            ("term", "utm_term", &self.term),
            ("content", "utm_content", &self.content),
        ]
        .into_iter()
        .filter_map(|(tag, parameter, value)| {
            let value = value.as_deref().map(str::trim).filter(|v| !v.is_empty())?;
            Some((tag, parameter, value))
        })
    }

    /// No tag is given: nothing is ever added.
    pub fn is_empty(&self) -> bool {
        self.given().next().is_none()
    }

    /// Check every value renders, with made-up link values: a template
    /// error or an unknown variable is refused naming the tag (the builder
    /// checks before any letter).
    pub fn check(&self) -> Result<(), UtmError> {
        let sample = UtmLink {
            mailing_id: "m",
            position: 1,
            name: "n",
        };
        self.render(sample).map(drop)
    }

    /// The parameters to add to `link`'s target: each tag's value rendered
    /// and percent-encoded, in the order source, medium, campaign, term,
    /// content. A value that renders blank is left out.
    pub fn render(&self, link: UtmLink) -> Result<Vec<EncodedParameter>, UtmError> {
        let mut env = minijinja::Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        let values = minijinja::context! {
            mailing_id => link.mailing_id,
            position => link.position,
            name => link.name,
        };
        let mut out = Vec::new();
        for (tag, parameter, value) in self.given() {
            let rendered = env.render_str(value, &values).map_err(|source| UtmError {
                tag,
                value: value.to_owned(),
                source,
            })?;
            let rendered = rendered.trim();
            if !rendered.is_empty() {
                out.push((parameter, encode_value(rendered)));
            }
        }
        Ok(out)
    }
}

/// What a query value escapes: everything but letters, digits and `-._~`
/// (RFC 3986's unreserved characters).
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn encode_value(value: &str) -> String {
    utf8_percent_encode(value, QUERY_VALUE).to_string()
}

/// `url` with each of `parameters` (already encoded) appended to its
/// query, unless the query already has a parameter of that name (compared
/// after percent-decoding, as a reader of the query would): the link's own
/// value always wins. The URL's bytes are kept: its query as it was, then
/// `&` (or `?` when it had no query) and the new parameters, then its
/// fragment as it was.
pub fn add_parameters<'u>(url: &'u str, parameters: &[EncodedParameter]) -> Cow<'u, str> {
    if parameters.is_empty() {
        return Cow::Borrowed(url);
    }
    let (before_fragment, fragment) = match url.find('#') {
        Some(at) => url.split_at(at),
        None => (url, ""),
    };
    let query = before_fragment.split_once('?').map(|(_, query)| query);
    // Written as it goes: the common case adds every tag, and the rare URL
    // that already has them all costs one unused string.
    let mut out = String::with_capacity(url.len() + 32 * parameters.len());
    out.push_str(before_fragment);
    match query {
        None => out.push('?'),
        Some(query) if !query.is_empty() && !query.ends_with('&') => out.push('&'),
        Some(_) => {}
    }
    let mut added = 0;
    for (name, value) in parameters {
        if query.is_some_and(|query| has_parameter(query, name)) {
            continue;
        }
        if added > 0 {
            out.push('&');
        }
        out.push_str(name);
        out.push('=');
        out.push_str(value);
        added += 1;
    }
    if added == 0 {
        return Cow::Borrowed(url);
    }
    out.push_str(fragment);
    Cow::Owned(out)
}

/// Whether `query` (without `?`) names `name`, its names percent-decoded
/// (and `+` read as a space, as forms write it).
fn has_parameter(query: &str, name: &str) -> bool {
    query.split('&').any(|pair| {
        let raw = pair.split_once('=').map_or(pair, |(key, _)| key);
        if raw.len() < name.len() {
            return false;
        }
        if raw == name {
            return true;
        }
        // Only an escape or a `+` can make a different name read as `name`.
        if !raw.bytes().any(|b| b == b'%' || b == b'+') {
            return false;
        }
        let spaced = raw.replace('+', " ");
        percent_decode_str(&spaced).decode_utf8_lossy() == name
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn params(pairs: &[(&'static str, &str)]) -> Vec<EncodedParameter> {
        pairs.iter().map(|(n, v)| (*n, encode_value(v))).collect()
    }

    #[test]
    fn adds_to_a_url_without_a_query_before_its_fragment() {
        let added = add_parameters("https://x.test/a#top", &params(&[("utm_source", "news")]));
        assert_eq!(added, "https://x.test/a?utm_source=news#top");
    }

    #[test]
    fn keeps_the_links_own_value_and_encoding() {
        let url = "https://x.test/a?utm_source=partner&q=a%20b+c&utm%5Fmedium=x";
        let added = add_parameters(
            url,
            &params(&[
                ("utm_source", "news"),
                ("utm_medium", "email"),
                ("utm_campaign", "spring sale"),
            ]),
        );
        assert_eq!(
            added,
            "https://x.test/a?utm_source=partner&q=a%20b+c&utm%5Fmedium=x&utm_campaign=spring%20sale"
        );
    }

    #[test]
    fn an_empty_query_or_trailing_ampersand_gets_no_extra_separator() {
        let p = params(&[("utm_source", "n")]);
        assert_eq!(
            add_parameters("https://x.test/?", &p),
            "https://x.test/?utm_source=n"
        );
        assert_eq!(
            add_parameters("https://x.test/?a=1&", &p),
            "https://x.test/?a=1&utm_source=n"
        );
    }

    #[test]
    fn renders_the_link_values_and_refuses_unknown_variables() {
        let tags = UtmTags {
            source: Some("newsletter".into()),
            campaign: Some("m{{ mailing_id }}-{{ position }}-{{ name }}".into()),
            term: Some("  ".into()),
            ..UtmTags::default()
        };
        let link = UtmLink {
            mailing_id: "42",
            position: 3,
            name: "cta",
        };
        let rendered = tags.render(link).unwrap();
        assert_eq!(
            rendered,
            [
                ("utm_source", "newsletter".to_owned()),
                ("utm_campaign", "m42-3-cta".to_owned())
            ]
        );
        let bad = UtmTags {
            medium: Some("{{ first_name }}".into()),
            ..UtmTags::default()
        };
        let err = bad.check().unwrap_err();
        assert_eq!(err.tag, "medium");
        assert!(err.to_string().starts_with("utm.medium: "), "{err}");
        let said = crate::error_report::chain(&err);
        assert!(
            said.contains("first_name") && said.len() > err.to_string().len(),
            "the template engine's reason follows: {said}"
        );
    }

    fn url_strategy() -> impl Strategy<Value = String> {
        let part = "[a-zA-Z0-9%+=&._~-]{0,12}";
        (
            "https?://[a-z]{1,8}\\.test(/[a-z0-9%]{0,6}){0,2}",
            proptest::option::of(part),
            proptest::option::of("[a-zA-Z0-9?#/%&=]{0,10}"),
            proptest::option::of(prop_oneof![
                Just("utm_source=own".to_owned()),
                Just("utm%5Fcampaign=own".to_owned()),
                Just("utm_medium".to_owned()),
            ]),
        )
            .prop_map(|(base, query, fragment, own)| {
                let mut url = base;
                let mut query = query.unwrap_or_default();
                if let Some(own) = own {
                    query = format!("{own}&{query}");
                }
                if !query.is_empty() {
                    url = format!("{url}?{query}");
                }
                if let Some(fragment) = fragment {
                    url = format!("{url}#{fragment}");
                }
                url
            })
    }

    fn decoded_pairs(url: &str) -> Vec<(String, String)> {
        let before = url.split('#').next().unwrap_or_default();
        let query = before.split_once('?').map(|(_, q)| q).unwrap_or_default();
        url::form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }

    proptest! {
        #[test]
        fn merge_keeps_the_url_and_adds_only_missing_tags(
            url in url_strategy(),
            source in "[ -~]{1,10}",
            campaign in "\\PC{1,10}",
        ) {
            let tags = params(&[("utm_source", source.as_str()), ("utm_campaign", campaign.as_str()), ("utm_medium", "email")]);
            let merged = add_parameters(&url, &tags).into_owned();
            // The fragment, and everything before the added parameters, as it was.
            let (url_head, url_fragment) = url.split_at(url.find('#').unwrap_or(url.len()));
            prop_assert!(merged.ends_with(url_fragment));
            prop_assert!(merged.starts_with(url_head));
            let added = &merged[url_head.len()..merged.len() - url_fragment.len()];
            // Each tag is there exactly once, its value the link's own when it had one.
            let before = decoded_pairs(&url);
            let after = decoded_pairs(&merged);
            for (name, value) in [("utm_source", source.as_str()), ("utm_campaign", campaign.as_str()), ("utm_medium", "email")] {
                let own: Vec<&(String, String)> = before.iter().filter(|(k, _)| k == name).collect();
                let now: Vec<&(String, String)> = after.iter().filter(|(k, _)| k == name).collect();
                if own.is_empty() {
                    prop_assert_eq!(now.len(), 1, "{} added once to {}: {}", name, url, merged);
                    prop_assert_eq!(&now[0].1, value);
                } else {
                    prop_assert_eq!(own, now, "{} kept as the link has it", name);
                }
            }
            // Nothing but the added parameters between the query and the fragment.
            prop_assert!(added.is_empty() || added.starts_with(['?', '&']) || url_head.ends_with(['?', '&']));
            // Merging again adds nothing.
            prop_assert_eq!(add_parameters(&merged, &tags), merged.as_str());
        }
    }
}
