-- Per-tenant node quotas (nbs-collector nodes quota): how many nodes a
-- tenant may register, set by the operator; a tenant without a row has
-- --ingest.max-nodes-per-tenant (0: no quota of its own). A quota of 0
-- admits no new node of the tenant.
CREATE TABLE tenant_quotas (
    tenant    text        PRIMARY KEY CHECK (tenant <> ''),
    max_nodes integer     NOT NULL CHECK (max_nodes >= 0),
    set_by    text        NOT NULL,
    set_at    timestamptz NOT NULL DEFAULT now()
);

-- A new node of a tenant with a quota counts the tenant's current rows.
CREATE INDEX nodes_current_tenant ON nodes (tenant) WHERE retired_at IS NULL;
