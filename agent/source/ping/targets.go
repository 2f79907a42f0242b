package ping

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/nbs-project/nbs/agent/catalog"
)

// Target is one thing to ping: Host is an IP address or a DNS name, Name
// what the tree calls it (ping/<Name>).
type Target struct {
	Name string
	Host string
}

// ID is the target's subtree id, ping/<sanitised name>.
func (t Target) ID() string { return catalog.PingTargetID(t.Name) }

var hostnameRE = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?)*\.?$`)

// ParseTarget reads "host" or "name=host", where host is an IP address or a
// DNS name: "10.0.0.1", "gw=10.0.0.1", "web-1=web-1.example.com". The
// collector hands out fleet peers as "<node name>=<ping address>".
func ParseTarget(s string) (Target, error) {
	s = strings.TrimSpace(s)
	name, host, named := strings.Cut(s, "=")
	if !named {
		host, name = name, ""
	}
	name, host = strings.TrimSpace(name), strings.TrimSpace(host)
	if host == "" {
		return Target{}, fmt.Errorf("ping target %q: no address", s)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return Target{}, fmt.Errorf("ping target %q: scoped (link-local %%zone) addresses are not supported", s)
		}
		if a.IsUnspecified() || a.IsMulticast() {
			return Target{}, fmt.Errorf("ping target %q: not a unicast address", s)
		}
		host = a.Unmap().String()
	} else if len(host) > 253 || !hostnameRE.MatchString(host) {
		return Target{}, fmt.Errorf("ping target %q: %q is neither an IP address nor a host name", s, host)
	}
	if named && name == "" {
		return Target{}, fmt.Errorf("ping target %q: empty name before '='", s)
	}
	if name == "" {
		name = host
	}
	if len(name) > 128 {
		return Target{}, fmt.Errorf("ping target %q: name longer than 128 characters", s)
	}
	return Target{Name: name, Host: host}, nil
}

// ParseTargets reads a comma-separated list (the --ping.targets flag).
func ParseTargets(list string) ([]Target, error) {
	var out []Target
	var errs []error
	for _, part := range strings.Split(list, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		t, err := ParseTarget(part)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, t)
	}
	return out, errors.Join(errs...)
}
