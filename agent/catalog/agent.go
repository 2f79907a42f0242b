package catalog

// The agent branch: what measuring costs this node, and whether the
// agent's reports are getting through.
const (
	Agent              = "agent"
	AgentBPF           = "agent/bpf"
	AgentOutbox        = "agent/outbox"
	AgentOutboxDropped = "agent/outbox/dropped"
	AgentTriggered     = "agent/triggered"
	AgentEvidence      = "agent/evidence"
	AgentEvidenceDrop  = "agent/evidence/dropped"
)

// AgentTree is the fixed part of the agent branch; a child per BPF program
// and per triggered source is added at run time.
func AgentTree() []Metric {
	return []Metric{
		{ID: Agent, Title: "Agent overhead", Unit: "% of a CPU", Kind: Gauge,
			Description: "CPU time the agent's BPF programs used during the interval, in percent of one CPU, from " +
				"the kernel's own run-time statistics (BPF_ENABLE_STATS, the mechanism behind " +
				"kernel.bpf_stats_enabled). While they are on, every run of every BPF program on the node reads the " +
				"clock twice, so at intervals of 5 s or more the agent turns them on only for the last second of " +
				"every third interval and measures its programs over that second; the intervals between report " +
				"that second's figures. It measures every interval while a triggered source is attached, an " +
				"operator has the node expanded, something was just attached or detached, or the last figure " +
				"was over the budget. Always-on programs cost little per " +
				"event but run on every reset, retransmit, drop or sampled write; triggered programs run on every " +
				"packet and are detached when they would take the total over --overhead.budget. The children show " +
				"each program's cost, the report backlog and which triggered sources are attached.",
			Threshold: &Threshold{Warn: 2, Crit: 10, Hold: 3}},
		{ID: AgentBPF, Title: "BPF program runs", Unit: "runs/s", Kind: Gauge,
			Description: "Runs per second of all the agent's BPF programs together. The children give each " +
				"program's runs per second, nanoseconds per run and share of a CPU."},
		{ID: AgentOutbox, Title: "Reports awaiting acknowledgement", Unit: "reports", Kind: Gauge,
			Description: "Reports the agent has made that the collector has not yet acknowledged (stored). A few is " +
				"normal; a growing number means the collector is unreachable or slow. They wait in the spool " +
				"(--spool.dir, on disk, so an agent restart or a reboot loses none of them) and are sent in order " +
				"once the collector is back. Beyond --spool.max-bytes or --buffer.reports the oldest measurements " +
				"are dropped (see dropped)."},
		{ID: AgentOutboxDropped, Title: "Samples dropped", Unit: "samples/s", Kind: Rate,
			Description: "Samples, histograms and events (one each) the agent gave up: measurements lost for good. " +
				"When the spool of un-acknowledged reports reaches --spool.max-bytes, the children (per-reason, " +
				"per-target detail) of the oldest reports go first, then the oldest reports (roots and all); " +
				"beyond --buffer.reports the oldest reports go. The collector was unreachable for longer than the " +
				"spool covers: check the agent's connectivity and the collector's health, or raise the bounds. " +
				"Also counted: reports the collector rejected and measurements too large to send at all, both " +
				"logged by the agent with the reason.",
			Threshold: &Threshold{Warn: 0.001, Crit: 1, Hold: 1}},
		{ID: AgentEvidence, Title: "Evidence events reported", Unit: "events/s", Kind: Rate,
			Description: "Evidence events (the 5-tuples and reasons of resets and drops) the agent put in its " +
				"reports. The kernel lets through at most --evidence.per-second of each source's events a second, " +
				"after a first burst of as many (a token bucket), and the agent keeps at most " +
				"--evidence.per-interval of each source's events per report; the rest are counted under dropped, " +
				"so a storm's evidence is a sample and its counters stay exact."},
		{ID: AgentEvidenceDrop, Title: "Evidence events given up", Unit: "events/s", Kind: Rate,
			Description: "Evidence events given up, by source and cap: rate_limit (withheld by the kernel's rate " +
				"limit, --evidence.per-second: expected in a storm, the counters still count every event), " +
				"ring_full (lost because the agent read the kernel's ring too slowly: the agent is starved of " +
				"CPU), interval_cap (read but beyond --evidence.per-interval: raise it, or shorten --interval) and " +
				"agent_down (read by an agent that was killed before it reported them; counted by the next agent " +
				"from the kernel ring's read position; a stop with SIGTERM loses none). Across restarts the " +
				"counts continue where the previous agent's reports left them. latency/flows counts its sampling's " +
				"caps here too: rate_limit (its per-CPU sample rate), table_full (its flow table) and interval_cap " +
				"(retransmitting flows beyond the 10 an interval names). " +
				"The counters of resets and drops are exact whatever evidence is given up."},
		{ID: AgentTriggered, Title: "Triggered sources attached", Unit: "sources", Kind: Gauge,
			Description: "Triggered sources (per-packet BPF programs) attached now. Each is attached while its " +
				"branch is in trouble or an operator is looking, for at most --triggered.max at a stretch, kept " +
				"for --triggered.hold after the trouble clears, and detached when it would take the agent over " +
				"--overhead.budget. The evidence says when and why each was attached or detached."},
	}
}

// AgentProgram is the subtree of one BPF program.
func AgentProgram(name string) []Metric {
	id := AgentBPF + "/" + name
	return []Metric{
		{ID: id, Title: name + " CPU", Unit: "% of a CPU", Kind: Gauge,
			Description: "CPU time BPF program " + name + " used during the interval (at intervals of 5 s or more, " +
				"the last second of the last interval measured: see agent), in percent of one CPU. Its children give runs per second and " +
				"nanoseconds per run (the kernel's run-time statistics)."},
		{ID: id + "/ns_per_run", Title: name + " ns/run", Unit: "ns", Kind: Gauge,
			Description: "Average nanoseconds per run of BPF program " + name + " during the interval (over the " +
				"seconds measured of its whole life when it did not run then). Map updates and hash lookups cost most."},
		{ID: id + "/runs_per_sec", Title: name + " runs/s", Unit: "runs/s", Kind: Gauge,
			Description: "Runs per second of BPF program " + name + " during the interval (at intervals of 5 s or " +
				"more, the last second of the last interval measured: see agent): how often its attach point fired (packets, segments, events)."},
	}
}

// AgentEvidenceDropped is the subtree of one source's given-up evidence:
// the source's total and a child per cap.
func AgentEvidenceDropped(branch string, caps []string) []Metric {
	id := AgentEvidenceDrop + "/" + branch
	out := []Metric{{ID: id, Title: branch + " evidence given up", Unit: "events/s", Kind: Rate,
		Description: "Evidence events of " + branch + " given up, by cap (the children)."}}
	for _, c := range caps {
		out = append(out, Metric{ID: id + "/" + c, Title: branch + " evidence given up: " + c, Unit: "events/s", Kind: Rate,
			Description: "Evidence events of " + branch + " given up under " + c + " (see " + AgentEvidenceDrop + ")."})
	}
	return out
}

// AgentEvidenceReported is the child counting one source's evidence
// events put in reports.
func AgentEvidenceReported(branch string) Metric {
	return Metric{ID: AgentEvidence + "/" + branch, Title: branch + " evidence reported", Unit: "events/s", Kind: Rate,
		Description: "Evidence events of " + branch + " the agent put in its reports (their sum over sources is " +
			AgentEvidence + "). With " + AgentEvidenceDrop + "/" + branch + " it accounts for every event the " +
			"kernel's rate limit let through, across agent restarts."}
}

// AgentTriggeredSource is the child saying whether one triggered source is
// attached.
func AgentTriggeredSource(name, branch string) Metric {
	return Metric{ID: AgentTriggered + "/" + name, Title: name + " attached", Unit: "attached", Kind: Gauge,
		Description: "1 while the triggered source " + name + " (which measures " + branch + ") is attached, 0 " +
			"otherwise. It is attached while its parent branch has a child in WARN or CRIT or an operator has " +
			"expanded the node (an always-on source, latency/rx by default, whenever the budget allows), and " +
			"detached after --triggered.hold without either, after --triggered.max at a stretch, or when it would " +
			"take the agent over --overhead.budget (which an operator's expand may raise for its duration); events " +
			"say which, and the node's tree shows the newest reason beside it (\"detached: over budget, 3.2% of a " +
			"CPU vs 1% (this source 3.1%)\"). A sampling source (latency/rx) measures everything while an expand " +
			"lasts and its sample again after, or sooner when that takes the agent over the budget; events with " +
			"action \"measuring everything\" and \"measuring its sample\" say when. A --netns agent's source is charged only its programs' runs in that " +
			"namespace."}
}
