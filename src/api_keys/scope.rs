//! [`Scope`]: what an API key may do, one spelling each (`stats:read`, …),
//! and [`Scopes`], a key's set of them.

use std::fmt;
use std::str::FromStr;

/// What an API key may do. The names are a contract (docs/api.md, "Keys and scopes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    StatsRead,
    ExportRead,
    EventsRead,
    SuppressionsRead,
    SuppressionsWrite,
    LinksWrite,
    LettersWrite,
    RelaySend,
    Erase,
    KeysAdmin,
}

impl Scope {
    /// Every scope, in the order docs/api.md lists them.
    pub const ALL: [Scope; 10] = [
        Scope::StatsRead,
        Scope::ExportRead,
        Scope::EventsRead,
        Scope::SuppressionsRead,
        Scope::SuppressionsWrite,
        Scope::LinksWrite,
        Scope::LettersWrite,
        Scope::RelaySend,
        Scope::Erase,
        Scope::KeysAdmin,
    ];

    /// The scope's one spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::StatsRead => "stats:read",
            Scope::ExportRead => "export:read",
            Scope::EventsRead => "events:read",
            Scope::SuppressionsRead => "suppressions:read",
            Scope::SuppressionsWrite => "suppressions:write",
            Scope::LinksWrite => "links:write",
            Scope::LettersWrite => "letters:write",
            Scope::RelaySend => "relay:send",
            Scope::Erase => "erase",
            Scope::KeysAdmin => "keys:admin",
        }
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A scope name that is none of [`Scope::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scope {given:?}: the scopes are {}", Scope::ALL.map(Scope::as_str).join(", "))]
pub struct UnknownScope {
    pub given: String,
}

impl FromStr for Scope {
    type Err = UnknownScope;

    fn from_str(s: &str) -> Result<Scope, UnknownScope> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| UnknownScope {
                given: s.to_owned(),
            })
    }
}

/// A key's scopes: a small set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes(u16);

impl Scopes {
    /// Every scope: `LINKTRACK_API_TOKEN` and a dashboard login.
    pub fn all() -> Scopes {
        Scopes(Scope::ALL.iter().fold(0, |bits, s| bits | s.bit()))
    }

    pub fn contains(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The scopes in [`Scope::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Scope> {
        Scope::ALL.into_iter().filter(move |s| self.contains(*s))
    }

    /// Reads a comma-separated list (blanks around names ignored); an
    /// unknown name is an error naming it.
    pub fn parse_list(list: &str) -> Result<Scopes, UnknownScope> {
        list.split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(str::parse::<Scope>)
            .collect()
    }
}

impl FromIterator<Scope> for Scopes {
    fn from_iter<I: IntoIterator<Item = Scope>>(iter: I) -> Scopes {
        Scopes(iter.into_iter().fold(0, |bits, s| bits | s.bit()))
    }
}

impl fmt::Display for Scopes {
    /// Comma-separated, as stored and as `keys create --scope` takes them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, scope) in self.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            f.write_str(scope.as_str())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scope_reads_back_from_its_one_spelling() {
        for scope in Scope::ALL {
            assert_eq!(scope.as_str().parse::<Scope>(), Ok(scope));
        }
        let err = "stats:write".parse::<Scope>().unwrap_err();
        assert!(err.to_string().contains("\"stats:write\""), "{err}");
        assert!(err.to_string().contains("keys:admin"), "{err}");
        assert!("Stats:Read".parse::<Scope>().is_err());
    }

    #[test]
    fn lists_read_and_print_in_one_order() {
        let scopes = Scopes::parse_list(" export:read,stats:read ,,").unwrap();
        assert!(scopes.contains(Scope::StatsRead));
        assert!(!scopes.contains(Scope::KeysAdmin));
        assert_eq!(scopes.to_string(), "stats:read,export:read");
        assert_eq!(
            Scopes::parse_list(&Scopes::all().to_string()),
            Ok(Scopes::all())
        );
        assert!(Scopes::parse_list("").unwrap().is_empty());
        assert!(Scopes::parse_list("stats:read,nope").is_err());
    }
}
