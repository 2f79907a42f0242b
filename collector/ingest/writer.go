package ingest

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/semaphore"

	"github.com/nbs-project/nbs/collector/store"
	"github.com/nbs-project/nbs/collector/telemetry"
)

// ReportWriter is what the writer needs from the store.
type ReportWriter interface {
	// WriteReportsInto stores a batch and sets, in inserted (emptied
	// first), every report's key to whether it was new. It keeps none
	// of the reports' arrays: the writer fills them with other reports
	// once they are stored (reportArrays).
	WriteReportsInto(ctx context.Context, reports []store.Report, inserted map[store.ReportKey]bool) error
}

// Stored is called once a report is durably stored, or refused for good.
type Stored func(duplicate bool, err error)

type pending struct {
	report store.Report
	done   Stored
	bytes  int64 // of the writer's budget, released before done
	// arrays, if not nil, are the report's (checkReport), given back to
	// the writer's pool once the report is done with.
	arrays *reportArrays
}

// Writer batches reports from every stream into COPY transactions. Its queue
// is bounded in reports and in bytes: when PostgreSQL falls behind, Submit
// blocks, the stream stops reading, and gRPC flow control pushes back to the
// agents, which hold their un-acked reports. Nothing is acked before it is
// committed.
type Writer struct {
	store   ReportWriter
	log     *slog.Logger
	metrics *telemetry.Metrics
	queue   chan pending
	// bytes bounds what the reports queued and being written take: a few
	// thousand reports of the largest size allowed would be gigabytes.
	bytes    *semaphore.Weighted
	maxBytes int64
	workers  int
	maxBatch int
	maxWait  time.Duration
	// OnStored, if set, sees every newly stored report after commit (alert evaluation).
	onStored func([]store.Report)
	// arrays are the arrays of reports done with, for checkReport.
	arrays reportArrayPool
}

type WriterOptions struct {
	Workers   int // concurrent database writers; about one per core
	QueueSize int // reports waiting across all streams
	// QueueBytes bounds the memory of the reports waiting and being
	// written, by reportBytes (default DefaultQueueBytes).
	QueueBytes int64
	MaxBatch   int           // reports per transaction
	MaxWait    time.Duration // how long a partial batch may wait
	OnStored   func([]store.Report)
}

// DefaultWriterOptions are the writer's settings unless the collector's
// configuration says otherwise.
func DefaultWriterOptions() WriterOptions {
	return WriterOptions{Workers: 2, QueueSize: 4096, QueueBytes: DefaultQueueBytes, MaxBatch: 500, MaxWait: 100 * time.Millisecond}
}

// DefaultQueueBytes is what the reports waiting for the database may take:
// a fleet's healthy reports are a few hundred bytes, a full snapshot tens
// of KB, the largest report allowed megabytes.
const DefaultQueueBytes = 64 << 20

// NewWriter prepares a writer; opts is DefaultWriterOptions with changes.
func NewWriter(st ReportWriter, opts WriterOptions, log *slog.Logger, m *telemetry.Metrics) *Writer {
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = DefaultQueueBytes
	}
	return &Writer{store: st, log: log, metrics: m, queue: make(chan pending, opts.QueueSize),
		bytes: semaphore.NewWeighted(opts.QueueBytes), maxBytes: opts.QueueBytes,
		workers: opts.Workers, maxBatch: opts.MaxBatch, maxWait: opts.MaxWait, onStored: opts.OnStored}
}

// Submit queues a report; it blocks while the queue is full, in reports
// or in bytes.
func (w *Writer) Submit(ctx context.Context, r store.Report, done Stored) error {
	return w.submit(ctx, r, nil, done)
}

// submit is Submit of a report checked into arr (checkReportInto), which
// the writer takes back once the report is done with; if it returns an
// error, arr is the caller's again.
func (w *Writer) submit(ctx context.Context, r store.Report, arr *reportArrays, done Stored) error {
	// A report larger than the whole budget waits for all of it.
	n := min(r.Bytes(), w.maxBytes)
	if err := w.bytes.Acquire(ctx, n); err != nil {
		return err
	}
	select {
	case w.queue <- pending{report: r, done: done, bytes: n, arrays: arr}:
		w.metrics.WriteQueue.Set(float64(len(w.queue)))
		return nil
	case <-ctx.Done():
		w.bytes.Release(n)
		return ctx.Err()
	}
}

// Run writes until ctx ends. Reports still queued then are not acked; their
// agents resend them to the next collector.
func (w *Writer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range w.workers {
		wg.Go(func() { w.work(ctx) })
	}
	wg.Wait()
}

func (w *Writer) work(ctx context.Context) {
	batch := make([]pending, 0, w.maxBatch)
	var scratch writeScratch
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		batch = batch[:0]
		select {
		case p := <-w.queue:
			batch = append(batch, p)
		case <-ctx.Done():
			return
		}
		timer.Reset(w.maxWait)
	fill:
		for len(batch) < w.maxBatch {
			select {
			case p := <-w.queue:
				batch = append(batch, p)
			case <-timer.C:
				break fill
			case <-ctx.Done():
				return
			}
		}
		w.metrics.WriteQueue.Set(float64(len(w.queue)))
		w.write(ctx, batch, &scratch)
	}
}

// writeScratch is a worker's reports to write and reports stored, kept
// from batch to batch: neither the store nor OnStored keeps the slices,
// and made per batch they were a tenth of what a report cost the
// collector's allocator besides its own samples.
type writeScratch struct {
	reports, stored []store.Report
	inserted        map[store.ReportKey]bool
}

// write commits a batch, retrying transient failures until ctx ends. A batch
// that fails for a reason in the data is split so one bad report cannot hold
// back the others.
func (w *Writer) write(ctx context.Context, batch []pending, scratch *writeScratch) {
	reports := scratch.reports[:0]
	for _, p := range batch {
		reports = append(reports, p.report)
	}
	// Emptied when done: the scratch must not hold the reports' samples
	// until the next batch.
	defer func() { clear(reports); scratch.reports = reports[:0] }()
	backoff := 100 * time.Millisecond
	for {
		start := time.Now()
		if scratch.inserted == nil || len(scratch.inserted) > 4*w.maxBatch {
			scratch.inserted = make(map[store.ReportKey]bool, len(reports))
		}
		inserted := scratch.inserted
		err := w.store.WriteReportsInto(ctx, reports, inserted)
		if err == nil {
			w.metrics.DBWrite.Observe(time.Since(start).Seconds())
			w.metrics.DBBatch.Observe(float64(len(batch)))
			stored := scratch.stored[:0]
			defer func() { clear(stored); scratch.stored = stored[:0] }()
			for _, p := range batch {
				isNew := inserted[p.report.Key()]
				if isNew {
					stored = append(stored, p.report)
					w.metrics.Reports.WithLabelValues("stored").Inc()
					w.metrics.Samples.Add(float64(len(p.report.Samples)))
				} else {
					w.metrics.Reports.WithLabelValues("duplicate").Inc()
				}
				w.finish(p, !isNew, nil)
			}
			if w.onStored != nil && len(stored) > 0 {
				w.onStored(stored)
			}
			// Stored, acked, and seen by OnStored (which keeps none of
			// the arrays): checkReport may fill them again.
			for i := range batch {
				w.arrays.put(batch[i].arrays)
				batch[i].arrays = nil
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		w.metrics.DBErrors.Inc()
		if permanent(err) {
			if len(batch) == 1 {
				w.log.Error("report refused by the database", "seq", batch[0].report.Seq, "node_id", batch[0].report.NodeID, "err", err)
				w.metrics.Reports.WithLabelValues("rejected").Inc()
				w.metrics.Rejects.WithLabelValues("database").Inc()
				w.finish(batch[0], false, err)
				w.arrays.put(batch[0].arrays)
				batch[0].arrays = nil
				return
			}
			mid := len(batch) / 2
			w.write(ctx, batch[:mid], scratch)
			w.write(ctx, batch[mid:], scratch)
			return
		}
		w.log.Warn("database write failed; retrying", "reports", len(batch), "in", backoff, "err", err)
		select {
		case <-time.After(backoff + rand.N(backoff/2)):
		case <-ctx.Done():
			return
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// finish releases a report's bytes and says how it ended.
func (w *Writer) finish(p pending, duplicate bool, err error) {
	w.bytes.Release(p.bytes)
	p.done(duplicate, err)
}

// permanent reports errors caused by the data (SQL classes 22 and 23), which
// no retry will fix, as opposed to connection loss or a restarting server.
func permanent(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return len(pgErr.Code) == 5 && (pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23")
	}
	return false
}
