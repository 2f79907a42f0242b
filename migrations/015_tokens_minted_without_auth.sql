-- A token created while --auth.mode=none was in force was made by whoever
-- reached the HTTP port: nobody was asked who they were. It is marked so,
-- and refused once the collector authenticates again (collector/access).
ALTER TABLE access_tokens ADD COLUMN minted_without_auth boolean NOT NULL DEFAULT false;
