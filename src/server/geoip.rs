//! The reader's country from the client address: an
//! operator-supplied MaxMind-format database (`serve --geoip FILE`, a
//! GeoLite2/GeoIP2 Country or City file, or any MMDB whose records have
//! `country.iso_code`), read by the `maxminddb` crate. Looked up on the
//! request path from the whole address, before it is truncated
//! (`request::truncate_ip`); only the two-letter code is kept.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// An opened GeoIP database, held in memory (a Country file is a few MB).
pub struct GeoIp {
    reader: maxminddb::Reader<Vec<u8>>,
    path: PathBuf,
}

/// A database that cannot be used, with its file named.
#[derive(Debug, thiserror::Error)]
#[error("GeoIP database {}: {source}", path.display())]
pub struct GeoIpError {
    path: PathBuf,
    source: maxminddb::MaxMindDbError,
}

impl GeoIp {
    /// Read the whole file and check it is a MaxMind DB.
    pub fn open(path: &Path) -> Result<GeoIp, GeoIpError> {
        let reader = maxminddb::Reader::open_readfile(path).map_err(|source| GeoIpError {
            path: path.to_owned(),
            source,
        })?;
        Ok(GeoIp {
            reader,
            path: path.to_owned(),
        })
    }

    /// The ISO 3166-1 alpha-2 code (upper case) of `ip`'s country, if the
    /// database knows it. An address it does not cover, a record without
    /// a country or a code that is not two letters is `None`: the event is
    /// stored without a country, never refused.
    pub fn country(&self, ip: IpAddr) -> Option<String> {
        let found = match self.reader.lookup(ip) {
            Ok(found) => found,
            // An IPv6 address in an IPv4-only database: no country.
            Err(_) => return None,
        };
        let code: String = found
            .decode_path(&maxminddb::path!["country", "iso_code"])
            .ok()
            .flatten()?;
        let code = code.trim().to_ascii_uppercase();
        (code.len() == 2 && code.bytes().all(|b| b.is_ascii_uppercase())).then_some(code)
    }
}

impl std::fmt::Debug for GeoIp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeoIp")
            .field("path", &self.path)
            .field("database_type", &self.reader.metadata().database_type)
            .finish()
    }
}
