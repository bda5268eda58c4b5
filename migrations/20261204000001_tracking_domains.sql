-- Tracking domains per sender (issue 41, docs/domains.md): the builder
-- points the letters of a `from` domain at its verified tracking host, and
-- the server answers only on known hosts once any is added.
CREATE TABLE IF NOT EXISTS tracking_domains (
    host VARCHAR(253) CHARACTER SET ascii NOT NULL,
    sender_domain VARCHAR(253) CHARACTER SET ascii NOT NULL,
    state ENUM('pending', 'verified', 'failed') NOT NULL DEFAULT 'pending',
    added DATETIME NOT NULL,
    checked DATETIME NULL,
    detail VARCHAR(500) NULL,
    PRIMARY KEY (host),
    KEY tracking_domains_sender (sender_domain, state)
) ENGINE=InnoDB;
