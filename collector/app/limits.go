package app

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
	"time"

	"github.com/nbs-project/nbs/collector/api"
	"github.com/nbs-project/nbs/collector/readlimit"
	"github.com/nbs-project/nbs/collector/store"
)

// The HTTP server's limits are the app's, which builds the server; the
// heavy reads' limits span the read pool (collector/store), admission
// (collector/readlimit) and what the API's routes cost (collector/api).

// HTTPLimits are the HTTP server's timeouts and connection bounds.
type HTTPLimits struct {
	ReadHeaderTimeout time.Duration
	// ReadTimeout covers the whole request, body included (bodies are at
	// most 1 MiB).
	ReadTimeout time.Duration
	// WriteTimeout covers reading the request and writing the answer: the
	// largest (a year-long series, a node's whole tree) take seconds.
	WriteTimeout   time.Duration
	IdleTimeout    time.Duration
	MaxHeaderBytes int
	// MaxConns bounds the open connections: past it the least recently
	// used idle one is closed for a newcomer, else it waits to be
	// accepted (collector/connlimit).
	MaxConns int
	// MaxConnsPerAddress bounds one client address's (an IPv6 /64's) open
	// connections
	// (the reverse proxies and load balancers of --web.trusted-proxies
	// and --auth.proxy-cidrs count only against MaxConns): past it, the
	// address's own least recently used idle connection is closed for the
	// new one, else the new one is.
	MaxConnsPerAddress int
}

// DefaultHTTPLimits are the production HTTP bounds.
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		MaxConns:          1024,
		// A browser holds one connection over HTTP/2 and up to six over
		// HTTP/1.1: 64 is an office of browsers behind one NAT, and a
		// sixteenth of the server.
		MaxConnsPerAddress: 64,
	}
}

// RegisterFlags binds the --http.* limits, with the values already in h
// (DefaultHTTPLimits', usually) as their defaults.
func (h *HTTPLimits) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&h.ReadHeaderTimeout, "http.read-header-timeout", h.ReadHeaderTimeout, "how long a client may take to send a request's headers")
	fs.DurationVar(&h.ReadTimeout, "http.read-timeout", h.ReadTimeout, "how long a client may take to send a whole request, body included")
	fs.DurationVar(&h.WriteTimeout, "http.write-timeout", h.WriteTimeout, "how long reading a request and writing its answer may take (the largest answers, a year of a series or a whole tree, take seconds)")
	fs.DurationVar(&h.IdleTimeout, "http.idle-timeout", h.IdleTimeout, "how long a kept-alive connection may wait for its next request")
	fs.IntVar(&h.MaxHeaderBytes, "http.max-header-bytes", h.MaxHeaderBytes, "largest request line and headers, in bytes (more: 431)")
	fs.IntVar(&h.MaxConns, "http.max-connections", h.MaxConns, "most open HTTP connections; past it the least recently used idle connection is closed for a new one, else the new one waits to be accepted")
	fs.IntVar(&h.MaxConnsPerAddress, "http.max-connections-per-address", h.MaxConnsPerAddress, "most open HTTP connections from one client address (--web.trusted-proxies and --auth.proxy-cidrs count only against --http.max-connections); past it the address's least recently used idle connection is closed for the new one, else the new one is refused; 1 to --http.max-connections")
}

// Validate reports every problem at once.
func (h *HTTPLimits) Validate() error {
	var errs []error
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--http.read-header-timeout", h.ReadHeaderTimeout}, {"--http.read-timeout", h.ReadTimeout},
		{"--http.write-timeout", h.WriteTimeout}, {"--http.idle-timeout", h.IdleTimeout},
	} {
		// Zero would mean no timeout at all to net/http.
		if d.v < time.Second || d.v > 24*time.Hour {
			errs = append(errs, fmt.Errorf("%s %s must be from 1s to 24h", d.flag, d.v))
		}
	}
	if h.ReadHeaderTimeout > h.ReadTimeout {
		errs = append(errs, fmt.Errorf("--http.read-header-timeout %s is longer than --http.read-timeout %s", h.ReadHeaderTimeout, h.ReadTimeout))
	}
	if h.ReadTimeout > h.WriteTimeout {
		// The write timeout runs from the end of the headers: an answer
		// must have time after the longest request.
		errs = append(errs, fmt.Errorf("--http.read-timeout %s is longer than --http.write-timeout %s", h.ReadTimeout, h.WriteTimeout))
	}
	if h.MaxHeaderBytes < 4<<10 || h.MaxHeaderBytes > 1<<20 {
		errs = append(errs, fmt.Errorf("--http.max-header-bytes %d must be from 4 KiB to 1 MiB", h.MaxHeaderBytes))
	}
	maxOK := h.MaxConns >= 16 && h.MaxConns <= 1_000_000
	if !maxOK {
		errs = append(errs, fmt.Errorf("--http.max-connections %d must be from 16 to 1000000", h.MaxConns))
	}
	// Against a total out of its own bounds, reported already, only the
	// lower bound is checked.
	if h.MaxConnsPerAddress < 1 || (maxOK && h.MaxConnsPerAddress > h.MaxConns) {
		errs = append(errs, fmt.Errorf("--http.max-connections-per-address %d must be from 1 to --http.max-connections (%d)", h.MaxConnsPerAddress, h.MaxConns))
	}
	return errors.Join(errs...)
}

// ReadLimits keep heavy reads (reports, series, evidence) from slowing
// anyone else: they run on their own database pool (the writers and token
// checks keep the primary's), PoolSize reports' worth at a time (the rest
// wait their turn), each statement cancelled by the server past
// StatementTimeout; a caller past its slots, or every caller past all of
// them, is answered 429.
type ReadLimits struct {
	// PoolSize is the read pool's connections (on the primary, and on
	// --db.read-url), and how many reports run at once: the cores heavy
	// reads may take from ingest, in the database and in the collector.
	PoolSize         int
	StatementTimeout time.Duration
	// MaxConcurrent and MaxPerCaller count slots, running or waiting: a
	// report takes api.ReportSlots, a series or a page of evidence one.
	MaxConcurrent int
	MaxPerCaller  int
}

// DefaultReadLimits are the production bounds of heavy reads. The pool is
// half the collector's cores: on 2 cores, one report computing kept the
// agents' ack p99 within 1.3× of its baseline, two side by side took both
// cores and tripled it (BENCHMARKS.md, "One customer's reports"). Eight
// slots a caller are two reports (one running, one waiting its turn), or
// the six charts and evidence a node's page asks for at once.
func DefaultReadLimits() ReadLimits {
	return ReadLimits{PoolSize: max(1, runtime.GOMAXPROCS(0)/2), StatementTimeout: 30 * time.Second, MaxConcurrent: 32, MaxPerCaller: 8}
}

// pool is the store's view of the limits.
func (r ReadLimits) pool() store.ReadPool {
	return store.ReadPool{Size: int32(r.PoolSize), StatementTimeout: r.StatementTimeout}
}

// limits is the admission's view of the limits: PoolSize reports run at
// once, and a read waits for its turn no longer than one statement may
// take.
func (r ReadLimits) limits() readlimit.Limits {
	return readlimit.Limits{MaxConcurrent: r.MaxConcurrent, MaxPerCaller: r.MaxPerCaller,
		Running: r.PoolSize * api.ReportSlots, MaxWait: r.StatementTimeout}
}

// RegisterFlags binds the --reads.* flags, with the values already in r
// (DefaultReadLimits', usually) as their defaults.
func (r *ReadLimits) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&r.PoolSize, "reads.pool-size", r.PoolSize, "database connections of heavy reads (reports, series, evidence), apart from the writers' and token checks' (on --db.url, and on --db.read-url each), and how many reports run at once (more wait their turn): the cores heavy reads may take from ingest; 1 to 64 (default: half the collector's CPUs, at least 1)")
	fs.DurationVar(&r.StatementTimeout, "reads.statement-timeout", r.StatementTimeout, "PostgreSQL cancels a heavy read's statement that runs longer (the request answers 504, timeout); 1s to 10m, at most --http.write-timeout")
	fs.IntVar(&r.MaxConcurrent, "reads.max-concurrent", r.MaxConcurrent, "heavy-read slots all callers together may hold (a report takes 4, a series or a page of evidence 1); past it: 429 with Retry-After")
	fs.IntVar(&r.MaxPerCaller, "reads.max-per-caller", r.MaxPerCaller, "heavy-read slots one caller (a token and its sessions, a proxy user) may hold; past it: 429 with Retry-After; 4 (one report) to 1024")
}

// Validate reports every problem at once; an answer must be written
// within writeTimeout (--http.write-timeout) after its reads.
func (r *ReadLimits) Validate(writeTimeout time.Duration) error {
	var errs []error
	if r.PoolSize < 1 || r.PoolSize > 64 {
		errs = append(errs, fmt.Errorf("--reads.pool-size %d must be from 1 to 64", r.PoolSize))
	}
	if r.StatementTimeout < time.Second || r.StatementTimeout > 10*time.Minute {
		errs = append(errs, fmt.Errorf("--reads.statement-timeout %s must be from 1s to 10m", r.StatementTimeout))
	} else if r.StatementTimeout > writeTimeout && writeTimeout >= time.Second { // a write timeout out of its own bounds is reported already
		// An answer read for longer could no longer be written.
		errs = append(errs, fmt.Errorf("--reads.statement-timeout %s is longer than --http.write-timeout %s", r.StatementTimeout, writeTimeout))
	}
	if r.MaxPerCaller < api.ReportSlots || r.MaxPerCaller > 1024 {
		errs = append(errs, fmt.Errorf("--reads.max-per-caller %d must be from %d (one report) to 1024", r.MaxPerCaller, api.ReportSlots))
	}
	if r.MaxConcurrent < max(r.MaxPerCaller, api.ReportSlots) || r.MaxConcurrent > 4096 {
		errs = append(errs, fmt.Errorf("--reads.max-concurrent %d must be from --reads.max-per-caller (%d) to 4096", r.MaxConcurrent, r.MaxPerCaller))
	}
	return errors.Join(errs...)
}
