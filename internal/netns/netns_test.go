package netns_test

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nbs-project/nbs/internal/netns"
	"github.com/nbs-project/nbs/internal/testlab/netlab"
)

// threadNetns is the inode of the calling thread's network namespace.
func threadNetns() (uint32, error) {
	var st unix.Stat_t
	err := unix.Stat("/proc/thread-self/ns/net", &st)
	return uint32(st.Ino), err
}

func TestResolve(t *testing.T) {
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &self); err != nil {
		t.Fatal(err)
	}
	pidPath := "/proc/" + strconv.Itoa(os.Getpid()) + "/ns/net"
	tests := []struct {
		name      string
		in        string
		wantPath  string
		wantInode uint32
		wantErr   string
	}{
		{"own namespace", "", "/proc/self/ns/net", uint32(self.Ino), ""},
		{"path as is", pidPath, pidPath, uint32(self.Ino), ""},
		{"unknown name", "nbs-no-such-netns", "", 0, "no such file"},
		{"not a namespace", "/etc/hostname", "", 0, "not a namespace file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := netns.Resolve(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Resolve(%q) error = %v, want it to mention %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q): %v", tt.in, err)
			}
			if h.Path != tt.wantPath || h.Inode == 0 || (tt.wantInode != 0 && h.Inode != tt.wantInode) {
				t.Errorf("Resolve(%q) = %+v, want path %s inode %d", tt.in, h, tt.wantPath, tt.wantInode)
			}
		})
	}
}

func TestInsideLab(t *testing.T) {
	l := netlab.New(t)
	own, err := netns.Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ns, dev, otherDev string
	}{{l.A, "vA", "vB"}, {l.B, "vB", "vA"}}
	for _, tt := range tests {
		t.Run(tt.ns, func(t *testing.T) {
			h, err := netns.Resolve(tt.ns)
			if err != nil {
				t.Fatal(err)
			}
			if h.Path != "/run/netns/"+tt.ns || h.Inode != l.Inode(t, tt.ns) || h.Inode == own.Inode {
				t.Fatalf("Resolve(%q) = %+v", tt.ns, h)
			}

			// /proc/thread-self/net shows the namespace's own devices.
			b, err := h.ReadFile("/proc/thread-self/net/dev")
			if err != nil {
				t.Fatal(err)
			}
			if dev := string(b); !strings.Contains(dev, tt.dev+":") || strings.Contains(dev, tt.otherDev+":") {
				t.Errorf("net/dev in %s: want %s and not %s:\n%s", tt.ns, tt.dev, tt.otherDev, dev)
			}
			if _, err := h.ReadFile("/proc/thread-self/net/no-such-file"); err == nil {
				t.Error("ReadFile of a missing file: no error")
			}

			// Do runs inside, and a socket made there stays there.
			var inside uint32
			var fd int
			err = h.Do(func() error {
				var err error
				if inside, err = threadNetns(); err != nil {
					return err
				}
				fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			if inside != h.Inode {
				t.Errorf("Do ran in netns %d, want %d", inside, h.Inode)
			}
			// SIOCGSKNS returns a descriptor of the socket's namespace.
			nsfd, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS)
			if err != nil {
				t.Fatalf("SIOCGSKNS: %v", err)
			}
			defer unix.Close(nsfd)
			var st unix.Stat_t
			if err := unix.Fstat(nsfd, &st); err != nil {
				t.Fatal(err)
			}
			if uint32(st.Ino) != h.Inode {
				t.Errorf("socket made in Do lives in netns %d, want %d", st.Ino, h.Inode)
			}

			sentinel := errors.New("fn failed")
			if err := h.Do(func() error { return sentinel }); !errors.Is(err, sentinel) {
				t.Errorf("Do returned %v, want fn's error", err)
			}
		})
	}
}

// Threads used by Do must come back to Go's pool in the agent's namespace:
// after many Do calls, every goroutine still runs in it.
func TestDoLeavesNoThreadInNamespace(t *testing.T) {
	l := netlab.New(t)
	own, err := threadNetns()
	if err != nil {
		t.Fatal(err)
	}
	h, err := netns.Resolve(l.A)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if err := h.Do(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	bad := make(chan string, 200)
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ino, err := threadNetns()
			if err != nil {
				bad <- err.Error()
				return
			}
			if ino != own {
				bad <- "thread in netns " + strconv.FormatUint(uint64(ino), 10)
			}
		}()
	}
	wg.Wait()
	close(bad)
	for b := range bad {
		t.Error(b)
	}
}

// Do on the namespace the calling thread is in runs fn on the caller's own
// thread (no entering and leaving), and nested in a Do of another
// namespace, each runs where its handle says.
func TestDoWhereItIs(t *testing.T) {
	l := netlab.New(t)
	own, err := netns.Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	lab, err := netns.Resolve(l.A)
	if err != nil {
		t.Fatal(err)
	}
	// where runs h.Do and says in which namespace and on which thread fn
	// ran.
	where := func(h netns.Handle) (ino uint32, tid int, err error) {
		err = h.Do(func() error {
			var err error
			ino, err = threadNetns()
			tid = unix.Gettid()
			return err
		})
		return ino, tid, err
	}
	inside := func(h netns.Handle) (ino uint32, tid int) {
		t.Helper()
		ino, tid, err := where(h)
		if err != nil {
			t.Fatal(err)
		}
		return ino, tid
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	me := unix.Gettid()
	if ino, tid := inside(own); ino != own.Inode || tid != me {
		t.Errorf("own namespace: fn ran in %d on thread %d, want %d on the caller's %d", ino, tid, own.Inode, me)
	}
	if ino, tid := inside(lab); ino != lab.Inode || tid == me {
		t.Errorf("lab namespace: fn ran in %d on thread %d, want %d on another thread than the caller's", ino, tid, lab.Inode)
	}

	tests := []struct {
		name        string
		inner       netns.Handle
		sameThread  bool
		innerWanted uint32
	}{
		{"own inside lab", own, false, own.Inode},
		{"lab inside lab", lab, true, lab.Inode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var outerTid int
			var ino uint32
			var tid int
			err := lab.Do(func() error {
				outerTid = unix.Gettid()
				var err error
				ino, tid, err = where(tt.inner)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if ino != tt.innerWanted || (tid == outerTid) != tt.sameThread {
				t.Errorf("fn ran in %d on thread %d (outer %d), want %d, same thread %v", ino, tid, outerTid, tt.innerWanted, tt.sameThread)
			}
		})
	}

	// A handle without an inode is never taken for the caller's.
	if ino, tid := inside(netns.Handle{Path: own.Path}); ino != own.Inode || tid == me {
		t.Errorf("handle without inode: fn ran in %d on thread %d, want %d on another thread", ino, tid, own.Inode)
	}
}

// ReadFile reads a file larger than its first buffer whole, and says which
// file it could not read.
func TestReadFileWhole(t *testing.T) {
	own, err := netns.Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/f"
	want := strings.Repeat("0123456789abcdef", 1000) // 16,000 bytes
	if err := os.WriteFile(path, []byte(want), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := own.ReadFile(path)
	if err != nil || string(got) != want {
		t.Fatalf("ReadFile = %d bytes, %v; want %d bytes", len(got), err, len(want))
	}
	if _, err := own.ReadFile(path + ".missing"); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path+".missing") {
		t.Errorf("ReadFile of a missing file: %v, want not-exist naming the file", err)
	}
}
