package push

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nbs-project/nbs/collector/export"
	"github.com/nbs-project/nbs/collector/export/remotewrite"
)

// scripted answers each send with the next of its errors and notes the
// snapshot times it was given: the shipper's bookkeeping, not a receiver
// (the e2e tests send to a real Prometheus).
type scripted struct {
	mu      sync.Mutex
	answers []error
	sent    []time.Time
}

func (s *scripted) Send(_ context.Context, snap export.Snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, snap.Now)
	if len(s.answers) == 0 {
		return nil
	}
	err := s.answers[0]
	s.answers = s.answers[1:]
	return err
}

func TestShipperOrderRetriesAndDrops(t *testing.T) {
	t0 := time.Now().UTC().Truncate(time.Microsecond)
	send := &scripted{answers: []error{
		errors.New("connection refused"), // record 1: retried
		nil,                              // record 1 again: sent
		export.Permanent(&remotewrite.RejectedError{Samples: 2, Err: errors.New("out of order")}), // record 2: 2 of 5 refused
		export.Permanent(errors.New("HTTP 400")),                                                  // record 3: all refused
		nil,                                                                                       // record 4
	}}
	p := &Pusher{m: newMetrics(), backoff: backoff{min: time.Millisecond, max: 2 * time.Millisecond}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	r := &receiver{r: export.Receiver{Name: "r", Type: "remote_write"}, sender: send}
	var err error
	if r.q, err = openQueue(t.TempDir(), 1<<20, func(string, int) {}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := r.q.append(snapshotOf(t0.Add(time.Duration(i)*time.Second), 5, 1)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.ship(ctx, r); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, n, _ := r.q.stats(); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("queue not drained within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done

	want := []time.Time{t0, t0, t0.Add(time.Second), t0.Add(2 * time.Second), t0.Add(3 * time.Second)}
	if len(send.sent) != len(want) {
		t.Fatalf("sent %v, want %v", send.sent, want)
	}
	for i := range want {
		if !send.sent[i].Equal(want[i]) {
			t.Fatalf("send %d was the snapshot of %s, want %s (in order, the failed one again first)", i, send.sent[i], want[i])
		}
	}
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"sent", value(p.m.sent.WithLabelValues("r")), 5 + 3 + 5},
		{"failed", value(p.m.failed.WithLabelValues("r")), 5},
		{"dropped refused", value(p.m.dropped.WithLabelValues("r", "refused")), 2 + 5},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v samples, want %v", c.name, c.got, c.want)
		}
	}
	st := r.sent
	if st != 13 || r.dropped != 7 || r.lastError != "" || r.lastSuccess.IsZero() {
		t.Errorf("status: sent %d dropped %d error %q success %s", st, r.dropped, r.lastError, r.lastSuccess)
	}
}

func value(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}
