package ingest

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nbs-project/nbs/collector/store"
)

// registrar registers Hellos in batches: every Hello waiting when a batch
// starts shares its queries and its one commit, so a fleet reconnecting
// costs a few statements per batch instead of some ten round trips and
// three commits a node. It does its work on one goroutine, one batch at a
// time, so registering holds one database connection however many Hellos
// wait: the writers that ack reports keep the others. That goroutine runs
// while there is work and ends when there is none.
type registrar struct {
	reg      Registry
	log      *slog.Logger
	maxNodes int
	// maxMetrics is the per-node definitions limit a registration checks.
	maxMetrics int
	// maxBatch bounds the Hellos of one batch (and so its statements'
	// arrays): the Hellos waiting are bounded by ServerOptions.Hellos.
	maxBatch int

	mu       sync.Mutex
	admits   []*admitJob
	regs     []*regJob
	running  bool
	reserved map[string]int // new names admitted and not registered or given up yet: Hellos holding them
}

// registrationTimeout bounds one batch's work: a database that does not
// answer fails the batch's Hellos (Unavailable; their agents retry)
// instead of holding them.
const registrationTimeout = 30 * time.Second

// defaultBatch is the most Hellos one batch registers: at 30,000 nodes, 256
// (512 Hellos at once) registered every node in 50 s against 64 s with 64
// (BENCHMARKS.md, "Fleet").
const defaultBatch = 256

type admitJob struct {
	ctx  context.Context
	name string
	done chan struct{}
	// Set by the registrar before done is closed.
	ok    bool
	total int
	res   *reservation
	err   error
}

// reservation is a new name's place under the node limit, from its
// admission until its node is registered or its Hello gives up.
type reservation struct {
	name     string
	released bool // guarded by registrar.mu
}

type regJob struct {
	ctx  context.Context
	r    store.Registration
	res  *reservation
	done chan struct{}
	out  store.Registered
}

func newRegistrar(reg Registry, limits Limits, log *slog.Logger) *registrar {
	return &registrar{reg: reg, log: log, maxNodes: limits.MaxNodes, maxMetrics: limits.MaxMetrics, maxBatch: defaultBatch, reserved: map[string]int{}}
}

// admit decides whether a Hello from name may register under the node
// limit. A new name admitted holds a reservation until register is done
// with it or release is called.
func (r *registrar) admit(ctx context.Context, name string) (ok bool, total int, res *reservation, err error) {
	j := &admitJob{ctx: ctx, name: name, done: make(chan struct{})}
	r.mu.Lock()
	r.admits = append(r.admits, j)
	r.kick()
	r.mu.Unlock()
	// The registrar answers every job, within registrationTimeout.
	<-j.done
	return j.ok, j.total, j.res, j.err
}

// register registers the node and its definitions, and releases res.
func (r *registrar) register(ctx context.Context, reg store.Registration, res *reservation) store.Registered {
	j := &regJob{ctx: ctx, r: reg, res: res, done: make(chan struct{})}
	r.mu.Lock()
	r.regs = append(r.regs, j)
	r.kick()
	r.mu.Unlock()
	<-j.done
	return j.out
}

// release gives up a reservation (the Hello was refused or went away
// before it was registered). Releasing twice, or nil, does nothing.
func (r *registrar) release(res *reservation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releaseLocked(res)
}

func (r *registrar) releaseLocked(res *reservation) {
	if res == nil || res.released {
		return
	}
	res.released = true
	if r.reserved[res.name]--; r.reserved[res.name] <= 0 {
		delete(r.reserved, res.name)
	}
}

// kick starts the registrar's goroutine unless it runs. Called with mu held.
func (r *registrar) kick() {
	if r.running {
		return
	}
	r.running = true
	go r.run()
}

// run does batches until none is waiting.
func (r *registrar) run() {
	for {
		r.mu.Lock()
		regs := takeBatch(&r.regs, r.maxBatch)
		admits := takeBatch(&r.admits, r.maxBatch)
		if len(regs) == 0 && len(admits) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		// Registrations first: the names they insert leave the
		// reservations before admissions count them.
		if len(regs) > 0 {
			r.registerBatch(regs)
		}
		if len(admits) > 0 {
			r.admitBatch(admits)
		}
	}
}

func takeBatch[T any](q *[]T, n int) []T {
	k := min(len(*q), n)
	b := (*q)[:k:k]
	*q = (*q)[k:]
	if len(*q) == 0 {
		*q = nil
	}
	return b
}

// batchContext is what a batch's queries run under: not any one Hello's
// (its stream ending must not fail the others), bounded in time.
func batchContext(first context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(first), registrationTimeout)
}

func (r *registrar) registerBatch(jobs []*regJob) {
	live := jobs[:0:0]
	for _, j := range jobs {
		if err := j.ctx.Err(); err != nil {
			// The stream went away while it waited: nothing to store.
			j.out = store.Registered{Err: err}
			r.release(j.res)
			close(j.done)
			continue
		}
		live = append(live, j)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := batchContext(live[0].ctx)
	defer cancel()
	batch := make([]store.Registration, len(live))
	for i, j := range live {
		batch[i] = j.r
	}
	out := r.reg.RegisterNodes(ctx, batch, r.maxMetrics)
	r.mu.Lock()
	for _, j := range live {
		r.releaseLocked(j.res)
	}
	r.mu.Unlock()
	for i, j := range live {
		j.out = out[i]
		close(j.done)
	}
}

func (r *registrar) admitBatch(jobs []*admitJob) {
	var live []*admitJob
	var names []string
	r.mu.Lock()
	for _, j := range jobs {
		if err := j.ctx.Err(); err != nil {
			j.err = err
			close(j.done)
			continue
		}
		if r.reserved[j.name] > 0 {
			// Admitted already, for a Hello still registering: this
			// one shares its place.
			j.ok, j.res = true, &reservation{name: j.name}
			r.reserved[j.name]++
			close(j.done)
			continue
		}
		live = append(live, j)
		names = append(names, j.name)
	}
	reserved := len(r.reserved)
	r.mu.Unlock()
	if len(live) == 0 {
		return
	}
	ctx, cancel := batchContext(live[0].ctx)
	defer cancel()
	ok, fresh, total, err := r.reg.AdmitNodes(ctx, names, r.maxNodes, reserved)
	r.mu.Lock()
	for i, j := range live {
		switch {
		case err != nil:
			j.err = err
		case ok[i]:
			j.ok = true
			if fresh[i] {
				j.res = &reservation{name: j.name}
				r.reserved[j.name]++
			}
		default:
			j.total = total
		}
	}
	r.mu.Unlock()
	for _, j := range live {
		close(j.done)
	}
}
