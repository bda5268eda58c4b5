//! The last topology a server read from the head, kept in a file in its
//! journal directory ([`FILE_NAME`]), so that a server started while the
//! head is down still knows which data node holds each virtual shard and
//! answers clicks (docs/scaling.md, "What a head outage costs, against a node outage").
//!
//! The file is JSON: which head it came from (user@host:port/database, no
//! password), when it was read, and every head partition of `links` and
//! `events` with its Spider server, data table and node URL. The node URLs
//! carry the nodes' passwords (the head's `mysql.servers` holds them; the
//! router connects with them), so the file is made readable by its owner
//! only. It is written whole to a temporary file, synced, then renamed over
//! the old one: a crash leaves the old file or the new one, never half.

use super::node::NodeAddress;
use super::topology::Placement;
use chrono::{DateTime, Utc};
use sqlx::MySqlPool;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The file's name in the journal directory.
pub const FILE_NAME: &str = "cluster-topology.json";

/// The format written; a file of another version is not read.
const VERSION: u32 = 1;

/// A topology as the file holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedTopology {
    /// When the head was read.
    pub saved_at: DateTime<Utc>,
    pub placements: Vec<Placement>,
    /// This server's event writer number on the head (`event_ids`), so a
    /// server started while the head is down makes event ids too.
    pub writer: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum SavedTopologyError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: line {line}, column {column}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        line: usize,
        column: usize,
        source: serde_json::Error,
    },
    #[error("{}: {detail}", path.display())]
    Refused { path: PathBuf, detail: String },
}

#[derive(serde::Serialize, serde::Deserialize)]
struct File {
    version: u32,
    /// The head it was read from: a file from another head is not used.
    head: String,
    saved_at: DateTime<Utc>,
    placements: Vec<FilePlacement>,
    /// Absent in files of linktracks that wrote events through the head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    writer: Option<u64>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct FilePlacement {
    table: String,
    partition: String,
    server: String,
    data_table: String,
    /// `mysql://user:password@host:port/database`.
    node: String,
}

/// The head a pool connects to, as the file names it (no password).
pub(crate) fn head_of(pool: &MySqlPool) -> String {
    let options = pool.connect_options();
    format!(
        "{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or_default()
    )
}

/// Write `placements`, read from `head` at `saved_at`, to `path`
/// atomically (blocking: call it off the runtime's threads).
pub(crate) fn save(
    path: &Path,
    head: &str,
    saved: &SavedTopology,
) -> Result<(), SavedTopologyError> {
    let io = |source| SavedTopologyError::Io {
        path: path.to_owned(),
        source,
    };
    let mut placements = Vec::with_capacity(saved.placements.len());
    for p in &saved.placements {
        let node = p.node.url().map_err(|err| SavedTopologyError::Refused {
            path: path.to_owned(),
            detail: format!("node {}: {err}", p.node),
        })?;
        placements.push(FilePlacement {
            table: p.table.clone(),
            partition: p.partition.clone(),
            server: p.server.clone(),
            data_table: p.data_table.clone(),
            node,
        });
    }
    let file = File {
        version: VERSION,
        head: head.to_owned(),
        saved_at: saved.saved_at,
        placements,
        writer: saved.writer,
    };
    let mut text = serde_json::to_vec_pretty(&file).map_err(|err| SavedTopologyError::Refused {
        path: path.to_owned(),
        detail: format!("encoding the topology: {err}"),
    })?;
    text.push(b'\n');
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    let partial = path.with_extension("json.partial");
    {
        let mut out = owner_only(&partial).map_err(io)?;
        out.write_all(&text).map_err(io)?;
        out.sync_all().map_err(io)?;
    }
    std::fs::rename(&partial, path).map_err(io)?;
    // The rename itself is durable once the directory is synced.
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// A new file (truncating a leftover) readable and writable by its owner only.
fn owner_only(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// The topology saved at `path` for `head`; `None` when there is no file.
/// A file of another head or version, or one that cannot be read, is an
/// error naming the file (and the line, for bad JSON).
pub(crate) fn load(path: &Path, head: &str) -> Result<Option<SavedTopology>, SavedTopologyError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SavedTopologyError::Io {
                path: path.to_owned(),
                source,
            })
        }
    };
    let refused = |detail: String| SavedTopologyError::Refused {
        path: path.to_owned(),
        detail,
    };
    let file: File =
        serde_json::from_str(&text).map_err(|source| SavedTopologyError::Unreadable {
            path: path.to_owned(),
            line: source.line(),
            column: source.column(),
            source,
        })?;
    if file.version != VERSION {
        return Err(refused(format!(
            "format version {}, this linktrack reads {VERSION}",
            file.version
        )));
    }
    if file.head != head {
        return Err(refused(format!(
            "saved from head {}, not from this server's head {head}",
            file.head
        )));
    }
    let mut placements = Vec::with_capacity(file.placements.len());
    for (index, p) in file.placements.into_iter().enumerate() {
        let node = NodeAddress::parse(&p.node).map_err(|why| {
            refused(format!(
                "placements[{index}] ({}.{}): node: {why}",
                p.table, p.partition
            ))
        })?;
        placements.push(Placement {
            table: p.table,
            partition: p.partition,
            server: p.server,
            data_table: p.data_table,
            node,
        });
    }
    if !placements.iter().any(|p| p.table == "links") {
        return Err(refused("no placement of `links`".to_owned()));
    }
    Ok(Some(SavedTopology {
        saved_at: file.saved_at,
        placements,
        writer: file.writer,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(table: &str, n: u32, node: u16) -> Placement {
        Placement {
            table: table.to_owned(),
            partition: format!("s{n:02}"),
            server: format!("lt_x_{node}"),
            data_table: super::super::topology::data_table(table, n),
            node: NodeAddress {
                host: "127.0.0.1".into(),
                port: node,
                user: "lt".into(),
                password: "p@ss word".into(),
                database: "linktrack".into(),
            },
        }
    }

    #[test]
    fn a_saved_topology_is_read_back_only_for_its_own_head() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal").join(FILE_NAME);
        assert!(
            load(&path, "lt@h:3306/lt").unwrap().is_none(),
            "no file yet"
        );
        let saved = SavedTopology {
            saved_at: Utc::now(),
            placements: vec![
                placement("links", 0, 3307),
                placement("links", 1, 3308),
                placement("events", 0, 3307),
            ],
            writer: Some(17),
        };
        save(&path, "lt@h:3306/lt", &saved).unwrap();
        assert_eq!(load(&path, "lt@h:3306/lt").unwrap(), Some(saved.clone()));
        // Written whole: no partial file left, readable by its owner only.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [FILE_NAME]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Another head's file is refused, naming both heads.
        let other = load(&path, "lt@other:3306/lt").unwrap_err().to_string();
        assert!(
            other.contains(FILE_NAME) && other.contains("lt@h:3306/lt"),
            "{other}"
        );
        // A second save replaces the first.
        let moved = SavedTopology {
            saved_at: Utc::now(),
            placements: vec![placement("links", 0, 3309), placement("links", 1, 3308)],
            writer: None,
        };
        save(&path, "lt@h:3306/lt", &moved).unwrap();
        assert_eq!(load(&path, "lt@h:3306/lt").unwrap(), Some(moved));
    }

    #[test]
    fn a_damaged_file_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::write(&path, "{\n  \"version\": 1,\n  \"head\": \n").unwrap();
        let err = load(&path, "h").unwrap_err();
        assert!(
            matches!(err, SavedTopologyError::Unreadable { line: 4, .. }),
            "{err}"
        );
        assert!(err.to_string().contains(FILE_NAME), "{err}");
        let saved = SavedTopology {
            saved_at: Utc::now(),
            placements: vec![placement("events", 0, 3307)],
            writer: None,
        };
        save(&path, "h", &saved).unwrap();
        let err = load(&path, "h").unwrap_err().to_string();
        assert!(err.contains("no placement of `links`"), "{err}");
    }
}
