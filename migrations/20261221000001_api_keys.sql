-- API keys: one row per key an operator created for an integration. The
-- key itself is never stored: `key_hash` is its HMAC-SHA256 under the
-- server's key secret (docs/api.md, "Keys"), `prefix` the public part
-- printed in logs and `keys list`. `scopes` is the comma-separated list of
-- scope names; a key is refused once `revoked` is set or `expires` passed.
-- Names and prefixes are utf8mb4 so that any name asked for (an emoji too)
-- is compared, not refused by the column or a mix of collations.
CREATE TABLE IF NOT EXISTS api_keys (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    name VARCHAR(100) CHARACTER SET utf8mb4 NOT NULL,
    prefix CHAR(8) CHARACTER SET utf8mb4 NOT NULL,
    key_hash BINARY(32) NOT NULL,
    scopes VARCHAR(500) CHARACTER SET ascii NOT NULL,
    created DATETIME NOT NULL,
    expires DATETIME NULL,
    revoked DATETIME NULL,
    last_used DATETIME NULL,
    PRIMARY KEY (id),
    UNIQUE KEY api_keys_name (name),
    UNIQUE KEY api_keys_prefix (prefix),
    UNIQUE KEY api_keys_hash (key_hash)
) ENGINE=InnoDB;
