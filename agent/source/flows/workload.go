package flows

import "strings"

// Workload is the workload of a pod ("namespace/name") when its name says
// it clearly: a Deployment's pod (name-<ReplicaSet hash>-<5 chars>), a
// DaemonSet's or Job's (name-<5 chars>), or a StatefulSet's (name-<ordinal>);
// "" otherwise. The suffixes are Kubernetes' own: the random part is drawn
// from an alphabet without vowels and confusable digits.
func Workload(pod string) string {
	ns, name, ok := strings.Cut(pod, "/")
	if !ok || ns == "" || name == "" {
		return ""
	}
	parts := strings.Split(name, "-")
	n := len(parts)
	if n < 2 {
		return ""
	}
	last := parts[n-1]
	switch {
	case n >= 3 && len(last) == 5 && randomAlphabet(last) && len(parts[n-2]) >= 6 && len(parts[n-2]) <= 10 && randomAlphabet(parts[n-2]):
		return ns + "/" + strings.Join(parts[:n-2], "-")
	case len(last) == 5 && randomAlphabet(last):
		return ns + "/" + strings.Join(parts[:n-1], "-")
	case digits(last):
		return ns + "/" + strings.Join(parts[:n-1], "-")
	}
	return ""
}

// randomAlphabet says whether s is made of the characters Kubernetes draws
// generated name suffixes from (k8s.io/apimachinery/pkg/util/rand):
// "bcdfghjklmnpqrstvwxz2456789".
func randomAlphabet(s string) bool {
	for _, r := range s {
		if !strings.ContainsRune("bcdfghjklmnpqrstvwxz2456789", r) {
			return false
		}
	}
	return s != ""
}

func digits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}
