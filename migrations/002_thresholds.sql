-- Operator threshold overrides. A scope is global, a label selector, or one
-- node; the most specific scope wins (node > selector > global > the
-- catalogue default the agent announced).
CREATE TABLE threshold_overrides (
    id         integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope_kind text        NOT NULL CHECK (scope_kind IN ('global', 'selector', 'node')),
    selector   jsonb       NOT NULL DEFAULT '{}',
    node       text        NOT NULL DEFAULT '',
    metric     text        NOT NULL,
    threshold  jsonb,
    disabled   boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (scope_kind, selector, node, metric),
    CHECK (disabled OR threshold IS NOT NULL)
);
