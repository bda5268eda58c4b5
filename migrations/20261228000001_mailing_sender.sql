-- Tracking domains per sender (issue 57): the domain of a mailing's
-- `from` as the builder (or the relay) read it, so that a server answers a
-- mailing's links on its own sender's tracking hosts (and the base URL's)
-- only. NULL for mailings built before it was kept: their links answer on
-- every added host, as before.
ALTER TABLE mailings ADD COLUMN sender_domain VARCHAR(253) NULL;
