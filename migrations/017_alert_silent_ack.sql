-- Silent rules: a node that sends no report for the hold pages (stopped,
-- disconnected, or cut off from every collector), where a metric rule could
-- only see it UNKNOWN and say nothing.
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_kind_check;
ALTER TABLE alert_rules ADD CONSTRAINT alert_rules_kind_check CHECK (kind IN ('node', 'group', 'silent'));

-- The default, created once (deleting or disabling it sticks, as for
-- NBSRootCritical): any node silent for 3 minutes pages as critical. It is
-- pending (shown, not sent) from 3 report intervals, when the fleet shows
-- the node UNKNOWN.
INSERT INTO alert_rules (name, kind, metric, state, for_seconds, severity, builtin)
VALUES ('NBSNodeSilent', 'silent', '*', 'unknown', 180, 'critical', true)
ON CONFLICT (name) DO NOTHING;

-- Acknowledged: someone is on it (NBS's own state; Alertmanager has none).
ALTER TABLE alert_instances
    ADD COLUMN acknowledged_at timestamptz,
    ADD COLUMN acknowledged_by text NOT NULL DEFAULT '',
    ADD COLUMN ack_comment     text NOT NULL DEFAULT '';

-- Silences of an alert's identity (its fingerprint, so a re-fire within the
-- silence is silenced too, as an Alertmanager silence on its labels would
-- be). Where Alertmanager is the receiver the silence is created there
-- (am_ids: Alertmanager URL -> silence id) and NBS keeps the record; the
-- webhook, which has no silences of its own, is not sent while one is active.
CREATE TABLE alert_silences (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    fingerprint text        NOT NULL,
    instance_id bigint      REFERENCES alert_instances (id) ON DELETE SET NULL,
    matchers    jsonb       NOT NULL DEFAULT '{}',
    starts_at   timestamptz NOT NULL DEFAULT now(),
    ends_at     timestamptz NOT NULL,
    created_by  text        NOT NULL,
    comment     text        NOT NULL DEFAULT '',
    am_ids      jsonb       NOT NULL DEFAULT '{}',
    expired_by  text        NOT NULL DEFAULT '',
    CHECK (ends_at > starts_at)
);
CREATE INDEX alert_silences_active ON alert_silences (fingerprint, ends_at);
