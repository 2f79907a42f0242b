-- People's access: API tokens with roles, browser sessions made from them,
-- and the audit log of every change. Secrets are never stored: a token and a
-- session id are kept as their SHA-256, which is enough for random values of
-- 256 bits (no dictionary to attack, so no slow hash is needed).
CREATE TABLE access_tokens (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text        NOT NULL,
    hash         bytea       NOT NULL UNIQUE CHECK (length(hash) = 32),
    -- The secret's last characters, so a person can tell their tokens apart.
    hint         text        NOT NULL,
    role         text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin', 'customer')),
    -- A customer token sees only nodes whose labels contain this object
    -- (nodes.labels @> selector); every other role has none.
    selector     jsonb       NOT NULL DEFAULT '{}',
    created_by   text        NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    last_used_at timestamptz,
    revoked_at   timestamptz,
    revoked_by   text,
    CHECK ((role = 'customer') = (selector <> '{}'::jsonb)),
    CHECK (expires_at > created_at)
);
-- A name identifies one live token (`token revoke --name`); a revoked
-- token's name may be reused.
CREATE UNIQUE INDEX access_tokens_live_name ON access_tokens (name) WHERE revoked_at IS NULL;

-- A session is what the login page turns a token into: the browser holds a
-- random id in an HttpOnly cookie, never the token. It dies with its token.
CREATE TABLE access_sessions (
    id_hash     bytea       PRIMARY KEY CHECK (length(id_hash) = 32),
    token_id    bigint      NOT NULL REFERENCES access_tokens (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    remote_addr text        NOT NULL DEFAULT ''
);
CREATE INDEX access_sessions_token ON access_sessions (token_id, created_at);
CREATE INDEX access_sessions_expiry ON access_sessions (expires_at);

-- Who changed what, when, from where, with the value before and after.
-- token_id has no foreign key: the entry outlives the token.
CREATE TABLE audit_log (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL,
    actor       text        NOT NULL,
    actor_kind  text        NOT NULL,
    token_id    bigint,
    role        text        NOT NULL,
    action      text        NOT NULL,
    object_kind text        NOT NULL,
    object_id   text        NOT NULL,
    old_value   jsonb,
    new_value   jsonb,
    remote_addr text        NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_at ON audit_log (at, id);
CREATE INDEX audit_log_object ON audit_log (object_kind, at, id);
