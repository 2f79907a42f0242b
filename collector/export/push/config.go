package push

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net/textproto"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nbs-project/nbs/collector/access"
	"github.com/nbs-project/nbs/collector/export"
)

// Limits of the receivers an operator configures (docs/export-remote-write.md).
const (
	MaxReceivers      = 16
	maxHeaders        = 16
	maxHeaderValue    = 4096
	maxHeadersBytes   = 16 << 10
	maxTokenFileBytes = 16 << 10
	maxReceiversFile  = 1 << 20
	MinTimeout        = time.Second
	MaxTimeout        = 5 * time.Minute
	DefaultTimeout    = 30 * time.Second
)

// Config is what an operator sets (--export.push-interval,
// --export.queue-dir, --export.queue-max-bytes, --export.receivers-file,
// --export.receiver).
type Config struct {
	// Interval between two snapshots of each receiver's scope.
	Interval time.Duration
	// MaxBackoff caps the wait between two attempts to send a snapshot
	// (exponential from 1 s, with jitter).
	MaxBackoff time.Duration
	// QueueDir holds a directory per receiver with its unsent snapshots.
	QueueDir string
	// QueueMaxBytes bounds each receiver's queue; past it the oldest
	// snapshots are dropped and counted.
	QueueMaxBytes int64
	// ReceiversFile is a JSON or YAML list of receivers.
	ReceiversFile string
	// Receivers are given one a flag, each a JSON or YAML mapping.
	Receivers receiverFlags
}

// DefaultConfig pushes nowhere until receivers are configured.
func DefaultConfig() Config {
	return Config{Interval: 15 * time.Second, MaxBackoff: 30 * time.Second, QueueDir: "/var/lib/nbs/export-queue", QueueMaxBytes: 256 << 20}
}

// RegisterFlags binds c to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.Interval, "export.push-interval", c.Interval, "how often the leading collector takes a snapshot for each push receiver (1s to 10m)")
	fs.DurationVar(&c.MaxBackoff, "export.push-max-backoff", c.MaxBackoff, "longest wait between two attempts to send to a failing receiver (1s to 5m; from 1s, doubling, with jitter): how soon a receiver back from an outage gets its queue")
	fs.StringVar(&c.QueueDir, "export.queue-dir", c.QueueDir, "directory of the push receivers' on-disk queues (one subdirectory a receiver); keep it across restarts, so nothing unsent is lost")
	fs.Int64Var(&c.QueueMaxBytes, "export.queue-max-bytes", c.QueueMaxBytes, "bound of each push receiver's queue in bytes (1 MiB to 64 GiB): past it the oldest snapshots are dropped and counted")
	fs.StringVar(&c.ReceiversFile, "export.receivers-file", c.ReceiversFile, "JSON or YAML list of push receivers (name, type remote_write|otlp, url, match, headers, bearer_token_file, version 1.0|2.0, timeout); see docs/export-remote-write.md")
	fs.Var(&c.Receivers, "export.receiver", `one push receiver as a JSON or YAML mapping, e.g. '{name: prom, url: "http://prometheus:9090/api/v1/write"}' (repeatable; beside --export.receivers-file)`)
}

// receiverFlags collects --export.receiver values.
type receiverFlags []string

func (r *receiverFlags) String() string { return strings.Join(*r, " ") }
func (r *receiverFlags) Set(v string) error {
	*r = append(*r, v)
	return nil
}

// Configured says receivers are given: without, nothing is pushed and the
// other settings are not looked at.
func (c Config) Configured() bool { return c.ReceiversFile != "" || len(c.Receivers) > 0 }

// Validate checks the settings but the receivers (LoadReceivers).
func (c Config) Validate() error {
	var errs []error
	if c.Interval < time.Second || c.Interval > 10*time.Minute {
		errs = append(errs, fmt.Errorf("--export.push-interval %s: must be from 1s to 10m", c.Interval))
	}
	if c.MaxBackoff < time.Second || c.MaxBackoff > 5*time.Minute {
		errs = append(errs, fmt.Errorf("--export.push-max-backoff %s: must be from 1s to 5m", c.MaxBackoff))
	}
	if c.QueueMaxBytes < 1<<20 || c.QueueMaxBytes > 64<<30 {
		errs = append(errs, fmt.Errorf("--export.queue-max-bytes %d: must be from 1 MiB to 64 GiB", c.QueueMaxBytes))
	}
	if (c.ReceiversFile != "" || len(c.Receivers) > 0) && c.QueueDir == "" {
		errs = append(errs, errors.New("--export.queue-dir is required with push receivers"))
	}
	return errors.Join(errs...)
}

// spec is a receiver as written: timeout as a duration ("10s").
type spec struct {
	Name            string            `yaml:"name"`
	Type            string            `yaml:"type"`
	URL             string            `yaml:"url"`
	Match           string            `yaml:"match"`
	Headers         map[string]string `yaml:"headers"`
	BearerTokenFile string            `yaml:"bearer_token_file"`
	Version         string            `yaml:"version"`
	Timeout         string            `yaml:"timeout"`
}

// LoadReceivers reads the receivers file and flags and checks every
// receiver, naming the field at fault.
func (c Config) LoadReceivers() ([]export.Receiver, error) {
	var specs []spec
	var where []string
	if c.ReceiversFile != "" {
		b, err := os.ReadFile(c.ReceiversFile)
		if err != nil {
			return nil, fmt.Errorf("--export.receivers-file: %w", err)
		}
		if len(b) > maxReceiversFile {
			return nil, fmt.Errorf("--export.receivers-file %s: %d bytes, at most %d", c.ReceiversFile, len(b), maxReceiversFile)
		}
		var list []spec
		if err := decodeStrict(b, &list); err != nil {
			return nil, fmt.Errorf("--export.receivers-file %s: %w", c.ReceiversFile, err)
		}
		for i := range list {
			where = append(where, fmt.Sprintf("--export.receivers-file %s: receiver %d", c.ReceiversFile, i+1))
		}
		specs = append(specs, list...)
	}
	for i, v := range c.Receivers {
		var s spec
		if err := decodeStrict([]byte(v), &s); err != nil {
			return nil, fmt.Errorf("--export.receiver %d: %w", i+1, err)
		}
		specs = append(specs, s)
		where = append(where, fmt.Sprintf("--export.receiver %d", i+1))
	}
	if len(specs) > MaxReceivers {
		return nil, fmt.Errorf("%d push receivers: at most %d", len(specs), MaxReceivers)
	}
	var errs []error
	names := map[string]bool{}
	out := make([]export.Receiver, 0, len(specs))
	for i, s := range specs {
		r, err := s.receiver()
		if err == nil && names[r.Name] {
			err = fmt.Errorf("name %q: used by another receiver", r.Name)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%.63s): %w", where[i], s.Name, err))
			continue
		}
		names[r.Name] = true
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// decodeStrict decodes YAML (JSON is YAML), refusing unknown fields: a
// misspelt field must not silently mean its default.
func decodeStrict(b []byte, v any) error {
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w (the fields: name, type, url, match, headers, bearer_token_file, version, timeout)", err)
	}
	return nil
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// reservedHeaders are set by the sender itself.
var reservedHeaders = map[string]bool{"Content-Type": true, "Content-Encoding": true, "Content-Length": true, "Host": true,
	"User-Agent": true, "X-Prometheus-Remote-Write-Version": true, "Authorization": true, "Transfer-Encoding": true, "Connection": true}

func (s spec) receiver() (export.Receiver, error) {
	r := export.Receiver{Name: s.Name, Type: s.Type, URL: s.URL, Match: s.Match, Headers: map[string]string{},
		BearerTokenFile: s.BearerTokenFile, Version: s.Version, Timeout: DefaultTimeout}
	if !nameRE.MatchString(r.Name) {
		return r, fmt.Errorf("name %.80q: must be 1 to 63 of a-z, 0-9, _ and -, starting with a letter or digit (it names the queue directory and the metrics' receiver label)", r.Name)
	}
	if r.Type == "" {
		r.Type = "remote_write"
	}
	var errs []error
	switch r.Type {
	case "remote_write":
		if r.Version != "" && r.Version != "1.0" && r.Version != "2.0" {
			errs = append(errs, fmt.Errorf("version %.20q: must be 1.0 or 2.0", r.Version))
		}
	case "otlp":
		if r.Version != "" {
			errs = append(errs, errors.New("version: only for type remote_write"))
		}
	default:
		errs = append(errs, fmt.Errorf("type %.40q: must be remote_write or otlp", r.Type))
	}
	if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("url %.200q: must be an http or https URL", r.URL))
	} else if u.User != nil {
		errs = append(errs, errors.New("url: must not hold credentials (use headers or bearer_token_file)"))
	}
	if _, err := access.ParseSelector(r.Match); err != nil {
		errs = append(errs, fmt.Errorf("match: %w", err))
	}
	if len(s.Headers) > maxHeaders {
		errs = append(errs, fmt.Errorf("headers: %d, at most %d", len(s.Headers), maxHeaders))
	}
	total := 0
	for k, v := range s.Headers {
		ck := textproto.CanonicalMIMEHeaderKey(k)
		total += len(k) + len(v)
		switch {
		case !validHeaderName(k):
			errs = append(errs, fmt.Errorf("headers: %.80q is not a header name", k))
		case reservedHeaders[ck]:
			errs = append(errs, fmt.Errorf("headers: %s is set by the collector (for a token use bearer_token_file)", ck))
		case len(v) > maxHeaderValue || strings.ContainsAny(v, "\r\n\x00"):
			errs = append(errs, fmt.Errorf("headers: %s: value must be at most %d bytes on one line", ck, maxHeaderValue))
		}
		r.Headers[ck] = v
	}
	if total > maxHeadersBytes {
		errs = append(errs, fmt.Errorf("headers: %d bytes in all, at most %d", total, maxHeadersBytes))
	}
	if r.BearerTokenFile != "" {
		if err := checkTokenFile(r.BearerTokenFile); err != nil {
			errs = append(errs, fmt.Errorf("bearer_token_file: %w", err))
		}
	}
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("timeout %.40q: not a duration such as 30s", s.Timeout))
		case d < MinTimeout || d > MaxTimeout:
			errs = append(errs, fmt.Errorf("timeout %s: must be from %s to %s", d, MinTimeout, MaxTimeout))
		default:
			r.Timeout = d
		}
	}
	return r, errors.Join(errs...)
}

func validHeaderName(k string) bool {
	if k == "" || len(k) > 256 {
		return false
	}
	for _, c := range []byte(k) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func checkTokenFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case len(b) > maxTokenFileBytes:
		return fmt.Errorf("%s: %d bytes, at most %d", path, len(b), maxTokenFileBytes)
	case tok == "":
		return fmt.Errorf("%s is empty", path)
	case strings.ContainsAny(tok, "\r\n\x00"):
		return fmt.Errorf("%s: the token must be one line", path)
	}
	return nil
}
