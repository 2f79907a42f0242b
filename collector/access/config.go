package access

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nbs-project/nbs/collector/tenant"
)

// Mode is how people are recognised.
type Mode string

const (
	// ModeToken: API tokens (Bearer) and sessions made from them.
	ModeToken Mode = "token"
	// ModeProxy: as token, and a trusted reverse proxy's user header.
	ModeProxy Mode = "proxy"
	// ModeNone: everyone is admin; only for a fully trusted network.
	ModeNone Mode = "none"
)

// Limits and defaults.
const (
	DefaultTokenTTL    = 90 * 24 * time.Hour
	DefaultTokenMaxTTL = 365 * 24 * time.Hour
	DefaultSessionTTL  = 12 * time.Hour
	DefaultMaxTokens   = 1000
	// DefaultProxyRole refuses a proxy user in no mapped group: a groups
	// header the proxy forgot, or a group name misspelt in a flag, must
	// not make everyone a fleet-wide viewer.
	DefaultProxyRole = "none"
	// lastUsedEvery throttles writes of a token's last_used_at.
	lastUsedEvery = time.Minute
)

// Config is the access part of the collector's configuration.
type Config struct {
	Mode Mode
	// ProxyCIDRs are the addresses of reverse proxies whose user header is
	// believed; the TCP peer decides, never X-Forwarded-For.
	ProxyCIDRs PrefixList
	// TrustedProxies are load balancers and proxies whose X-Forwarded-For
	// names the client (audit log, sessions, the failed sign-in limit);
	// ProxyCIDRs are trusted for it too. From anyone else the header is
	// ignored and the TCP peer is the client.
	TrustedProxies    PrefixList
	ProxyUserHeader   string
	ProxyGroupsHeader string
	// ProxyGroupRoles maps a proxy group to a role, e.g. nbs-admins=admin
	// or acme-staff=customer:customer=acme.
	ProxyGroupRoles GroupRoles
	// ProxyDefaultRole is the role of a proxy user in no mapped group;
	// "none" (the default) refuses them.
	ProxyDefaultRole string
	SessionTTL       time.Duration
	TokenTTL         time.Duration
	TokenMaxTTL      time.Duration
	MaxTokens        int
	// FailedAttemptsPerMinute is how many failed sign-ins (logins, bad
	// Authorization headers) one client address may make a minute;
	// FailedAttemptsClients how many addresses the limit keeps track of.
	FailedAttemptsPerMinute int
	FailedAttemptsClients   int
	// AllowedHosts, when set, are the only Host headers answered (against
	// DNS rebinding); health and metrics stay reachable by any name.
	AllowedHosts StringList
	// MetricsAuth puts /metrics behind a viewer token.
	MetricsAuth bool
	// TLS for the HTTP listener; the app serves HTTPS when both are set.
	TLSCertFile string
	TLSKeyFile  string
	// BootstrapAdmin asks the app to create a fresh admin token at start
	// and print a login URL with it.
	BootstrapAdmin bool
	// BootstrapAdminFile asks the app to create a fresh admin token at
	// start and write its secret to this file, mode 0600 (make run).
	BootstrapAdminFile string
	// ExternalURL is where people reach NBS; the app sets it from
	// --web.external-url. It is a trusted origin for mutations, and an
	// https URL makes cookies Secure behind a TLS-terminating proxy.
	ExternalURL string
	// IndexHTML is the UI's built index.html; the app sets it so the
	// Content-Security-Policy can allow exactly its inline scripts.
	IndexHTML []byte
	// Tenant is the label key naming a node's tenant (--tenant.label; the
	// app sets it): a customer's selector must name it, so that no label
	// a node's agent chooses can widen a customer's scope.
	Tenant tenant.Key
}

// RegisterFlags binds the flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Mode = ModeToken
	fs.Func("auth.mode", "how people are recognised: token (API tokens and the login page), proxy (also a trusted reverse proxy's user header), none (everyone is admin: a trusted network only) (default token)", func(s string) error {
		c.Mode = Mode(s)
		return nil
	})
	fs.Var(&c.ProxyCIDRs, "auth.proxy-cidrs", "addresses of the reverse proxies whose user header is trusted, e.g. 10.0.0.5/32,fd00::/64 (repeat or separate with commas; --auth.mode=proxy)")
	fs.Var(&c.TrustedProxies, "web.trusted-proxies", "addresses of load balancers and reverse proxies whose X-Forwarded-For names the client for the audit log, sessions and the failed sign-in limit, e.g. 10.0.0.0/24 (repeat or separate with commas; --auth.proxy-cidrs are trusted too; default: none, the TCP peer is the client)")
	fs.StringVar(&c.ProxyUserHeader, "auth.proxy-user-header", "X-Forwarded-User", "header in which the trusted proxy names the user (oauth2-proxy: X-Forwarded-User)")
	fs.StringVar(&c.ProxyGroupsHeader, "auth.proxy-groups-header", "X-Forwarded-Groups", "header in which the trusted proxy lists the user's groups, comma separated (oauth2-proxy: X-Forwarded-Groups); empty: every user gets --auth.proxy-default-role")
	fs.Var(&c.ProxyGroupRoles, "auth.proxy-group-role", "GROUP=ROLE for proxy users, e.g. nbs-admins=admin, nbs-ops=operator, acme=customer:customer=acme (repeat the flag; the highest role of a user's groups applies)")
	fs.StringVar(&c.ProxyDefaultRole, "auth.proxy-default-role", DefaultProxyRole, "role of a proxy user in no mapped group (a missing or misspelt groups header included): none (refused), viewer, operator or admin")
	fs.DurationVar(&c.SessionTTL, "auth.session-ttl", DefaultSessionTTL, "how long a login lasts (never beyond its token's expiry)")
	fs.DurationVar(&c.TokenTTL, "auth.token-ttl", DefaultTokenTTL, "expiry of a token created without one")
	fs.DurationVar(&c.TokenMaxTTL, "auth.token-max-ttl", DefaultTokenMaxTTL, "longest expiry a token may be given")
	fs.IntVar(&c.MaxTokens, "auth.max-tokens", DefaultMaxTokens, "most live (unexpired, unrevoked) tokens")
	fs.IntVar(&c.FailedAttemptsPerMinute, "auth.failed-attempts-per-minute", DefaultFailedAttemptsPerMinute, "failed sign-ins (a login or an Authorization header with a token that does not work) one client address may make a minute; past it, its logins and bearer-token requests get 429 with Retry-After (an IPv6 address counts as its /64)")
	fs.IntVar(&c.FailedAttemptsClients, "auth.failed-attempts-clients", DefaultFailedAttemptsClients, "client addresses the failed sign-in limit keeps track of; the least recently failing are forgotten first")
	fs.BoolVar(&c.BootstrapAdmin, "auth.bootstrap-admin", false, "at start, replace the admin token named \""+BootstrapTokenName+"\" with a fresh one and log a login URL carrying it (for make run)")
	fs.StringVar(&c.BootstrapAdminFile, "auth.bootstrap-admin-file", "", "at start, replace the admin token named \""+BootstrapTokenName+"\" with a fresh one and write its secret to this file (mode 0600), for scripts on this host (make run)")
	fs.Var(&c.AllowedHosts, "web.allowed-hosts", "Host names (optionally host:port) the UI and API answer to, against DNS rebinding, e.g. nbs.example.com (repeat or separate with commas; default: any)")
	fs.BoolVar(&c.MetricsAuth, "metrics.auth", false, "require a viewer token for /metrics")
	fs.StringVar(&c.TLSCertFile, "http.tls-cert-file", "", "PEM certificate for the web UI and API (HTTPS); without it HTTP is plaintext")
	fs.StringVar(&c.TLSKeyFile, "http.tls-key-file", "", "PEM private key of --http.tls-cert-file")
}

// WithDefaults fills what a Config built in code (tests, the token
// command, a collector started in-process) leaves zero.
func (c Config) WithDefaults() Config { return c.withDefaults() }

// DefaultConfig is the configuration the flags default to.
func DefaultConfig() Config {
	return Config{ProxyGroupsHeader: "X-Forwarded-Groups"}.withDefaults()
}

func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = ModeToken
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = DefaultTokenTTL
	}
	if c.TokenMaxTTL == 0 {
		c.TokenMaxTTL = max(DefaultTokenMaxTTL, c.TokenTTL)
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = DefaultMaxTokens
	}
	if c.FailedAttemptsPerMinute == 0 {
		c.FailedAttemptsPerMinute = DefaultFailedAttemptsPerMinute
	}
	if c.FailedAttemptsClients == 0 {
		c.FailedAttemptsClients = DefaultFailedAttemptsClients
	}
	if c.ProxyUserHeader == "" {
		c.ProxyUserHeader = "X-Forwarded-User"
	}
	if c.Tenant == "" {
		c.Tenant = tenant.DefaultKey
	}
	if c.ProxyDefaultRole == "" {
		c.ProxyDefaultRole = DefaultProxyRole
	}
	return c
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	switch c.Mode {
	case ModeToken, ModeNone:
		if len(c.ProxyCIDRs) > 0 {
			errs = append(errs, fmt.Errorf("--auth.proxy-cidrs needs --auth.mode=proxy (it is %s)", c.Mode))
		}
	case ModeProxy:
		if len(c.ProxyCIDRs) == 0 {
			errs = append(errs, errors.New("--auth.mode=proxy needs --auth.proxy-cidrs: the addresses of the proxies whose user header is trusted"))
		}
		if !validHeaderName(c.ProxyUserHeader) {
			errs = append(errs, fmt.Errorf("--auth.proxy-user-header %q is not a header name", c.ProxyUserHeader))
		}
	default:
		errs = append(errs, fmt.Errorf("--auth.mode %q must be token, proxy or none", c.Mode))
	}
	key := c.Tenant
	if key == "" {
		key = tenant.DefaultKey
	}
	for _, m := range c.ProxyGroupRoles {
		if m.Role == RoleCustomer && !key.NamedBy(m.Selector) {
			errs = append(errs, fmt.Errorf("--auth.proxy-group-role %s: a customer's selector must name the tenant label %q (e.g. %s=acme), not only %s", m.Group, key, key, m.Selector))
		}
	}
	if c.ProxyGroupsHeader != "" && !validHeaderName(c.ProxyGroupsHeader) {
		errs = append(errs, fmt.Errorf("--auth.proxy-groups-header %q is not a header name", c.ProxyGroupsHeader))
	}
	if c.ProxyDefaultRole != "none" {
		if r, err := ParseRole(c.ProxyDefaultRole); err != nil || r == RoleCustomer {
			errs = append(errs, fmt.Errorf("--auth.proxy-default-role %q must be viewer, operator, admin or none", c.ProxyDefaultRole))
		}
	}
	if c.SessionTTL < time.Minute || c.SessionTTL > 30*24*time.Hour {
		errs = append(errs, fmt.Errorf("--auth.session-ttl %s must be from 1m to 720h", c.SessionTTL))
	}
	if c.TokenMaxTTL < time.Hour || c.TokenMaxTTL > 10*365*24*time.Hour {
		errs = append(errs, fmt.Errorf("--auth.token-max-ttl %s must be from 1h to 87600h (10 years)", c.TokenMaxTTL))
	}
	if c.TokenTTL < time.Minute || c.TokenTTL > c.TokenMaxTTL {
		errs = append(errs, fmt.Errorf("--auth.token-ttl %s must be from 1m to --auth.token-max-ttl (%s)", c.TokenTTL, c.TokenMaxTTL))
	}
	if c.MaxTokens < 1 || c.MaxTokens > 100000 {
		errs = append(errs, fmt.Errorf("--auth.max-tokens %d must be from 1 to 100000", c.MaxTokens))
	}
	if c.FailedAttemptsPerMinute < 1 || c.FailedAttemptsPerMinute > 100000 {
		errs = append(errs, fmt.Errorf("--auth.failed-attempts-per-minute %d must be from 1 to 100000", c.FailedAttemptsPerMinute))
	}
	if c.FailedAttemptsClients < 1 || c.FailedAttemptsClients > 10_000_000 {
		errs = append(errs, fmt.Errorf("--auth.failed-attempts-clients %d must be from 1 to 10000000", c.FailedAttemptsClients))
	}
	for _, h := range c.AllowedHosts {
		if !validHostPattern(h) {
			errs = append(errs, fmt.Errorf("--web.allowed-hosts %q must be a host name or host:port, without scheme or path", h))
		}
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("--http.tls-cert-file and --http.tls-key-file go together"))
	}
	if c.ExternalURL != "" {
		if u, err := url.Parse(c.ExternalURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("external URL %q must be an absolute http(s) URL", c.ExternalURL))
		}
	}
	return errors.Join(errs...)
}

func validHeaderName(s string) bool {
	if s == "" || len(s) > 100 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func validHostPattern(s string) bool {
	if s == "" || len(s) > 255 || strings.ContainsAny(s, "/?#@ ") {
		return false
	}
	host, port := splitHost(s)
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return false
		}
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return host != "" && !strings.ContainsAny(host, ":[]")
}

// splitHost splits a Host header or pattern into a lower-case host (IPv6
// without brackets, no trailing dot) and a port, which may be empty.
func splitHost(s string) (host, port string) {
	host = s
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	return strings.TrimSuffix(strings.ToLower(host), "."), port
}

// PrefixList is a flag.Value of CIDRs (a bare address is a /32 or /128).
type PrefixList []netip.Prefix

func (l *PrefixList) String() string {
	parts := make([]string, len(*l))
	for i, p := range *l {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

func (l *PrefixList) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return fmt.Errorf("%q is neither a CIDR (10.0.0.0/8) nor an address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		*l = append(*l, p.Masked())
	}
	return nil
}

// Contains reports whether the address is in one of the prefixes.
func (l PrefixList) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range l {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// StringList is a flag.Value collecting values from repeated flags or commas.
type StringList []string

func (l *StringList) String() string { return strings.Join(*l, ",") }

func (l *StringList) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
