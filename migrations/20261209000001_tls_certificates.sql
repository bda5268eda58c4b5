-- Automatic TLS for the tracking domains (issue 41, docs/domains.md,
-- "Certificates"): the ACME account, each host's certificate and key, and
-- the HTTP-01 challenges being answered. In the database so that every
-- server of a deployment serves the same certificates and answers a
-- challenge whichever of them the CA reaches.
CREATE TABLE IF NOT EXISTS acme_accounts (
    directory_url VARCHAR(500) CHARACTER SET ascii NOT NULL,
    -- instant-acme's AccountCredentials (JSON, with the account's private key).
    credentials TEXT CHARACTER SET ascii NOT NULL,
    created DATETIME NOT NULL,
    PRIMARY KEY (directory_url)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS tls_certificates (
    host VARCHAR(253) CHARACTER SET ascii NOT NULL,
    chain_pem MEDIUMTEXT CHARACTER SET ascii NOT NULL,
    key_pem TEXT CHARACTER SET ascii NOT NULL,
    serial VARCHAR(100) CHARACTER SET ascii NOT NULL,
    not_before DATETIME NOT NULL,
    not_after DATETIME NOT NULL,
    issued DATETIME NOT NULL,
    PRIMARY KEY (host)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS acme_challenges (
    token VARCHAR(255) CHARACTER SET ascii NOT NULL,
    host VARCHAR(253) CHARACTER SET ascii NOT NULL,
    key_authorization VARCHAR(500) CHARACTER SET ascii NOT NULL,
    created DATETIME NOT NULL,
    PRIMARY KEY (token)
) ENGINE=InnoDB;
