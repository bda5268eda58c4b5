-- Dashboard login sessions (issue 29): a random id per login, kept only as
-- its SHA-256, with a server-side expiry; logout deletes the row.
CREATE TABLE IF NOT EXISTS dashboard_sessions (
    id_hash BINARY(32) NOT NULL,
    created DATETIME NOT NULL,
    expires DATETIME NOT NULL,
    PRIMARY KEY (id_hash),
    KEY dashboard_sessions_expires (expires)
) ENGINE=InnoDB;
