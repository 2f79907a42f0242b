// Package alert pages on-call when a node's metric (or too many nodes of a
// group) stays in a bad state, through Prometheus Alertmanager and a signed
// webhook, exactly once per breach and with a resolve when it clears.
//
// # Rules
//
// Rules live in PostgreSQL (alert_rules) and are managed through
// /api/v1/alert-rules. A node rule matches a metric id or a glob in which *
// stands for one path segment ("*" is every root, "tcp_reset/sent/*" every
// sent-reset reason) at a state or worse, for N report intervals or S
// seconds. A group rule counts the nodes matching a label selector (per
// value of group_by labels) whose matched metrics are at the state or worse
// and fires at N nodes or X percent. A silent rule pages for each node
// matching its selector that has sent no report for the hold (pending from
// 3 intervals late, as the fleet shows it UNKNOWN; resolved by its next
// report), counted on the leader's clock from its term's start at the
// earliest. The schema migrations create two defaults, NBSRootCritical
// (every root at CRIT for 2 intervals) and NBSNodeSilent (no report for 3
// minutes), both severity critical; each is created once, so deleting or
// disabling it sticks.
//
// # Descriptions
//
// Thresholds are stated in the metric's unit; a baseline threshold with the
// median of the stored values in its window before the breach began (not
// the breach's own values), the factors and the levels they make. The text
// is written once, when the alert fires, and the API, the webhook and
// Alertmanager carry it as it is. Links open the
// node's tree at the explaining metric over the breach window.
//
// # Acknowledgements and silences
//
// Operators acknowledge an alert (NBS's own record) and silence its
// identity for a while: an Alertmanager silence on its labels on every
// configured Alertmanager (v2 API), recorded in alert_silences, during
// which the webhook is not sent. Both are audited (silence.go).
//
// # Evaluation: one leader, fed from memory and PostgreSQL
//
// Collectors are stateless and several may run behind one load balancer, so
// each node's reports may arrive at any of them, yet each breach must page
// exactly once. Exactly one collector evaluates, elected by package leader:
// the holder of a PostgreSQL advisory lock, taken on a dedicated connection
// (not a pooled one, which could be recycled and silently drop the lock),
// with its term recorded in alert_leader. Everyone else retries the
// lock every LeaderRetry; when the leader's process or connection dies the
// server frees the lock (TCP keepalives are set on that connection so a
// vanished host is noticed within seconds) and the next collector takes it.
// A leader pings its connection every second and steps down when that fails.
// On taking the lock it increments an epoch in alert_leader; every write of
// its evaluator checks that epoch in the same transaction, so a leader that
// lost its lock without noticing cannot overwrite its successor's state.
//
// The reports table is the evaluator's input; the leader's own reports are
// also handed to it in memory, so that it need not read back what it has
// just written (at fleet scale that read was a sixth of PostgreSQL's busy
// time):
//
//   - Every collector's writer calls OnStored after each commit, with the
//     reports that were new. It runs on a database writer and must not
//     block.
//   - On the leader the reports go to the evaluator's hand-over (handover.go),
//     bounded in reports and bytes. A report without room leaves its node
//     marked missed (and past a bound of missed nodes, every node), to be
//     read from the database, which has it: nothing is lost.
//   - On a follower the hook queues the node ids on a bounded channel (on
//     overflow it asks for a full sweep) and the forwarder sends them as
//     NOTIFY nbs_alert_wake. The leader LISTENs on its lock connection, so
//     the wake-ups of all collectors reach it (a round trip of a
//     millisecond or two, well inside the two intervals promised).
//   - Each cycle the evaluator reads from the database, from the node's
//     watermark on, in report order, the nodes another collector woke it
//     for, the nodes the hand-over missed, and the nodes it has not read
//     from the database yet in this term (a new leader, a new node, an
//     evaluator restarted after an error): what was handed over for those
//     is set aside, since the hand-over follows the commit and the read
//     has it. The other handed-over reports are taken as the read would
//     return them: per node in report order (two writer workers can commit
//     one node's reports out of order; the engine must see them in order,
//     and sees them so when they arrive in one cycle, as the database path
//     does), newer than the watermark, within the lookback, times in
//     microseconds. A report arriving after its node's watermark passed it
//     is ignored on either path.
//   - Every sweepEvery (and when asked to read every node) it compares
//     every node's newest stored report time (node_latest, one read of the
//     table) with its watermark, after the hand-over has moved the
//     watermarks, and reads the nodes that have something newer, in case a
//     notification was lost: a node whose reports all came from memory
//     costs a row of that read.
//
// /metrics counts the reports evaluated by source (memory, database) and
// the reports the hand-over had no room for.
//
// Because the reports table is the input, a new leader needs no hand-over
// from its predecessor: it loads the open alerts and per-node watermarks
// (flushed every 30 s, and a node's with its changes) and replays what it has not seen, capped
// at Lookback per node; what the old leader had in its hand-over is in the
// table (and, when the term ends, its node ids are sent on by NOTIFY).
// Replays are idempotent: an instance ignores reports at or before its last
// transition, and a resolved identity ignores reports before its resolve.
//
// The Engine is a pure state machine (no I/O, no clock). A node rule's
// instance is pending from its first breaching report, whose coverage
// starts one interval before the report's time; it fires when the breach
// covers the hold (two consecutive CRIT reports cover two intervals), and
// resolves on the first report in which the metric is no longer breaching.
// A gap of gapIntervals without reports restarts a pending breach. The
// explaining child is the worst non-OK descendant in the same report, the
// deepest of equally bad ones. Group rules are evaluated on the collector's
// clock after every cycle and every second; a node silent for 3 intervals
// counts as UNKNOWN, one silent for 15 minutes no longer counts.
//
// Labels are frozen when an alert fires (alertname, severity, node, root,
// metric = the explaining child, the node's labels, the rule's labels),
// because Alertmanager identifies an alert by its label set.
//
// # Delivery: a transactional outbox
//
// A transition and its notifications (one row per Alertmanager and one for
// the webhook in alert_deliveries) are written in one transaction with the
// instance, so a crash can neither lose a page or a resolve nor repeat one
// that was delivered. The leader's sender drains due rows; failures retry
// with exponential backoff (1 s doubling to 5 min, given up after a day and
// kept in the log as failed). Webhook notifications of one alert go out in
// order (a resolve never overtakes its firing) and carry an idempotency key
// for the rare send that succeeds but is not recorded. Alertmanager gets
// every firing alert again every ResendInterval with endsAt four intervals
// ahead, as Prometheus does, and recent resolves for 15 minutes; a new
// leader posts them all at once. Alertmanager deduplicates by labels, so a
// collector restart or failover neither pages again nor loses the resolve.
//
// # Storage and telemetry
//
// All of alerting's SQL is in repo.go; the reports, nodes and metric paths
// it reads belong to package store and are read through its methods. The
// collector's /metrics carries, after Alertmanager's own, notifications and
// failures per integration, their latency, the alerts held by state,
// whether this collector leads, and evaluation failures.
package alert
