//! The tracking domains' certificates (docs/domains.md, "Certificates"):
//! the ACME account of each directory, each host's certificate chain and
//! key, the HTTP-01 challenges being answered, and the lock that lets one
//! server at a time talk to the CA.

use super::error::StoreError;
use chrono::{NaiveDateTime, Utc};
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, MySqlPool};

/// One host's certificate as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCertificate {
    pub host: String,
    /// The leaf first, then the intermediates, PEM.
    pub chain_pem: String,
    /// The leaf's private key, PEM (PKCS#8).
    pub key_pem: String,
    /// The leaf's serial number, hex.
    pub serial: String,
    pub not_before: NaiveDateTime,
    pub not_after: NaiveDateTime,
    pub issued: NaiveDateTime,
}

/// The account credentials (instant-acme's JSON) kept for `directory_url`.
pub async fn account(pool: &MySqlPool, directory_url: &str) -> Result<Option<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT credentials FROM acme_accounts WHERE directory_url = ?")
            .bind(directory_url)
            .fetch_optional(pool)
            .await?,
    )
}

/// Keeps the account credentials of `directory_url` (replacing any).
pub async fn save_account(
    pool: &MySqlPool,
    directory_url: &str,
    credentials: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO acme_accounts (directory_url, credentials, created) VALUES (?, ?, ?) \
         ON DUPLICATE KEY UPDATE credentials = VALUES(credentials)",
    )
    .bind(directory_url)
    .bind(credentials)
    .bind(Utc::now().naive_utc())
    .execute(pool)
    .await?;
    Ok(())
}

/// Stores (or replaces) a host's certificate.
pub async fn save(pool: &MySqlPool, cert: &StoredCertificate) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO tls_certificates \
           (host, chain_pem, key_pem, serial, not_before, not_after, issued) \
         VALUES (?, ?, ?, ?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE chain_pem = VALUES(chain_pem), key_pem = VALUES(key_pem), \
           serial = VALUES(serial), not_before = VALUES(not_before), \
           not_after = VALUES(not_after), issued = VALUES(issued)",
    )
    .bind(&cert.host)
    .bind(&cert.chain_pem)
    .bind(&cert.key_pem)
    .bind(&cert.serial)
    .bind(cert.not_before)
    .bind(cert.not_after)
    .bind(cert.issued)
    .execute(pool)
    .await?;
    Ok(())
}

type CertificateRow = (
    String,
    String,
    String,
    String,
    NaiveDateTime,
    NaiveDateTime,
    NaiveDateTime,
);

/// The certificates of the hosts still in `tracking_domains` (a removed
/// host's certificate is no longer served).
pub async fn list(pool: &MySqlPool) -> Result<Vec<StoredCertificate>, StoreError> {
    let rows: Vec<CertificateRow> = sqlx::query_as(
        "SELECT c.host, c.chain_pem, c.key_pem, c.serial, c.not_before, c.not_after, c.issued \
         FROM tls_certificates c JOIN tracking_domains d ON d.host = c.host ORDER BY c.host",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(host, chain_pem, key_pem, serial, not_before, not_after, issued)| StoredCertificate {
                host,
                chain_pem,
                key_pem,
                serial,
                not_before,
                not_after,
                issued,
            },
        )
        .collect())
}

/// Records the answer to an HTTP-01 challenge, for whichever server the CA
/// reaches.
pub async fn save_challenge(
    pool: &MySqlPool,
    token: &str,
    host: &str,
    key_authorization: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO acme_challenges (token, host, key_authorization, created) \
         VALUES (?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE key_authorization = VALUES(key_authorization)",
    )
    .bind(token)
    .bind(host)
    .bind(key_authorization)
    .bind(Utc::now().naive_utc())
    .execute(pool)
    .await?;
    Ok(())
}

/// The key authorization of challenge `token` when it is for `host`.
pub async fn challenge(
    pool: &MySqlPool,
    token: &str,
    host: &str,
) -> Result<Option<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT key_authorization FROM acme_challenges WHERE token = ? AND host = ?",
    )
    .bind(token)
    .bind(host)
    .fetch_optional(pool)
    .await?)
}

/// Forgets a challenge once its order is done (or failed).
pub async fn remove_challenge(pool: &MySqlPool, token: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM acme_challenges WHERE token = ?")
        .bind(token)
        .execute(pool)
        .await?;
    Ok(())
}

/// Held while one server talks to the CA, so several servers of a
/// deployment never order the same certificate at once. Released when
/// dropped: its connection is closed, and a closed session's `GET_LOCK`
/// is released by the server.
pub struct IssuerLock {
    _conn: MySqlConnection,
}

/// Takes the issuer lock without waiting; `None` when another server
/// holds it.
pub async fn try_issuer_lock(pool: &MySqlPool) -> Result<Option<IssuerLock>, StoreError> {
    let mut conn = pool.acquire().await?.detach();
    let database: Option<String> = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(&mut conn)
        .await?;
    // Lock names are server-wide (64 characters at most): the database's
    // name keeps two deployments on one server apart.
    let mut name = format!("linktrack.acme.{}", database.unwrap_or_default());
    name.truncate(64);
    let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
        .bind(&name)
        .fetch_one(&mut conn)
        .await?;
    if got == Some(1) {
        Ok(Some(IssuerLock { _conn: conn }))
    } else {
        let _ = conn.close().await;
        Ok(None)
    }
}
