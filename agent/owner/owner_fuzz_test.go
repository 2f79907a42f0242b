package owner

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/nbs-project/nbs/internal/schema"
)

// FuzzOwnerFromHostileText: what a container controls (its cgroup names
// under a delegated subtree, its runtime annotations, its environment and
// comm) never makes an owner whose id is not one valid metric id segment,
// or whose event fields the collector would reject.
func FuzzOwnerFromHostileText(f *testing.F) {
	f.Add("/kubepods.slice/kubepods-pod"+strings.ReplaceAll(uid, "-", "_")+".slice/cri-containerd-"+ctrID+".scope",
		[]byte(`{"annotations":{"io.kubernetes.cri.sandbox-namespace":"shop","io.kubernetes.cri.sandbox-name":"cart"}}`), "sleep")
	f.Add("/docker/"+ctrID, []byte(`{"annotations":{"io.kubernetes.pod.name":"a/b\u0000c"}}`), "x\x00y")
	f.Add("/", []byte(`not json`), "")
	f.Fuzz(func(t *testing.T, path string, bundle []byte, comm string) {
		c := parseCgroup(path)
		m, _ := parseBundle(bundle)
		for _, o := range []Owner{
			{Kind: Pod, PodUID: c.PodUID, Pod: m.pod(), ContainerID: c.ContainerID, ContainerName: clean(m.Container, maxName)},
			{Kind: Container, ContainerID: c.ContainerID, Runtime: c.Runtime},
			{Kind: Netns, NetnsName: clean(m.Name, maxName)},
			{Kind: Process, PID: 1, Comm: clean(comm, maxComm)},
		} {
			if id := o.ID(); len(id) > maxSegment || !schema.ValidID("tcp_reset/"+id) {
				t.Fatalf("owner %+v: id %q", o, id)
			}
			for k, v := range o.Fields() {
				if !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) || len(v) > 4096 {
					t.Fatalf("owner %+v: field %s = %q", o, k, v)
				}
			}
		}
		if ns, name, ok := strings.Cut(m.pod(), "/"); ok && (strings.Contains(name, "/") || ns == "") {
			t.Fatalf("pod %q from %s", m.pod(), bundle)
		}
	})
}
