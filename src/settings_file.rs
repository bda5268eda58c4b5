//! Reading a TOML settings file (the delivery pools, the webhook
//! endpoints) with an error that names the file, line and key.

use std::path::PathBuf;

/// A TOML settings file (the pools file, the webhook endpoints file) that
/// could not be read or parsed; the message names the file, and toml's own
/// message names the line, column and key.
#[derive(Debug, thiserror::Error)]
pub enum SettingsFileError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
}

/// Read and parse one TOML settings file into `T`.
pub fn read_toml_file<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
) -> Result<T, SettingsFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| SettingsFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| SettingsFileError::Parse {
        path: path.to_owned(),
        message: e.to_string().trim().to_owned(),
    })
}
