package e2e

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	agentapp "github.com/nbs-project/nbs/agent/app"
	"github.com/nbs-project/nbs/internal/pgcluster"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// From DNS queries a node's namespace (A) sends to a server in B that
// answers each NXDOMAIN, through the agent, the collector and PostgreSQL
// to the HTTP API: the dns root and dns/errors/nxdomain count every query,
// and the evidence names each query to staff and to the node's own tenant,
// never to another tenant (the node is a 404 to it, as everywhere).
func TestDNSEndToEnd(t *testing.T) {
	t.Parallel()
	const n = 5
	lab := netlab.New(t)
	col := startCollector(t, pgcluster.Database(t), "127.0.0.1:0")
	startAgent(t, "lab-a", lab.A, col.grpcAddr, func(c *agentapp.Config) { c.Labels = agentapp.Labels{"customer": "acme"} })
	waitNode(t, col, "lab-a")
	acme, globex := customerToken(t, col, "acme"), customerToken(t, col, "globex")

	server := nxServer(t, lab)
	var names []string
	var client *net.UDPConn
	if err := lab.Do(lab.A, func() (err error) {
		client, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(server))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	buf := make([]byte, 512)
	for i := range n {
		label := fmt.Sprintf("secret-%d", i)
		names = append(names, label+".acme.internal.")
		q := binary.BigEndian.AppendUint16(nil, uint16(i+1))
		q = append(q, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, byte(len(label)))
		q = append(q, label...)
		q = append(q, 4, 'a', 'c', 'm', 'e', 8, 'i', 'n', 't', 'e', 'r', 'n', 'a', 'l', 0, 0, 1, 0, 1)
		if _, err := client.Write(q); err != nil {
			t.Fatal(err)
		}
		_ = client.SetReadDeadline(time.Now().Add(2 * time.Second))
		if m, err := client.Read(buf); err != nil || m < 4 || buf[3]&0xf != 3 {
			t.Fatalf("query %d: %d bytes, %v; want an NXDOMAIN", i, m, err)
		}
	}

	eventually(t, 20*time.Second, func() string {
		q, nx := storedTotal(t, col, "lab-a", "dns"), storedTotal(t, col, "lab-a", "dns/errors/nxdomain")
		if q != n || nx != n {
			return fmt.Sprintf("stored %v queries and %v NXDOMAIN answers, want %d each", q, nx, n)
		}
		return ""
	})
	events := func(token string) (int, []string, []map[string]string) {
		code, body := col.callAs(t, token, http.MethodGet, "/api/v1/nodes/lab-a/events?metric=dns/errors/nxdomain&limit=100", "")
		var ev struct {
			Events []struct {
				Fields map[string]string `json:"fields"`
			} `json:"events"`
		}
		if code == http.StatusOK {
			if err := json.Unmarshal(body, &ev); err != nil {
				t.Fatalf("events: %v: %s", err, body)
			}
		}
		var got []string
		var fields []map[string]string
		for _, e := range ev.Events {
			got = append(got, e.Fields["name"])
			fields = append(fields, e.Fields)
		}
		slices.Sort(got)
		return code, got, fields
	}
	var staff []string
	eventually(t, 10*time.Second, func() string {
		if _, staff, _ = events(col.token); !slices.Equal(staff, names) {
			return fmt.Sprintf("staff sees names %v, want %v", staff, names)
		}
		return ""
	})
	code, own, fields := events(acme)
	if code != http.StatusOK || !slices.Equal(own, names) {
		t.Errorf("the node's tenant: HTTP %d, names %v; want %v", code, own, names)
	}
	for _, f := range fields {
		if f["netns"] != "" || f["owner_id"] != "" || f["server"] != server.String() || f["rcode"] != "nxdomain" {
			t.Errorf("the node's tenant sees fields %v", f)
		}
	}
	if code, other, _ := events(globex); code != http.StatusNotFound || len(other) != 0 {
		t.Errorf("another tenant: HTTP %d, names %v; want 404 and none", code, other)
	}
}

// nxServer answers every query in B with NXDOMAIN until the test ends.
func nxServer(t *testing.T, lab *netlab.Lab) netip.AddrPort {
	t.Helper()
	var c *net.UDPConn
	if err := lab.Do(lab.B, func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lab.IPB, 53)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1500)
		for {
			m, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if m < 12 {
				continue
			}
			buf[2] |= 0x80    // QR
			buf[3] = 0x80 | 3 // RA, NXDOMAIN
			_, _ = c.WriteToUDPAddrPort(buf[:m], from)
		}
	}()
	t.Cleanup(func() {
		c.Close()
		wg.Wait()
	})
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}
