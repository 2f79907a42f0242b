package app

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The shipped configurations listen where other hosts reach them, so they
// must choose --grpc.node-auth (and stay valid as the rule changes), and the
// refusal deploy/README.md quotes must be the one the collector prints.
func TestDeployConfigurationsChooseNodeAuth(t *testing.T) {
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile("../../" + path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// collector.env.example: NBS_COLLECTOR_ARGS, split on whitespace as
	// systemd does.
	envArgs := regexp.MustCompile(`(?m)^NBS_COLLECTOR_ARGS="([^"]*)"$`).FindStringSubmatch(read("deploy/config/collector.env.example"))
	if envArgs == nil {
		t.Fatal("deploy/config/collector.env.example has no NBS_COLLECTOR_ARGS line")
	}
	// collector.yaml: the collector container's args list.
	var k8sArgs []string
	inArgs := false
	for _, line := range strings.Split(read("deploy/kubernetes/collector.yaml"), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "args:":
			inArgs = true
		case inArgs && strings.HasPrefix(trimmed, "- "):
			k8sArgs = append(k8sArgs, strings.TrimPrefix(trimmed, "- "))
		case inArgs && !strings.HasPrefix(trimmed, "#"):
			inArgs = false
		}
	}
	for name, args := range map[string][]string{
		"deploy/config/collector.env.example": strings.Fields(envArgs[1]),
		"deploy/kubernetes/collector.yaml":    k8sArgs,
	} {
		t.Run(name, func(t *testing.T) {
			c := DefaultConfig()
			fs := flag.NewFlagSet(name, flag.ContinueOnError)
			c.RegisterFlags(fs)
			if err := fs.Parse(args); err != nil {
				t.Fatalf("%s: %v", args, err)
			}
			c.DBURL = "postgres://nbs@db/nbs" // from the environment in both
			if err := c.Validate(); err != nil {
				t.Fatalf("%s: %v", args, err)
			}
			if c.NodeAuth.Mode == "" || loopbackOnly(c.GRPCAddr) {
				t.Errorf("--grpc.listen-address %s, --grpc.node-auth %q: want an address other hosts reach and node-auth stated", c.GRPCAddr, c.NodeAuth.Mode)
			}
		})
	}

	// The unit hands the example's token file over under its name.
	unit := read("deploy/systemd/nbs-collector.service")
	m := regexp.MustCompile(`--grpc\.bootstrap-token-file /run/credentials/nbs-collector\.service/(\S+)`).FindStringSubmatch(envArgs[1])
	if m == nil || !regexp.MustCompile(`(?m)^LoadCredential=`+regexp.QuoteMeta(m[1])+`:`).MatchString(unit) {
		t.Errorf("deploy/systemd/nbs-collector.service loads no credential for the example's --grpc.bootstrap-token-file (%q)", m)
	}

	collapse := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if msg := errNodeAuthNotChosen(":7701").Error(); !strings.Contains(collapse(read("deploy/README.md")), msg) {
		t.Errorf("deploy/README.md does not quote the refusal as the collector prints it:\n%s", msg)
	}
}
