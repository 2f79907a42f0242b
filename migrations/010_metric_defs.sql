-- Each distinct metric definition (title, unit, kind, description, default
-- threshold, scale, quantile) is stored once, and a node's catalogue is its
-- (metric, definition) pairs. A fleet's nodes run the same agent, so they
-- share nearly every definition: stored per node, the descriptions made
-- node_metrics the largest table (6.9 GB at 50,000 nodes) and registering a
-- new node wrote ~100 KB.
CREATE TABLE metric_defs (
    id                integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- md5 of the fields as a JSON array (computed by PostgreSQL, in
    -- store.UpsertDefinitions and here alike): the lookup key, not a proof.
    hash              bytea    NOT NULL UNIQUE,
    title             text     NOT NULL,
    unit              text     NOT NULL,
    kind              smallint NOT NULL,
    description       text     NOT NULL,
    default_threshold jsonb,
    scale             float8   NOT NULL DEFAULT 1,
    quantile          float8   NOT NULL DEFAULT 0
);

INSERT INTO metric_defs (hash, title, unit, kind, description, default_threshold, scale, quantile)
SELECT DISTINCT ON (h) h, title, unit, kind, description, default_threshold, scale, quantile
FROM (SELECT decode(md5(jsonb_build_array(title, unit, kind, description, default_threshold, scale, quantile)::text), 'hex') AS h, *
      FROM node_metrics) x
ORDER BY h;

-- No foreign keys to metric_paths and metric_defs: both are dictionaries
-- rows are only ever added to, and checking them cost a trigger call per
-- metric per new node (a third of registering it).
ALTER TABLE node_metrics ADD COLUMN def_id integer;
UPDATE node_metrics nm SET def_id = d.id
FROM metric_defs d
WHERE d.hash = decode(md5(jsonb_build_array(nm.title, nm.unit, nm.kind, nm.description, nm.default_threshold, nm.scale, nm.quantile)::text), 'hex');
ALTER TABLE node_metrics ALTER COLUMN def_id SET NOT NULL,
    DROP CONSTRAINT IF EXISTS node_metrics_metric_id_fkey,
    DROP COLUMN title, DROP COLUMN unit, DROP COLUMN kind, DROP COLUMN description,
    DROP COLUMN default_threshold, DROP COLUMN scale, DROP COLUMN quantile;
