-- Tracking modes and the recipients' own opt-out (issue 31).
--
-- The "stop tracking me" link is a link kind of its own (`/t/{token}`);
-- appending an ENUM value changes no stored row (instant on MariaDB and
-- MySQL 8).
ALTER TABLE links
  MODIFY kind ENUM('click','image','pixel','unsubscribe','honeypot','optout') NOT NULL;

-- The mode the mailing file gave (`all`, `clicks`, `opens`, `none`,
-- `anonymous`); NULL for mailings built before modes existed.
ALTER TABLE mailings ADD COLUMN track_mode VARCHAR(16) NULL;

-- Of `letters`, how many went out untracked (mode none: the mailing's, the
-- recipient's column, or the recipient's opt-out) and how many anonymous,
-- so that rates are read against the letters that could count.
ALTER TABLE stats_letters
  ADD COLUMN untracked BIGINT UNSIGNED NOT NULL DEFAULT 0,
  ADD COLUMN anonymous BIGINT UNSIGNED NOT NULL DEFAULT 0;

-- Recipients who withdrew from tracking without unsubscribing: built and
-- sent, untracked. Addresses normalised as in `suppressions`.
CREATE TABLE IF NOT EXISTS tracking_optouts (
  email       VARCHAR(320)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  source      VARCHAR(64)     NOT NULL DEFAULT 'manual',
  created_at  DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (email)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
