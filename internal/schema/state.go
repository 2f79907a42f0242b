package schema

import nbsv1 "github.com/nbs-project/nbs/proto/nbs/v1"

// Severity ranks states for "worst of": OK < UNKNOWN < WARN < CRIT, and 0
// for STATE_UNSPECIFIED or a value the wire does not define. UNKNOWN ranks
// above OK because a source that cannot measure deserves a look, and below
// WARN because it has not measured anything wrong. It is not the enum's
// order (WARN=2, CRIT=3, UNKNOWN=4).
func Severity(s nbsv1.State) int {
	switch s {
	case nbsv1.State_STATE_OK:
		return 1
	case nbsv1.State_STATE_UNKNOWN:
		return 2
	case nbsv1.State_STATE_WARN:
		return 3
	case nbsv1.State_STATE_CRIT:
		return 4
	}
	return 0
}

// MaxSeverity is the severity of the worst state, CRIT.
const MaxSeverity = 4

// StateOfSeverity is the inverse of Severity: the state that ranks n, or
// STATE_UNSPECIFIED for any n outside 1..MaxSeverity. It turns a ranked
// maximum (a SQL max over severities) back into a state.
func StateOfSeverity(n int) nbsv1.State {
	switch n {
	case 1:
		return nbsv1.State_STATE_OK
	case 2:
		return nbsv1.State_STATE_UNKNOWN
	case 3:
		return nbsv1.State_STATE_WARN
	case 4:
		return nbsv1.State_STATE_CRIT
	}
	return nbsv1.State_STATE_UNSPECIFIED
}

// Worse returns the more severe of two states, a when they rank equal.
func Worse(a, b nbsv1.State) nbsv1.State {
	if Severity(b) > Severity(a) {
		return b
	}
	return a
}
