package access

import (
	"flag"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func parseFlags(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c Config
	c.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	return c, c.Validate()
}

func TestConfigDefaults(t *testing.T) {
	c, err := parseFlags(t)
	if err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if c.Mode != ModeToken || c.SessionTTL != DefaultSessionTTL || c.TokenTTL != DefaultTokenTTL ||
		c.TokenMaxTTL != DefaultTokenMaxTTL || c.MaxTokens != DefaultMaxTokens || c.MetricsAuth || c.BootstrapAdmin {
		t.Errorf("defaults = %+v", c)
	}
	if c.ProxyUserHeader != "X-Forwarded-User" || c.ProxyGroupsHeader != "X-Forwarded-Groups" || c.ProxyDefaultRole != "none" {
		t.Errorf("proxy defaults = %q %q %q", c.ProxyUserHeader, c.ProxyGroupsHeader, c.ProxyDefaultRole)
	}
}

func TestConfigFlags(t *testing.T) {
	c, err := parseFlags(t, "--auth.mode=proxy", "--auth.proxy-cidrs=10.0.0.0/8,192.0.2.7", "--auth.proxy-cidrs", "fd00::/64",
		"--auth.proxy-group-role", "nbs-admins=admin", "--auth.proxy-group-role", "acme=customer:customer=acme,region=eu",
		"--web.allowed-hosts", "nbs.example.com,127.0.0.1:7700", "--web.allowed-hosts", "[::1]:7700",
		"--auth.session-ttl=1h", "--metrics.auth", "--http.tls-cert-file=c.pem", "--http.tls-key-file=k.pem")
	if err != nil {
		t.Fatal(err)
	}
	wantCIDRs := []string{"10.0.0.0/8", "192.0.2.7/32", "fd00::/64"}
	if len(c.ProxyCIDRs) != 3 {
		t.Fatalf("cidrs = %v", c.ProxyCIDRs)
	}
	for i, w := range wantCIDRs {
		if c.ProxyCIDRs[i].String() != w {
			t.Errorf("cidr %d = %s, want %s", i, c.ProxyCIDRs[i], w)
		}
	}
	if !c.ProxyCIDRs.Contains(netip.MustParseAddr("::ffff:10.1.2.3")) || c.ProxyCIDRs.Contains(netip.MustParseAddr("192.0.2.8")) {
		t.Error("Contains is wrong for a v4-mapped address or a neighbour")
	}
	if got := c.ProxyGroupRoles.String(); got != "nbs-admins=admin acme=customer:customer=acme,region=eu" {
		t.Errorf("group roles = %q", got)
	}
	if got := c.AllowedHosts.String(); got != "nbs.example.com,127.0.0.1:7700,[::1]:7700" {
		t.Errorf("allowed hosts = %q", got)
	}
	if c.SessionTTL != time.Hour || !c.MetricsAuth {
		t.Errorf("session ttl %s, metrics auth %v", c.SessionTTL, c.MetricsAuth)
	}
}

func TestConfigFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--auth.proxy-cidrs=10.0.0.0/33"}, "neither a CIDR"},
		{[]string{"--auth.proxy-group-role=admins"}, "not GROUP=ROLE"},
		{[]string{"--auth.proxy-group-role=admins=root"}, `role "root"`},
		{[]string{"--auth.proxy-group-role=acme=customer"}, "needs a selector"},
		{[]string{"--auth.proxy-group-role=acme=customer:"}, "non-empty selector"},
		{[]string{"--auth.proxy-group-role=ops=operator:customer=acme"}, "only a customer takes a selector"},
		{[]string{"--auth.proxy-group-role=ops=operator", "--auth.proxy-group-role=ops=admin"}, "mapped twice"},
	}
	for _, tt := range tests {
		_, err := parseFlags(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want %q", tt.args, err, tt.want)
		}
	}
}

// Validate reports every problem at once, so one run of the collector
// shows everything to fix.
func TestConfigValidateReportsAll(t *testing.T) {
	c := Config{Mode: "ldap", ProxyCIDRs: PrefixList{netip.MustParsePrefix("10.0.0.0/8")}, ProxyUserHeader: "X User",
		ProxyGroupsHeader: "Groups:", ProxyDefaultRole: "customer", SessionTTL: time.Second, TokenTTL: 400 * 24 * time.Hour,
		TokenMaxTTL: 365 * 24 * time.Hour, MaxTokens: 0, AllowedHosts: StringList{"https://nbs.example.com", "nbs:99999"},
		TLSCertFile: "c.pem", ExternalURL: "nbs.example.com"}
	err := c.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`--auth.mode "ldap"`, `--auth.proxy-groups-header "Groups:"`, `--auth.proxy-default-role "customer"`,
		"--auth.session-ttl 1s", "--auth.token-ttl 9600h0m0s", "--auth.max-tokens 0",
		`--web.allowed-hosts "https://nbs.example.com"`, `--web.allowed-hosts "nbs:99999"`,
		"--http.tls-cert-file and --http.tls-key-file go together", `external URL "nbs.example.com"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	proxy := Config{Mode: ModeProxy, ProxyUserHeader: "", ProxyDefaultRole: "viewer"}.withDefaults()
	proxy.ProxyUserHeader = ""
	err = proxy.Validate()
	for _, want := range []string{"needs --auth.proxy-cidrs", `--auth.proxy-user-header ""`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("proxy mode: missing %q in %v", want, err)
		}
	}
	token := Config{ProxyCIDRs: PrefixList{netip.MustParsePrefix("10.0.0.0/8")}}.withDefaults()
	if err := token.Validate(); err == nil || !strings.Contains(err.Error(), "--auth.proxy-cidrs needs --auth.mode=proxy") {
		t.Errorf("proxy CIDRs without proxy mode: %v", err)
	}
}
