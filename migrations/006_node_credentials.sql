-- Which credential may report under a node name. A row is written when a
-- node enrolls (or an operator enrolls or revokes it), before its first
-- Hello is stored, so it is keyed by name rather than by nodes.id; deleting
-- a node's data keeps a revocation. Only the SHA-256 of a node credential's
-- random secret is kept: the credential itself is shown once.
CREATE TABLE node_credentials (
    node         text        PRIMARY KEY,
    state        text        NOT NULL CHECK (state IN ('active', 'revoked')),
    secret_hash  bytea       CHECK (state = 'revoked' OR octet_length(secret_hash) = 32),
    -- How it was enrolled: 'bootstrap' (a node with the fleet token) or
    -- 'operator' (nbs-collector nodes enroll, or the API), and from where.
    enrolled_by  text        NOT NULL DEFAULT '',
    enrolled_at  timestamptz,
    last_used_at timestamptz,
    last_peer    text        NOT NULL DEFAULT '',
    revoked_at   timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
