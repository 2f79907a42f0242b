package nodeauth

import (
	"errors"
	"flag"
	"fmt"
)

// Config is how the collector verifies node names (--grpc.node-auth and
// the files it reads).
type Config struct {
	// Mode is none, enroll or mtls; "" derives it (Resolve).
	Mode string
	// BootstrapTokenFile holds the fleet token that enrolls new nodes.
	BootstrapTokenFile string
	// IdentityMapFile lets certificate identities report as other node
	// names (mtls).
	IdentityMapFile string
}

// RegisterFlags binds the flags, with the values already in c as their
// defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Mode, "grpc.node-auth", c.Mode, "how node names are verified: none (any client may report as any node), enroll (a name is bound to the credential issued at its first Hello with the bootstrap token, or by an operator), mtls (the client certificate's DNS SAN or CN must be the name) (default: mtls with --grpc.tls-client-ca-file, enroll with --grpc.bootstrap-token-file, else none on a loopback --grpc.listen-address; any other address needs one of them or this flag)")
	fs.StringVar(&c.BootstrapTokenFile, "grpc.bootstrap-token-file", c.BootstrapTokenFile, "file holding the fleet bootstrap token (32-512 characters, e.g. openssl rand -base64 48): a node without a credential presents it once to enroll its name")
	fs.StringVar(&c.IdentityMapFile, "grpc.node-identity-map-file", c.IdentityMapFile, "with mtls: lines of 'certificate-identity node-name-or-glob... [label=value...]' letting a certificate report as other names, with labels (the tenant) bound to them; re-read when it changes")
}

// Resolve is the mode in force and every problem of the choice, given
// whether agent streams have a client CA (mutual TLS): Mode when it is set,
// else mtls with a client CA, enroll with a bootstrap token file, and none
// without either. Whether none may be had by default depends on who can
// reach the listen address, which is the app's to say.
func (c Config) Resolve(clientCA bool) (Mode, error) {
	mode := ModeNone
	switch {
	case c.Mode != "":
		m, err := ParseMode(c.Mode)
		if err != nil {
			return "", fmt.Errorf("--grpc.node-auth %w", err)
		}
		mode = m
	case clientCA && c.BootstrapTokenFile != "":
		return "", errors.New("--grpc.tls-client-ca-file and --grpc.bootstrap-token-file: choose how node names are verified with --grpc.node-auth=mtls or enroll")
	case clientCA:
		mode = ModeMTLS
	case c.BootstrapTokenFile != "":
		mode = ModeEnroll
	}
	var errs []error
	if mode == ModeMTLS && !clientCA {
		errs = append(errs, errors.New("--grpc.node-auth=mtls needs --grpc.tls-client-ca-file (and the server certificate)"))
	}
	if c.BootstrapTokenFile != "" && mode != ModeEnroll {
		errs = append(errs, fmt.Errorf("--grpc.bootstrap-token-file is for --grpc.node-auth=enroll, not %s", mode))
	}
	if c.IdentityMapFile != "" && mode != ModeMTLS {
		errs = append(errs, fmt.Errorf("--grpc.node-identity-map-file is for --grpc.node-auth=mtls, not %s", mode))
	}
	return mode, errors.Join(errs...)
}
