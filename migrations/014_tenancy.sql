-- Tenancy the operator decides (collector/tenant, collector/nodeauth).
--
-- A node's tenant is the value of one label key (--tenant.label, default
-- customer). It is bound to the node's name server-side — by the bootstrap
-- token that enrolled it, by the operator, or by its certificate — and is
-- never taken from a Hello once names are verified.

-- The labels bound to a node name (the tenant among them): they replace
-- whatever its Hellos say for those keys. Keyed by name like
-- node_credentials, since a binding may precede the node's first Hello.
CREATE TABLE node_bindings (
    node   text        PRIMARY KEY,
    labels jsonb       NOT NULL CHECK (jsonb_typeof(labels) = 'object'),
    -- Who bound them: 'bootstrap:<token name>', 'operator:<actor>' or
    -- 'migration'.
    set_by text        NOT NULL,
    set_at timestamptz NOT NULL DEFAULT now()
);

-- Per-tenant bootstrap tokens: each enrolls new names into its labels
-- (nbs-collector nodes bootstrap create --labels customer=acme). Only the
-- token's SHA-256 is kept, as for people's tokens.
CREATE TABLE node_bootstrap_tokens (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL,
    hash       bytea       NOT NULL UNIQUE CHECK (length(hash) = 32),
    labels     jsonb       NOT NULL CHECK (jsonb_typeof(labels) = 'object' AND labels <> '{}'::jsonb),
    -- How many names it may enroll (NULL: no limit beyond --ingest.max-nodes).
    max_nodes  integer     CHECK (max_nodes > 0),
    enrolled   integer     NOT NULL DEFAULT 0,
    created_by text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz
);
CREATE UNIQUE INDEX node_bootstrap_tokens_live_name ON node_bootstrap_tokens (name) WHERE revoked_at IS NULL;

-- History stays with the tenant that owned it: when a node's tenant
-- changes, its row is retired (with every report, rollup, event and alert
-- keyed by its id) and a new row — a new id — carries the name from then
-- on. Each tenant's scope therefore holds exactly the node's history it
-- owned, with no validity intervals to join at read time. Staff see a
-- name's current row; a customer sees its newest row within its scope.
ALTER TABLE nodes ADD COLUMN tenant text NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN retired_at timestamptz;
-- Labels a Hello claimed for keys bound server-side, when they differ
-- from the bound ones: ignored, and shown on the node's page.
ALTER TABLE nodes ADD COLUMN claimed_labels jsonb;
ALTER TABLE nodes DROP CONSTRAINT nodes_name_key;
CREATE UNIQUE INDEX nodes_current_name ON nodes (name) WHERE retired_at IS NULL;
CREATE INDEX nodes_name ON nodes (name, id);

-- Until this migration a node's agent chose its customer label. Bind what
-- enrolled nodes have now, so an upgrade changes no node's tenant (the key
-- was the hard-coded 'customer' until now).
UPDATE nodes SET tenant = labels->>'customer' WHERE labels ? 'customer';
INSERT INTO node_bindings (node, labels, set_by)
SELECT c.node, jsonb_build_object('customer', n.labels->>'customer'), 'migration'
FROM node_credentials c JOIN nodes n ON n.name = c.node
WHERE c.state = 'active' AND n.labels ? 'customer';
