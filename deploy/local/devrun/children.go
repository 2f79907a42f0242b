package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// console serialises everything written to our stdout and stderr, so
// lines of the children and of devrun never interleave mid-line.
type console struct {
	mu     sync.Mutex
	stdout io.Writer
	stderr io.Writer
}

func newConsole(stdout, stderr io.Writer) *console {
	return &console{stdout: stdout, stderr: stderr}
}

func (c *console) print(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	io.WriteString(c.stdout, s)
}

func (c *console) printf(format string, args ...any) { c.print(fmt.Sprintf(format, args...)) }

// writer returns a writer that prefixes each complete line and writes it
// to dst, and the line without prefix to file when file is not nil.
func (c *console) writer(dst io.Writer, prefix string, file io.Writer) *lineWriter {
	return &lineWriter{con: c, dst: dst, prefix: prefix, file: file}
}

// lineWriter buffers a partial line until its newline arrives.
type lineWriter struct {
	con    *console
	dst    io.Writer
	prefix string
	file   io.Writer
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(w.buf[:i+1])
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

// Flush writes a final line that had no newline.
func (w *lineWriter) Flush() {
	if len(w.buf) > 0 {
		w.emit(append(w.buf, '\n'))
		w.buf = nil
	}
}

func (w *lineWriter) emit(line []byte) {
	w.con.mu.Lock()
	defer w.con.mu.Unlock()
	// Write errors are ignored: a closed terminal must not stop the
	// children, and the log file is a convenience.
	io.WriteString(w.dst, w.prefix)
	w.dst.Write(line)
	if w.file != nil {
		w.file.Write(line)
	}
}

// child is one supervised process. done is closed once it has exited and
// its output is flushed; err is valid after that.
type child struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

func startChild(name, bin string, args []string, logPath string, con *console) (*child, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: create log: %w", name, err)
	}
	prefix := "[" + name + "] "
	stdout := con.writer(con.stdout, prefix, logFile)
	stderr := con.writer(con.stderr, prefix, logFile)

	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: Ctrl-C on the terminal reaches only devrun,
		// which stops the children in order; SIGKILL hits grandchildren.
		Setpgid: true,
		// If devrun itself is killed, the children must not linger.
		Pdeathsig: syscall.SIGTERM,
	}
	// A grandchild holding the output pipe must not hang Wait forever.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		stdout.Flush()
		stderr.Flush()
		logFile.Close()
		c.err = err
		close(c.done)
	}()
	return c, nil
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the child's process group and SIGKILL after
// timeout. It returns once the child has exited.
func (c *child) stop(timeout time.Duration, log *slog.Logger) {
	if c.exited() {
		return
	}
	pgid := -c.cmd.Process.Pid
	if err := syscall.Kill(pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		log.Warn("SIGTERM failed", "child", c.name, "err", err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
		log.Info("stopped", "child", c.name, "exit", exitString(c.err))
		return
	case <-t.C:
	}
	log.Warn("did not stop after SIGTERM, sending SIGKILL", "child", c.name, "waited", timeout)
	if err := syscall.Kill(pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		log.Warn("SIGKILL failed", "child", c.name, "err", err)
	}
	<-c.done
}

func (c *child) unexpectedExit() error {
	return fmt.Errorf("%s exited unexpectedly (%s); its output is in %s", c.name, exitString(c.err), c.logPath)
}

func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// waitReady polls url until it answers 200, the child exits, ctx ends or
// timeout passes.
func waitReady(ctx context.Context, url string, timeout time.Duration, c *child) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", c.name, err)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-c.done:
			return c.unexpectedExit()
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s not ready: %s did not return 200 within %s (last: %s); see %s",
					c.name, url, timeout, last, c.logPath)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}
