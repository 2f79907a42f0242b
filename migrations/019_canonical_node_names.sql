-- Node names are identities, and have one form: lower case
-- (schema.CanonicalNodeName). Before this, NODE-A and node-a were two
-- nodes, and a look-alike enrolled with the fleet token could take a real
-- node's place in its peers' ping mesh (whose target ids were lower case).
--
-- Names stored before are folded. Where a folded name meets a node that
-- already has it, the one that already had the canonical name keeps it
-- (and its credential and bindings): the case variant is retired with its
-- history, and its credential and bindings go, so an agent still reporting
-- as the variant must prove it is that node (or be enrolled by an operator).
-- Among case variants only (no canonical one), the most recently heard
-- keeps the name.

-- Nodes: retire every current row that would collide once folded, except
-- the one that keeps the name.
WITH ranked AS (
    SELECT id, row_number() OVER (
        PARTITION BY lower(name)
        ORDER BY (name = lower(name)) DESC, last_hello DESC, id DESC) AS keep_rank
    FROM nodes WHERE retired_at IS NULL
)
UPDATE nodes n SET retired_at = now()
FROM ranked r WHERE n.id = r.id AND r.keep_rank > 1;
UPDATE nodes SET name = lower(name) WHERE name <> lower(name);

-- Credentials and bindings are keyed by name: a variant whose canonical
-- name is taken loses them; otherwise they are renamed.
DELETE FROM node_credentials c
WHERE c.node <> lower(c.node)
  AND (EXISTS (SELECT 1 FROM node_credentials o WHERE o.node = lower(c.node))
       OR EXISTS (SELECT 1 FROM node_credentials o
                  WHERE lower(o.node) = lower(c.node) AND o.node <> lower(o.node)
                    AND coalesce(o.last_used_at, o.updated_at) > coalesce(c.last_used_at, c.updated_at)));
UPDATE node_credentials SET node = lower(node) WHERE node <> lower(node);

DELETE FROM node_bindings b
WHERE b.node <> lower(b.node)
  AND (EXISTS (SELECT 1 FROM node_bindings o WHERE o.node = lower(b.node))
       OR EXISTS (SELECT 1 FROM node_bindings o
                  WHERE lower(o.node) = lower(b.node) AND o.node <> lower(o.node) AND o.set_at > b.set_at));
UPDATE node_bindings SET node = lower(node) WHERE node <> lower(node);

-- Per-node threshold overrides name their node; a variant's override that
-- would collide with the canonical one's is dropped (the canonical wins).
DELETE FROM threshold_overrides t
WHERE t.node <> lower(t.node)
  AND EXISTS (SELECT 1 FROM threshold_overrides o
              WHERE o.scope_kind = t.scope_kind AND o.selector = t.selector AND o.metric = t.metric
                AND lower(o.node) = lower(t.node) AND o.id <> t.id
                AND (o.node = lower(o.node) OR o.updated_at > t.updated_at));
UPDATE threshold_overrides SET node = lower(node) WHERE node <> lower(node);

UPDATE alert_instances SET node = lower(node) WHERE node <> lower(node);

-- From now on a stored name is canonical.
ALTER TABLE nodes ADD CONSTRAINT nodes_name_canonical CHECK (name = lower(name));
ALTER TABLE node_credentials ADD CONSTRAINT node_credentials_node_canonical CHECK (node = lower(node));
ALTER TABLE node_bindings ADD CONSTRAINT node_bindings_node_canonical CHECK (node = lower(node));
