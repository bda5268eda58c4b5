-- Links the sender controls after sending (docs/serve.md, "Repointing a
-- sent link"; docs/build.md, "Link names and UTM tags").
--
-- `mailing_links`: each click position of a mailing's creative, written by
-- the build before any letter: its name (`data-linktrack-name`, unique per
-- mailing), whether the mailing's UTM tags are added to it at the redirect
-- (`data-linktrack-utm="off"` says no) and its URL as the creative writes it.
CREATE TABLE IF NOT EXISTS mailing_links (
  mailing_id  VARCHAR(64)     NOT NULL,
  position    INT UNSIGNED    NOT NULL COMMENT 'as the stats number it: the first link is 1',
  name        VARCHAR(100)    NULL,
  utm         TINYINT(1)      NOT NULL DEFAULT 1,
  source_url  MEDIUMTEXT      NOT NULL COMMENT 'the creative''s URL, before personalisation',
  PRIMARY KEY (mailing_id, position),
  UNIQUE KEY mailing_links_name (mailing_id, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- `mailing_utm`: the mailing file's `utm` tags, added to each link's target
-- when its click is redirected. `id` grows on every write (REPLACE), so the
-- servers read only what changed since their last look.
CREATE TABLE IF NOT EXISTS mailing_utm (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  mailing_id  VARCHAR(64)     NOT NULL,
  source      VARCHAR(500)    NULL,
  medium      VARCHAR(500)    NULL,
  campaign    VARCHAR(500)    NULL,
  term        VARCHAR(500)    NULL,
  content     VARCHAR(500)    NULL,
  PRIMARY KEY (id),
  UNIQUE KEY mailing_utm_mailing (mailing_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- `link_repoints`: every repoint of a sent link, kept as its history; the
-- newest row of a (mailing, position, letter) is where that link leads now
-- (letter 0: every letter of the mailing). Rows are only ever added, so
-- the servers poll `id > last seen` and hold the current targets in memory.
CREATE TABLE IF NOT EXISTS link_repoints (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  mailing_id  VARCHAR(64)     NOT NULL,
  position    INT UNSIGNED    NOT NULL,
  letter_id   BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '0: every letter',
  version     INT UNSIGNED    NOT NULL COMMENT '1 for the first repoint of the position; the creative''s target is version 0',
  from_url    MEDIUMTEXT      NOT NULL COMMENT 'where the link led before',
  to_url      MEDIUMTEXT      NOT NULL,
  who         VARCHAR(255)    NOT NULL COMMENT '`cli` or the API credential''s name',
  at          DATETIME(3)     NOT NULL,
  PRIMARY KEY (id),
  KEY link_repoints_position (mailing_id, position, letter_id, id),
  KEY link_repoints_version (mailing_id, position, version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
