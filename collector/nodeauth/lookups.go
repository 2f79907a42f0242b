package nodeauth

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// lookups reads the bindings of the names Hellos give in batches: every
// Hello waiting when a read starts shares it, one query for all of them.
// A read of its own for every Hello, one at a time on the one connection
// authenticating may hold, was what bounded a fleet's registration (about
// 300 Hellos a second at 10,000 nodes on 2 cores, the collector a third
// busy: BENCHMARKS.md, "Fleet"). Reads run on one goroutine, one batch at
// a time, under the Authenticator's database slot; it runs while there is
// work and ends when there is none.
type lookups struct {
	repo repo
	db   chan struct{} // the Authenticator's database slot

	mu      sync.Mutex
	waiting []*lookup
	running bool
	reads   int // batches read, for tests
}

// maxLookupBatch bounds one read's names (and so its array). The Hellos
// waiting are bounded by the ingest server's Hellos being registered at
// once (ServerOptions.Hellos).
const maxLookupBatch = 512

// lookupTimeout bounds one batch's read: a database that does not answer
// fails its Hellos (Unavailable; their agents retry) instead of holding them.
const lookupTimeout = 30 * time.Second

type lookup struct {
	ctx  context.Context
	node string
	done chan struct{}
	// Set before done is closed.
	b          binding
	credential bool
	err        error
}

// get is repo.get, sharing its read with the other Hellos waiting.
func (l *lookups) get(ctx context.Context, node string) (binding, bool, error) {
	j := &lookup{ctx: ctx, node: node, done: make(chan struct{})}
	l.mu.Lock()
	l.waiting = append(l.waiting, j)
	if !l.running {
		l.running = true
		go l.run()
	}
	l.mu.Unlock()
	select {
	case <-j.done:
		return j.b, j.credential, j.err
	case <-ctx.Done():
		// The batch answers it all the same; nobody waits for that.
		return binding{}, false, fmt.Errorf("read credential of node %q: %w", node, ctx.Err())
	}
}

func (l *lookups) run() {
	for {
		l.mu.Lock()
		k := min(len(l.waiting), maxLookupBatch)
		if k == 0 {
			l.waiting, l.running = nil, false
			l.mu.Unlock()
			return
		}
		batch := l.waiting[:k:k]
		l.waiting = l.waiting[k:]
		l.reads++
		l.mu.Unlock()
		l.read(batch)
	}
}

// read answers batch with one query: not under any one Hello's context (its
// stream ending must not fail the others), bounded in time.
func (l *lookups) read(batch []*lookup) {
	var live []*lookup
	var names []string
	for _, j := range batch {
		if err := j.ctx.Err(); err != nil {
			j.err = err
			close(j.done)
			continue
		}
		live = append(live, j)
		names = append(names, j.node)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(live[0].ctx), lookupTimeout)
	defer cancel()
	l.db <- struct{}{}
	found, err := l.repo.getMany(ctx, names)
	<-l.db
	for _, j := range live {
		if err != nil {
			j.err = err
		} else {
			r := found[j.node]
			j.b, j.credential = r.b, r.credential
			j.b.Node = j.node
		}
		close(j.done)
	}
}

type found struct {
	b          binding
	credential bool
}

// getMany is get for many names at once; a name with nothing bound to it
// is missing from the map (as get's zero binding says).
func (r repo) getMany(ctx context.Context, names []string) (map[string]found, error) {
	rows, err := r.pool.Query(ctx, `
		SELECT c.node, coalesce(c.state, ''), c.secret_hash, coalesce(c.enrolled_by, ''), c.enrolled_at, c.last_used_at,
			coalesce(c.last_peer, ''), c.revoked_at, b.labels, x.node
		FROM unnest($1::text[]) x(node)
		LEFT JOIN node_credentials c ON c.node = x.node
		LEFT JOIN node_bindings b ON b.node = x.node
		WHERE c.node IS NOT NULL OR b.node IS NOT NULL`, names)
	if err != nil {
		return nil, fmt.Errorf("read credentials of %d nodes: %w", len(names), err)
	}
	defer rows.Close()
	out := map[string]found{}
	for rows.Next() {
		var f found
		var cnode *string
		var labels []byte
		var node string
		if err := rows.Scan(&cnode, &f.b.State, &f.b.SecretHash, &f.b.EnrolledBy, &f.b.EnrolledAt, &f.b.LastUsedAt, &f.b.LastPeer, &f.b.RevokedAt, &labels, &node); err != nil {
			return nil, fmt.Errorf("read credentials of %d nodes: %w", len(names), err)
		}
		f.credential = cnode != nil
		if labels != nil {
			if err := json.Unmarshal(labels, &f.b.Labels); err != nil {
				return nil, fmt.Errorf("decode labels bound to node %q: %w", node, err)
			}
		}
		out[node] = f
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read credentials of %d nodes: %w", len(names), err)
	}
	return out, nil
}
