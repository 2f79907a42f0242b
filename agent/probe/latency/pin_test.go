package latency

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nbs-project/nbs/agent/probe/bpfload"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// A probe with a PinDir leaves its programs counting when it is closed (as
// a killed agent's are), and the next probe adopts its maps, socket storage
// included, and links: its retransmits are the kernel's TcpRetransSegs
// since the first probe loaded, what happened while none ran too.
func TestPinnedRetransmitsSurviveTheProbe(t *testing.T) {
	l := netlab.New(t)
	dir := filepath.Join(netlab.BPFFS(t), "nbs", "latency")
	t.Cleanup(func() {
		if err := bpfload.Unpin(dir); err != nil {
			t.Error(err)
		}
	})
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	opts := Options{NetnsInode: l.Inode(t, l.A), PinDir: dir, Logger: log}

	before := l.Nstat(t, l.A)
	first, err := Load(opts)
	if err != nil {
		netlab.SkipOrFail(t, "latency: %v", err)
	}
	if first.Continued() {
		t.Error("a probe on an empty pin directory says it continues")
	}
	l.LossyBulk(t, 50, time.Second)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	mid := l.Nstat(t, l.A)
	res := l.LossyBulk(t, 50, time.Second) // no probe open: the pinned programs count
	if res.Dropped == 0 {
		t.Fatal("the loss rule dropped nothing")
	}

	second := load(t, opts)
	if !second.Continued() || !strings.Contains(logs.String(), "adopted the pinned program") {
		t.Errorf("continued %v; want the maps and programs adopted; log:\n%s", second.Continued(), logs.String())
	}
	after := l.Nstat(t, l.A)
	c := counts(t, second)
	if got, want := c.Retransmits(), after["TcpRetransSegs"]-before["TcpRetransSegs"]; got != want || after["TcpRetransSegs"] == mid["TcpRetransSegs"] {
		t.Errorf("retransmits %d, nstat %d (of which %d while no probe was open; want equal, > 0)",
			got, want, after["TcpRetransSegs"]-mid["TcpRetransSegs"])
	}
	if got, want := c.RTOs, after["TcpExtTCPTimeouts"]-before["TcpExtTCPTimeouts"]; got != want {
		t.Errorf("RTOs %d, nstat %d", got, want)
	}
}
