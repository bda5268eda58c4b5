-- The honeypot link (issue 24): an invisible link in every letter that no
-- person follows; a click on it marks the scanners of that letter. Served
-- on /c/ like a click. Appending an ENUM value at the end changes only the
-- table's metadata (no rebuild of the partitions) on MariaDB and MySQL 8.
ALTER TABLE links MODIFY kind ENUM('click','image','pixel','unsubscribe','honeypot') NOT NULL;
