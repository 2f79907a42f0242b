// Package netns lets the agent, which runs in the root network namespace,
// name other namespaces and act inside them: read their /proc/net files and
// open sockets that belong to them.
//
// A network namespace belongs to an OS thread, not to a process, and Go
// moves goroutines between threads freely. Everything here therefore runs on
// a dedicated goroutine locked to its thread, and that thread goes back to
// Go's pool only once it is back in the namespace it came from.
package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Handle names one network namespace.
type Handle struct {
	// Path of an nsfs file for the namespace: /run/netns/NAME,
	// /proc/PID/ns/net, or /proc/self/ns/net for the agent's own.
	Path string
	// Inode of the namespace: what BPF programs read as net->ns.inum.
	Inode uint32
}

func (h Handle) String() string { return fmt.Sprintf("%s (inode %d)", h.Path, h.Inode) }

// Resolve finds a namespace by name ("spA" means /run/netns/spA, as
// `ip netns` names them) or by path (anything containing a slash). The empty
// string is the agent's own namespace.
func Resolve(nameOrPath string) (Handle, error) {
	path := nameOrPath
	switch {
	case nameOrPath == "":
		path = "/proc/self/ns/net"
	case !strings.Contains(nameOrPath, "/"):
		path = "/run/netns/" + nameOrPath
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return Handle{}, fmt.Errorf("resolve netns %q: %w", nameOrPath, err)
	}
	// A plain file would stat fine and only fail at setns; say so now.
	if fs.Type != unix.NSFS_MAGIC {
		return Handle{}, fmt.Errorf("resolve netns %q: %s is not a namespace file (not on nsfs)", nameOrPath, path)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Handle{}, fmt.Errorf("resolve netns %q: %w", nameOrPath, err)
	}
	return Handle{Path: path, Inode: uint32(st.Ino)}, nil
}

// ReadFile reads a file as seen from inside the namespace. Use
// /proc/thread-self/net/..., not /proc/self/net/...: the latter follows the
// process's main thread, which stays in the agent's namespace.
func (h Handle) ReadFile(path string) ([]byte, error) {
	var b []byte
	err := h.Do(func() error {
		var err error
		b, err = readFile(path)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read %s in netns %s: %w", path, h.Path, err)
	}
	return b, nil
}

// Do runs fn on an OS thread inside the namespace and waits for it. Sockets
// fn creates belong to the namespace for their whole life and may be used
// from any goroutine afterwards. fn must not start goroutines that expect
// to be in the namespace (they run on other threads), nor unlock its thread.
//
// When the calling goroutine's thread is in the namespace already (the
// agent's own, most often), fn runs on the calling goroutine: entering and
// leaving took six system calls and a thread switch per call, a good part
// of an idle agent's collection (bench/agentcost BenchmarkAgentIdle).
func (h Handle) Do(fn func() error) error {
	if h.here() {
		return fn()
	}
	target, err := unix.Open(h.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", h.Path, err)
	}
	defer unix.Close(target)

	errc := make(chan error, 1)
	go func() {
		// A fresh goroutine, so the caller's own thread lock (if any)
		// is never disturbed.
		runtime.LockOSThread()
		// A thread no goroutine had locked is in the process's own
		// namespace. For that namespace, entering is not needed, and
		// would be wrong when target came from /proc/self/ns/net: that
		// follows the main thread, which another Do may hold elsewhere.
		if h.here() {
			err := fn()
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		errc <- doLocked(target, h.Path, fn)
	}()
	return <-errc
}

// here says whether the calling goroutine's thread is in the namespace, and
// stays there while fn runs. A goroutine not locked to its thread runs only
// on threads in the process's namespace (every thread Do moves is locked
// until it is back, or discarded), so it stays in it wherever it moves; a
// locked one does not move.
func (h Handle) here() bool {
	if h.Inode == 0 {
		return false
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return false
	}
	return uint32(st.Ino) == h.Inode
}

// readFile is os.ReadFile for the kernel's small files (/proc, /sys): read
// to the end with plain system calls, without registering the descriptor
// with the runtime's poller and back (four calls more per file).
func readFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 4096)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

// doLocked runs on a locked thread. It unlocks the thread only when the
// thread is back in its original namespace; otherwise the goroutine ends
// still locked and Go destroys the thread instead of reusing it.
func doLocked(target int, path string, fn func() error) error {
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread() // untouched thread
		return fmt.Errorf("open current netns: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread() // setns failed: still where it was
		return fmt.Errorf("enter netns %s: %w", path, err)
	}
	fnErr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		return errors.Join(fnErr, fmt.Errorf("return from netns %s (thread discarded): %w", path, err))
	}
	runtime.UnlockOSThread()
	return fnErr
}
