-- The term record of the export push leader (collector/export/push): one
-- collector of those sharing this database takes the snapshots it pushes
-- to remote write and OTLP receivers, so no series reaches a receiver
-- twice from two collectors. Same shape as alert_leader (collector/leader).
CREATE TABLE export_push_leader (
    id        integer     PRIMARY KEY CHECK (id = 1),
    epoch     bigint      NOT NULL,
    holder    text        NOT NULL,
    since     timestamptz NOT NULL,
    heartbeat timestamptz NOT NULL
);
INSERT INTO export_push_leader VALUES (1, 0, '', now(), now());
