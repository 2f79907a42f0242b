-- Alert rules. A node rule pages when a metric of one node (an exact id, or
-- a glob such as * = every root) holds a state for a duration; a group rule
-- pages when at least N nodes (or X% of them) matching a label selector do.
CREATE TABLE alert_rules (
    id            integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text        NOT NULL UNIQUE,
    kind          text        NOT NULL CHECK (kind IN ('node', 'group')),
    metric        text        NOT NULL,
    state         text        NOT NULL CHECK (state IN ('unknown', 'warn', 'crit')),
    for_intervals integer     NOT NULL DEFAULT 0,
    for_seconds   integer     NOT NULL DEFAULT 0,
    severity      text        NOT NULL,
    selector      jsonb       NOT NULL DEFAULT '{}',
    min_nodes     integer     NOT NULL DEFAULT 0,
    min_percent   float8      NOT NULL DEFAULT 0,
    group_by      text[]      NOT NULL DEFAULT '{}',
    labels        jsonb       NOT NULL DEFAULT '{}',
    runbook_url   text        NOT NULL DEFAULT '',
    enabled       boolean     NOT NULL DEFAULT true,
    builtin       boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CHECK ((for_intervals > 0) <> (for_seconds > 0))
);

-- The default, created once with the schema (so an operator who deletes or
-- disables it is not overruled at the next start): every root at CRIT for
-- two report intervals pages as critical.
INSERT INTO alert_rules (name, kind, metric, state, for_intervals, severity, builtin)
VALUES ('NBSRootCritical', 'node', '*', 'crit', 2, 'critical', true);

-- Alert instances: one row per breach, from pending to firing to resolved.
-- Labels and annotations are frozen when it fires, because Alertmanager
-- identifies an alert by its label set: changing a label mid-alert would page
-- again under a new identity.
CREATE TABLE alert_instances (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    fingerprint text        NOT NULL,
    rule_id     integer     NOT NULL,
    rule_name   text        NOT NULL,
    kind        text        NOT NULL,
    severity    text        NOT NULL,
    node_id     integer,
    node        text        NOT NULL DEFAULT '',
    metric      text        NOT NULL DEFAULT '',
    child       text        NOT NULL DEFAULT '',
    group_key   jsonb       NOT NULL DEFAULT '{}',
    state       text        NOT NULL CHECK (state IN ('pending', 'firing', 'resolved')),
    since       timestamptz NOT NULL,
    last_ts     timestamptz NOT NULL,
    fired_at    timestamptz,
    resolved_at timestamptz,
    value       float8,
    labels      jsonb       NOT NULL DEFAULT '{}',
    annotations jsonb       NOT NULL DEFAULT '{}',
    updated_at  timestamptz NOT NULL DEFAULT now()
);
-- At most one open (pending or firing) instance per identity.
CREATE UNIQUE INDEX alert_instances_open ON alert_instances (fingerprint) WHERE state <> 'resolved';
CREATE INDEX alert_instances_node ON alert_instances (node, id);

-- The delivery outbox and log: a row is written in the same transaction as
-- the transition it announces, so a crash can neither lose a page nor a
-- resolve, and a delivered row is never sent again.
CREATE TABLE alert_deliveries (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id     bigint      NOT NULL REFERENCES alert_instances (id) ON DELETE CASCADE,
    target          text        NOT NULL CHECK (target IN ('alertmanager', 'webhook')),
    url             text        NOT NULL,
    event           text        NOT NULL CHECK (event IN ('firing', 'resolved')),
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    payload         jsonb       NOT NULL
);
CREATE INDEX alert_deliveries_due ON alert_deliveries (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX alert_deliveries_instance ON alert_deliveries (instance_id, id);

-- Up to which report time the evaluator has read each node, so a new leader
-- resumes from the reports table where the last one stopped.
CREATE TABLE alert_watermarks (
    node_id integer     PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
    ts      timestamptz NOT NULL
);

-- Who evaluates. The advisory lock is the election; the epoch is a fencing
-- token every write of the evaluator checks, so a leader that lost its lock
-- without noticing cannot overwrite its successor's state.
CREATE TABLE alert_leader (
    id        integer     PRIMARY KEY CHECK (id = 1),
    epoch     bigint      NOT NULL,
    holder    text        NOT NULL,
    since     timestamptz NOT NULL,
    heartbeat timestamptz NOT NULL
);
INSERT INTO alert_leader VALUES (1, 0, '', now(), now());
