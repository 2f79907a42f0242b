package catalog

//go:generate go run ./gendocs -o ../../docs/metrics.md

// Branch is one root and what can grow under it, for the documentation.
type Branch struct {
	Root string
	// Metrics are the branch's fixed metrics, root first.
	Metrics []Metric
	// Children are the shapes of children created at run time (one per
	// reason or target), with a placeholder in angle brackets in the id.
	Children []Metric
	// Notes lists named children worth documenting on their own (e.g.
	// reasons with specific advice).
	Notes []Metric
}

// Documented lists every branch of the catalogue. A branch added to the
// agent is added here, so docs/metrics.md covers it.
func Documented() []Branch {
	resets := Branch{
		Root:     TCPReset,
		Metrics:  TCPResetTree(),
		Children: []Metric{ResetSentReason("<reason>"), ResetReceivedState("<state>"), ResetSentOther(), ResetReceivedProc()},
	}
	for _, reason := range sortedKeys(resetReasonHelp) {
		resets.Notes = append(resets.Notes, ResetSentReason(reason))
	}
	return []Branch{resets}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}
