//! Reaching a data node: its URL and a connection to it, and the list of
//! nodes `LINKTRACK_SHARDS` gives. The address itself is in
//! `node_address.rs`.

use crate::store::connect::{connect_failed, connect_options};
use crate::store::error::StoreError;
use sqlx::mysql::MySqlConnection;
use sqlx::ConnectOptions;

pub use crate::store::node_address::NodeAddress;

impl NodeAddress {
    /// The URL to connect with (password included).
    pub fn url(&self) -> Result<String, StoreError> {
        // A constant that parses: the parts below are set on it one by one.
        let mut url =
            url::Url::parse("mysql://localhost/").map_err(|source| StoreError::BadNodeUrl {
                flag: "a node's address",
                source: crate::store::node_address::NodeAddressError::NotUrl(source),
            })?;
        url.set_path(&self.database);
        let _ = url.set_host(Some(&self.host));
        let _ = url.set_port(Some(self.port));
        let _ = url.set_username(&self.user);
        if !self.password.is_empty() {
            let _ = url.set_password(Some(&self.password));
        }
        Ok(url.to_string())
    }

    /// One connection (not a pool): the partition commands and `migrate`
    /// talk to each node briefly.
    pub async fn connect(&self) -> Result<MySqlConnection, StoreError> {
        let options = connect_options(&self.url()?)?;
        options
            .connect()
            .await
            .map_err(|err| connect_failed(&options, &err))
    }
}

/// Parse `LINKTRACK_SHARDS`: comma-separated node URLs. A bad entry is named
/// by its position (the password is never echoed).
pub fn parse_shards(list: &str) -> Result<Vec<NodeAddress>, StoreError> {
    let mut nodes: Vec<NodeAddress> = Vec::new();
    for (index, entry) in list.split(',').enumerate() {
        if entry.trim().is_empty() {
            continue;
        }
        let node = NodeAddress::parse(entry).map_err(|why| {
            StoreError::BadUrl(format!(
                "LINKTRACK_SHARDS entry {} ({}): {why}",
                index + 1,
                without_password(entry.trim())
            ))
        })?;
        if let Some(twice) = nodes.iter().find(|n| n.same_place(&node)) {
            return Err(StoreError::BadUrl(format!(
                "LINKTRACK_SHARDS names {twice} twice: each data node once"
            )));
        }
        nodes.push(node);
    }
    if nodes.is_empty() {
        return Err(StoreError::BadUrl(
            "LINKTRACK_SHARDS is set but names no data node".into(),
        ));
    }
    Ok(nodes)
}

/// `scheme://user:***@rest` for error messages.
fn without_password(entry: &str) -> String {
    match (entry.find("://"), entry.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &entry[scheme + 3..at];
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &entry[..scheme + 3], &entry[at..])
        }
        _ => entry.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_list_parses_and_names_a_bad_entry_without_its_password() {
        let nodes =
            parse_shards("mysql://root@127.0.0.1:3307/lt, mysql://u:p%40ss@db2/lt2").unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!((nodes[0].port, nodes[0].database.as_str()), (3307, "lt"));
        assert_eq!((nodes[1].password.as_str(), nodes[1].port), ("p@ss", 3306));
        let err = parse_shards("mysql://root@a/lt,mysql://me:secret@b:3306")
            .unwrap_err()
            .to_string();
        assert!(err.contains("entry 2"), "{err}");
        assert!(err.contains("no database"), "{err}");
        assert!(!err.contains("secret"), "{err}");
        assert!(parse_shards("http://a/b").is_err());
        assert!(parse_shards(" , ").is_err());
        assert!(parse_shards("mysql://a/x,mysql://a:3306/x").is_err());
    }

    #[test]
    fn a_node_url_round_trips() {
        let node = NodeAddress::parse("mysql://u:p%40ss@h:3310/db").unwrap();
        assert_eq!(NodeAddress::parse(&node.url().unwrap()).unwrap(), node);
        assert_eq!(node.to_string(), "u@h:3310/db");
    }
}
