//! Which recipients column is which field: header names matched without
//! case, padding or the difference between spaces, underscores and hyphens
//! (`First Name`, `first_name`, `FIRST-NAME` and `FirstName` are one
//! field), the address column of the common platforms' exports recognised
//! by its name (`Email Address`, `E-mail`, `EMAIL`, …), `--column
//! FIELD=HEADER` for any other, and the header checked against the fields
//! the creative reads before any letter is built (docs/build.md,
//! "Recipients").
//!
//! Only names are decided here; the size of a header and its duplicate
//! names are checked where it is read (`recipients.rs`).

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The address column's names in the exports of the common platforms, as
/// [`key`]s: Mailchimp `Email Address`, Brevo (Sendinblue) `EMAIL` and
/// `E-mail`, Substack `email`, MailerLite `Email` and `Email address`,
/// HubSpot `Email`, Klaviyo `Email` (fixtures/exports/ holds a header of
/// each), and the same words in German and French exports.
const EMAIL_KEYS: [&str; 5] = ["email", "emailaddress", "emailadresse", "mail", "courriel"];

/// The fields linktrack itself fills in every letter: a creative may use
/// them without any column.
pub(crate) const BUILDER_FIELDS: [&str; 3] = ["unsubscribe_url", "stop_tracking_url", "mailing_id"];

/// The name a header is matched by: trimmed, lowercased, without spaces,
/// underscores, hyphens and dots.
pub(crate) fn key(name: &str) -> String {
    name.trim()
        .chars()
        .filter(|c| !matches!(c, ' ' | '_' | '-' | '.') && !c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect()
}

/// `--column FIELD=HEADER`: the field a template (or linktrack, for
/// `email` and `name`) reads comes from the column named HEADER.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnMapping {
    pub field: String,
    pub header: String,
}

impl std::str::FromStr for ColumnMapping {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (field, header) = text.split_once('=').ok_or_else(|| {
            format!("{text:?} is not FIELD=HEADER (say --column first_name=\"First Name\")")
        })?;
        let (field, header) = (field.trim(), header.trim());
        if field.is_empty() || header.is_empty() {
            return Err(format!("{text:?}: both FIELD and HEADER must be named"));
        }
        Ok(ColumnMapping {
            field: field.to_owned(),
            header: header.to_owned(),
        })
    }
}

/// What a recipients header must give: the mappings of `--column`, and the
/// fields the creative reads (with where: `subject`, `html`).
#[derive(Debug, Clone, Default)]
pub(crate) struct HeaderPlan {
    pub mappings: Vec<ColumnMapping>,
    /// Field → where the creative reads it.
    pub needed: BTreeMap<String, &'static str>,
}

impl HeaderPlan {
    /// True when `name` (a header's column) holds the address: the column
    /// `--column email=…` names, else one of the platforms' names.
    pub(crate) fn is_email_column(&self, name: &str) -> bool {
        match self.mapping_of("email") {
            Some(mapping) => key(&mapping.header) == key(name),
            None => EMAIL_KEYS.contains(&key(name).as_str()),
        }
    }

    fn mapping_of(&self, field: &str) -> Option<&ColumnMapping> {
        self.mappings.iter().find(|m| m.field == field)
    }

    /// The field name of each column of `header` (trimmed names as the
    /// file has them), or why the header cannot give what the creative
    /// reads. The address column is `email`, a column named `name` in any
    /// case is `name`, a mapped column is its field, a column matching a
    /// field the creative reads is that field; the rest keep their names.
    pub(crate) fn field_names(&self, header: &[String]) -> Result<Vec<String>, String> {
        let mut names: Vec<String> = header.iter().map(|n| n.trim().to_owned()).collect();
        for mapping in &self.mappings {
            let at = one_column(header, &mapping.header, || {
                format!("--column {}={}", mapping.field, mapping.header)
            })?
            .ok_or_else(|| {
                format!(
                    "--column {}={}: the header has no column {:?} (it has {})",
                    mapping.field,
                    mapping.header,
                    mapping.header,
                    listed(header)
                )
            })?;
            names[at] = mapping.field.clone();
        }
        if self.mapping_of("email").is_none() {
            let found: Vec<usize> = (0..header.len())
                .filter(|&i| self.is_email_column(&header[i]))
                .collect();
            match found.as_slice() {
                [] => {}
                [at] => names[*at] = "email".to_owned(),
                [first, second, ..] => {
                    return Err(format!(
                        "the columns {:?} and {:?} could both be the address: pick one with \
                         --column email=HEADER",
                        header[*first], header[*second]
                    ))
                }
            }
        }
        let fixed = ["name"].into_iter().map(|f| (f, "linktrack (the To name)"));
        let wanted = self.needed.iter().map(|(f, at)| (f.as_str(), *at));
        for (field, used_in) in fixed.chain(wanted) {
            if names.iter().any(|n| n == field) || BUILDER_FIELDS.contains(&field) {
                continue;
            }
            let matching: Vec<usize> = (0..header.len())
                .filter(|&i| names[i] == header[i].trim() && key(&header[i]) == key(field))
                .collect();
            match matching.as_slice() {
                [at] => names[*at] = field.to_owned(),
                [] if field == "name" => {}
                [] => {
                    return Err(format!(
                        "the creative uses `{{{{ {field} }}}}` (in its {used_in}) and no column \
                         gives it (the header has {}): name the column with --column \
                         {field}=HEADER, or add one named {field}",
                        listed(header)
                    ))
                }
                [first, second, ..] => {
                    return Err(format!(
                        "the columns {:?} and {:?} both match the field `{field}`: pick one \
                         with --column {field}=HEADER",
                        header[*first], header[*second]
                    ))
                }
            }
        }
        Ok(names)
    }

    /// Give a JSON Lines record's fields the names of [`Self::field_names`]:
    /// keys are matched as header names are.
    pub(crate) fn rename_json(&self, fields: &mut Map<String, Value>) {
        let as_named = self.mappings.is_empty()
            && fields.contains_key("email")
            && self.needed.keys().all(|f| fields.contains_key(f.as_str()));
        if as_named {
            return; // the common case: nothing to rename, nothing to compute
        }
        let keys: Vec<String> = fields.keys().cloned().collect();
        let Ok(names) = self.field_names(&keys) else {
            // A record that lacks a field is rejected when it is built,
            // naming the field, as before.
            return self.rename_what_matches(fields, &keys);
        };
        rename(fields, &keys, &names);
    }

    /// The renames that do not need every field: the address and mappings.
    fn rename_what_matches(&self, fields: &mut Map<String, Value>, keys: &[String]) {
        let partial = HeaderPlan {
            mappings: self
                .mappings
                .iter()
                .filter(|m| {
                    one_column(keys, &m.header, String::new)
                        .ok()
                        .flatten()
                        .is_some()
                })
                .cloned()
                .collect(),
            needed: BTreeMap::new(),
        };
        if let Ok(names) = partial.field_names(keys) {
            rename(fields, keys, &names);
        }
    }
}

fn rename(fields: &mut Map<String, Value>, keys: &[String], names: &[String]) {
    for (from, to) in keys.iter().zip(names) {
        if from != to && !fields.contains_key(to) {
            if let Some(value) = fields.remove(from) {
                fields.insert(to.clone(), value);
            }
        }
    }
}

/// The one column of `header` matching `wanted`: exactly by name first,
/// else by [`key`]; two by key and none exactly is ambiguous.
fn one_column(
    header: &[String],
    wanted: &str,
    what: impl Fn() -> String,
) -> Result<Option<usize>, String> {
    if let Some(at) = header.iter().position(|n| n.trim() == wanted.trim()) {
        return Ok(Some(at));
    }
    let matching: Vec<usize> = (0..header.len())
        .filter(|&i| key(&header[i]) == key(wanted))
        .collect();
    match matching.as_slice() {
        [] => Ok(None),
        [at] => Ok(Some(*at)),
        [first, second, ..] => Err(format!(
            "{}: the columns {:?} and {:?} both match {wanted:?}: give the exact name",
            what(),
            header[*first],
            header[*second]
        )),
    }
}

/// A header's columns for a message: the first 12, quoted.
fn listed(header: &[String]) -> String {
    let mut shown: Vec<String> = header.iter().take(12).map(|n| format!("{n:?}")).collect();
    if header.len() > 12 {
        shown.push(format!("and {} more", header.len() - 12));
    }
    shown.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(header: &[&str]) -> Vec<String> {
        header.iter().map(|n| (*n).to_owned()).collect()
    }

    fn plan(mappings: &[&str], needed: &[&str]) -> HeaderPlan {
        HeaderPlan {
            mappings: mappings.iter().map(|m| m.parse().unwrap()).collect(),
            needed: needed.iter().map(|f| ((*f).to_owned(), "html")).collect(),
        }
    }

    #[test]
    fn case_padding_and_separators_do_not_matter() {
        for header in [
            "First Name",
            "first_name",
            "FIRST-NAME",
            " FirstName ",
            "first.name",
        ] {
            assert_eq!(key(header), "firstname", "{header}");
        }
        let found = plan(&[], &["first_name"])
            .field_names(&names(&["Email Address", "First Name", "Last Name"]))
            .unwrap();
        assert_eq!(found, ["email", "first_name", "Last Name"]);
    }

    #[test]
    fn the_platforms_address_columns_are_the_email() {
        for header in [
            "Email Address",
            "E-mail",
            "EMAIL",
            "email",
            "Email address",
            "E-Mail-Adresse",
        ] {
            let found = plan(&[], &[]).field_names(&names(&["id", header])).unwrap();
            assert_eq!(found, ["id", "email"], "{header}");
        }
    }

    #[test]
    fn a_column_mapping_names_any_column() {
        let found = plan(&["email=Contact", "first_name=FNAME"], &["first_name"])
            .field_names(&names(&["FNAME", "Contact", "Email"]))
            .unwrap();
        assert_eq!(found, ["first_name", "email", "Email"]);
        let err = plan(&["first_name=Prenom"], &[])
            .field_names(&names(&["Email", "FNAME"]))
            .unwrap_err();
        assert!(
            err.contains("--column first_name=Prenom: the header has no column \"Prenom\""),
            "{err}"
        );
        assert!("first_name".parse::<ColumnMapping>().is_err());
    }

    #[test]
    fn a_field_the_creative_needs_and_no_column_gives_names_both() {
        let err = plan(&[], &["first_name", "city"])
            .field_names(&names(&["Email", "First_Name"]))
            .unwrap_err();
        assert!(err.contains("`{{ city }}` (in its html)"), "{err}");
        assert!(err.contains("\"Email\", \"First_Name\""), "{err}");
        assert!(err.contains("--column city=HEADER"), "{err}");
    }

    #[test]
    fn two_candidates_are_refused_rather_than_guessed() {
        let err = plan(&[], &[])
            .field_names(&names(&["Email", "Email Address"]))
            .unwrap_err();
        assert!(err.contains("--column email=HEADER"), "{err}");
        let err = plan(&[], &["first_name"])
            .field_names(&names(&["email", "First Name", "first-name"]))
            .unwrap_err();
        assert!(err.contains("both match the field `first_name`"), "{err}");
        // An exact name wins over names that only match by key.
        let found = plan(&[], &["first_name"])
            .field_names(&names(&["email", "First Name", "first_name"]))
            .unwrap();
        assert_eq!(found, ["email", "First Name", "first_name"]);
    }

    #[test]
    fn json_keys_are_matched_as_headers_are() {
        let mut fields: Map<String, Value> =
            serde_json::from_str(r#"{"Email Address":"a@example.com","First Name":"Ann"}"#)
                .unwrap();
        plan(&[], &["first_name"]).rename_json(&mut fields);
        assert_eq!(fields["email"], "a@example.com");
        assert_eq!(fields["first_name"], "Ann");
        // A record without the field keeps its address, and is rejected
        // later for the missing field.
        let mut fields: Map<String, Value> =
            serde_json::from_str(r#"{"E-mail":"a@example.com"}"#).unwrap();
        plan(&[], &["first_name"]).rename_json(&mut fields);
        assert_eq!(fields["email"], "a@example.com");
    }
}
