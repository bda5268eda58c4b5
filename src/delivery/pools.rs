//! The pools file (`--pools FILE`, TOML): each sending pool's MTAs. A
//! mailing's `pool` picks its entry; letters are spread over its URLs.
//!
//! ```toml
//! [pools.newsletters]
//! urls = ["smtp://mta1.example.com:25", "smtp://mta2.example.com:25"]
//! connections = 8    # per MTA (default 4)
//! messages_per_connection = 100   # then QUIT and reconnect (default: no limit)
//!
//! [pools.transactional]
//! urls = ["smtps://user:password@relay.example.com:465"]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolsFile {
    pools: BTreeMap<String, PoolEntry>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolEntry {
    urls: Vec<String>,
    connections: Option<u32>,
    messages_per_connection: Option<u32>,
}

/// Why a pools file cannot be used; each names the file and the key.
#[derive(Debug, thiserror::Error)]
pub enum PoolsError {
    #[error(transparent)]
    File(#[from] crate::settings_file::SettingsFileError),
    #[error("{path}: the mailing's pool {pool:?} is not in the file (pools: {known})")]
    UnknownPool {
        path: PathBuf,
        pool: String,
        known: String,
    },
    #[error("{path}: {key}: {message}")]
    Key {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error("{path}: pools.{pool}.urls: {message}")]
    Url {
        path: PathBuf,
        pool: String,
        message: String,
    },
    #[error("{path}: pools.{pool}.urls: {url:?}")]
    NotUrl {
        path: PathBuf,
        pool: String,
        url: String,
        #[source]
        source: url::ParseError,
    },
}

/// The SMTP URLs and connections per MTA of one pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolRoute {
    pub urls: Vec<String>,
    pub connections: u32,
    /// `None`: the file does not say (the command line's setting applies).
    pub messages_per_connection: Option<u32>,
}

/// Read `path` and return the route of `pool`. Every URL of the pool is
/// checked (scheme and form) before any letter is built.
pub fn route(path: &Path, pool: &str) -> Result<PoolRoute, PoolsError> {
    let file: PoolsFile = crate::settings_file::read_toml_file(path)?;
    let Some(entry) = file.pools.get(pool) else {
        return Err(PoolsError::UnknownPool {
            path: path.to_owned(),
            pool: pool.to_owned(),
            known: file.pools.keys().cloned().collect::<Vec<_>>().join(", "),
        });
    };
    checked(path, pool, entry)
}

/// Every pool of the file, each checked as [`route`] checks one (the
/// relay, whose messages name their pool, serves them all).
pub fn all(path: &Path) -> Result<BTreeMap<String, PoolRoute>, PoolsError> {
    let file: PoolsFile = crate::settings_file::read_toml_file(path)?;
    file.pools
        .iter()
        .map(|(pool, entry)| Ok((pool.clone(), checked(path, pool, entry)?)))
        .collect()
}

fn checked(path: &Path, pool: &str, entry: &PoolEntry) -> Result<PoolRoute, PoolsError> {
    let url_error = |message: String| PoolsError::Url {
        path: path.to_owned(),
        pool: pool.to_owned(),
        message,
    };
    if entry.urls.is_empty() {
        return Err(url_error("no URL".into()));
    }
    for url in &entry.urls {
        let parsed = url::Url::parse(url).map_err(|source| PoolsError::NotUrl {
            path: path.to_owned(),
            pool: pool.to_owned(),
            url: crate::error_report::url_without_password(url),
            source,
        })?;
        if !matches!(parsed.scheme(), "smtp" | "smtps") {
            return Err(url_error(format!(
                "{:?}: unknown scheme {:?} (smtp:// or smtps://)",
                crate::error_report::url_without_password(url),
                parsed.scheme()
            )));
        }
    }
    if entry.messages_per_connection == Some(0) {
        return Err(PoolsError::Key {
            path: path.to_owned(),
            key: format!("pools.{pool}.messages_per_connection"),
            message: "must be at least 1 (leave it out for no limit)".into(),
        });
    }
    Ok(PoolRoute {
        urls: entry.urls.clone(),
        connections: entry.connections.unwrap_or(4).max(1),
        messages_per_connection: entry.messages_per_connection,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pools.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn a_pool_routes_to_its_urls() {
        let (_dir, path) = file(
            "[pools.news]\nurls = [\"smtp://a:25\", \"smtp://b:25\"]\nconnections = 8\n\
             [pools.tx]\nurls = [\"smtps://u:p@relay:465\"]\n",
        );
        let route = route(&path, "news").unwrap();
        assert_eq!(route.urls, ["smtp://a:25", "smtp://b:25"]);
        assert_eq!(route.connections, 8);
        assert_eq!(route.messages_per_connection, None);
        assert_eq!(super::route(&path, "tx").unwrap().connections, 4);
        let (_dir, path) =
            file("[pools.news]\nurls = [\"smtp://a:25\"]\nmessages_per_connection = 50\n");
        assert_eq!(
            super::route(&path, "news").unwrap().messages_per_connection,
            Some(50)
        );
    }

    #[test]
    fn bad_files_are_refused_naming_file_and_key() {
        let (_dir, path) = file("[pools.news]\nurls = [\"http://a:25\"]\n");
        let err = route(&path, "news").unwrap_err().to_string();
        assert!(
            err.contains("pools.toml: pools.news.urls") && err.contains("\"http\""),
            "{err}"
        );

        let err = route(&path, "other").unwrap_err().to_string();
        assert!(
            err.contains("pool \"other\" is not in the file (pools: news)"),
            "{err}"
        );

        let (_dir, path) = file("[pools.news]\nurl = [\"smtp://a\"]\n");
        let err = route(&path, "news").unwrap_err().to_string();
        assert!(err.contains("pools.toml") && err.contains("url"), "{err}");
        assert!(err.contains("line 2"), "{err}");

        let (_dir, path) = file("[pools.news]\nurls = [\"smtp://a:25\", \"no url\"]\n");
        let err = route(&path, "news").unwrap_err();
        let said = crate::error_report::chain(&err);
        assert!(
            said.contains("pools.toml: pools.news.urls: \"no url\": "),
            "the file, the key, the URL, then the parser's reason: {said}"
        );
        assert!(std::error::Error::source(&err).is_some(), "{err:?}");

        // A mistyped URL's password stays out of the message.
        for bad in ["smtp://u:s3cret@mta example:25", "http://u:s3cret@mta:25"] {
            let (_dir, path) = file(&format!("[pools.news]\nurls = [\"{bad}\"]\n"));
            let said = crate::error_report::chain(&route(&path, "news").unwrap_err());
            assert!(
                said.contains("u:***@mta") && !said.contains("s3cret"),
                "{said}"
            );
        }

        let (_dir, path) =
            file("[pools.news]\nurls = [\"smtp://a\"]\nmessages_per_connection = 0\n");
        let err = route(&path, "news").unwrap_err().to_string();
        assert!(
            err.contains("pools.toml: pools.news.messages_per_connection: must be at least 1"),
            "{err}"
        );
    }
}
