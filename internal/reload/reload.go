// Package reload keeps a value parsed from files current: it stats the files
// whenever the value is asked for and parses them again when any changed, so
// certificates and maps rotate without a restart and without a watcher
// goroutine to own.
package reload

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
)

// Files is a value parsed from one or more files.
type Files[T any] struct {
	paths []string
	parse func() (T, error)
	log   *slog.Logger

	mu  sync.Mutex
	sig string // the files as they were at the last parse attempt
	val T
	err error // of the last attempt, when it failed
}

// New parses the files once; an error there is the caller's to report (a
// process should not start on files it cannot read).
func New[T any](parse func() (T, error), log *slog.Logger, paths ...string) (*Files[T], error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Files[T]{paths: paths, parse: parse, log: log}
	v, err := parse()
	if err != nil {
		return nil, err
	}
	sig, err := f.signature()
	if err != nil {
		return nil, err
	}
	f.sig, f.val = sig, v
	return f, nil
}

// Get returns the value, parsed again first if a file changed since the
// last attempt. When the new files do not parse (a certificate replaced
// before its key, a half-written file), the last good value is kept and the
// files are tried again once they change again.
func (f *Files[T]) Get() T {
	f.mu.Lock()
	defer f.mu.Unlock()
	sig, err := f.signature()
	if err != nil {
		f.fail(fmt.Sprint("stat: ", err), err)
		return f.val
	}
	if sig == f.sig {
		return f.val
	}
	f.sig = sig
	v, err := f.parse()
	if err != nil {
		f.fail(sig, err)
		return f.val
	}
	f.val, f.err = v, nil
	f.log.Info("reloaded changed files", "files", f.paths)
	return f.val
}

// Err is the error of the last reload attempt; nil once the files parse.
func (f *Files[T]) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// fail records a failed reload and logs it once per state of the files.
func (f *Files[T]) fail(sig string, err error) {
	again := f.err != nil && f.err.Error() == err.Error()
	f.sig, f.err = sig, err
	if again {
		return
	}
	f.log.Error("changed files do not load; keeping the previous ones", "files", f.paths, "err", err)
}

// signature identifies the files' current content cheaply: modification
// time, size and inode (an atomic rename keeps the mtime resolution's
// second but always changes the inode).
func (f *Files[T]) signature() (string, error) {
	var b []byte
	for _, p := range f.paths {
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		b = fmt.Appendf(b, "%d/%d/%d;", fi.ModTime().UnixNano(), fi.Size(), ino)
	}
	if len(b) == 0 {
		return "", errors.New("no files to watch")
	}
	return string(b), nil
}
