//! A data node's address: an entry of `LINKTRACK_SHARDS`, or a server the
//! head's `mysql.servers` names. Plain data, apart from connecting to it
//! (`cluster/node.rs`), so that a failure report (`node_failure.rs`),
//! which the store's error carries, can name a node without reaching the
//! cluster's code.

use std::fmt;

/// Why a node URL was refused; never repeats the password.
#[derive(Debug, thiserror::Error)]
pub enum NodeAddressError {
    #[error("not a URL: {0}")]
    NotUrl(#[source] url::ParseError),
    #[error("scheme {0:?}, expected mysql://")]
    Scheme(String),
    #[error("no host")]
    NoHost,
    #[error("no database: give it as the URL's path, e.g. /linktrack")]
    NoDatabase,
    #[error("the user or password is not valid percent-encoding")]
    Encoding(#[source] std::string::FromUtf8Error),
}

/// One data node's address, as given in `LINKTRACK_SHARDS` or read from the
/// head's `mysql.servers`.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeAddress {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub database: String,
}

impl fmt::Debug for NodeAddress {
    // Never print the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for NodeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}@{}:{}/{}",
            self.user, self.host, self.port, self.database
        )
    }
}

impl NodeAddress {
    /// Parse one `mysql://user:password@host:port/database` URL; the error
    /// says what is wrong without repeating the password.
    pub fn parse(text: &str) -> Result<NodeAddress, NodeAddressError> {
        let url = url::Url::parse(text.trim()).map_err(NodeAddressError::NotUrl)?;
        if url.scheme() != "mysql" && url.scheme() != "mariadb" {
            return Err(NodeAddressError::Scheme(url.scheme().to_owned()));
        }
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or(NodeAddressError::NoHost)?
            .to_owned();
        let database = url.path().trim_start_matches('/').to_owned();
        if database.is_empty() || database.contains('/') {
            return Err(NodeAddressError::NoDatabase);
        }
        let decode = |s: &str| percent_decode(s).map_err(NodeAddressError::Encoding);
        Ok(NodeAddress {
            host,
            port: url.port().unwrap_or(3306),
            user: decode(url.username())?,
            password: decode(url.password().unwrap_or(""))?,
            database: decode(&database)?,
        })
    }

    /// The same server and database (credentials may differ).
    pub(crate) fn same_place(&self, other: &NodeAddress) -> bool {
        self.host == other.host && self.port == other.port && self.database == other.database
    }
}

fn percent_decode(text: &str) -> Result<String, std::string::FromUtf8Error> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out)
}
