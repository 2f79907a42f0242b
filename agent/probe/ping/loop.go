package ping

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// optIDBase starts the keys set with SCM_TS_OPT_ID far from where the
// kernel's own per-socket counter starts (0), so a stamp tells by its key
// whether the kernel honoured the control message.
const optIDBase = 1 << 31

// graceTX is how long an answered echo waits for its TX stamps. They are
// queued when the request leaves, before any reply can arrive, so this only
// covers a reply read in the same wake-up as the stamp.
const graceTX = 50 * time.Millisecond

type echo struct {
	seq      uint16
	optKey   uint32 // key given with SCM_TS_OPT_ID
	countKey uint32 // key the kernel's counter gave, when counted
	counted  bool
	sent     time.Time // just before sendto; wall and monotonic
	deadline time.Time // lost if unanswered by then

	sched, snd, rx int64 // kernel stamps, Unix ns; 0 = none
	recv           time.Time
	replied        bool
	done           bool // Result emitted
}

type loop struct {
	p    *Pinger
	emit func(Result)

	inflight []*echo // in send order; deadlines are too
	bySeq    map[uint16]*echo
	byOpt    map[uint32]*echo
	byCount  map[uint32]*echo

	// useOptID: send SCM_TS_OPT_ID. Dropped when the kernel refuses the
	// control message (before 6.13) or ignores it (stamps come back with
	// the kernel's own counter); keys are then counted here, the way the
	// kernel counts them.
	useOptID bool
	optNext  uint32
	// countNext is the kernel's per-socket key counter as far as this loop
	// can tell: a send that got its datagram built consumes a key, which
	// is every success and the drops after the IP layer (ENOBUFS from a
	// full qdisc, EPERM from netfilter).
	countNext uint32
	seqNext   uint16
	sent      int // echoes sent by this loop

	pkt, rbuf, oob, ctl []byte
}

func newLoop(p *Pinger, emit func(Result)) *loop {
	return &loop{p: p, emit: emit, bySeq: map[uint16]*echo{}, byOpt: map[uint32]*echo{}, byCount: map[uint32]*echo{},
		useOptID: true, optNext: optIDBase, seqNext: 1,
		pkt: make([]byte, icmpHeaderLen+p.opts.Size), rbuf: make([]byte, 20+icmpHeaderLen+p.opts.Size+512),
		oob: make([]byte, 512), ctl: make([]byte, unix.CmsgSpace(4))}
}

func (l *loop) run(ctx context.Context) error {
	interval := l.p.opts.Interval
	next := time.Now()
	fds := []unix.PollFd{{Fd: int32(l.p.fd), Events: unix.POLLIN}, {Fd: int32(l.p.wake), Events: unix.POLLIN}}
	for {
		if ctx.Err() != nil {
			return nil
		}
		now := time.Now()
		count := l.p.opts.Count
		if count > 0 && l.sent >= count && l.allDone() {
			return nil
		}
		if !now.Before(next) && (count == 0 || l.sent < count) {
			l.send(now)
			next = next.Add(interval)
			if now.Sub(next) > interval {
				// Fell behind (a stopped process, a long GC): resume the
				// rhythm rather than send a burst.
				next = now.Add(interval)
			}
		}
		l.expire(time.Now())
		wait := time.Until(next)
		if count > 0 && l.sent >= count {
			wait = time.Second // nothing more to send; wait for the deadlines
		}
		if d, ok := l.nextDeadline(); ok {
			wait = min(wait, time.Until(d))
		}
		wait = max(wait, 0)
		ts := unix.NsecToTimespec(int64(wait))
		fds[0].Revents, fds[1].Revents = 0, 0
		n, err := unix.Ppoll(fds, &ts, nil)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("ping %s: poll: %w", l.p.opts.Target, err)
		}
		if n <= 0 {
			continue
		}
		if fds[0].Revents&unix.POLLNVAL != 0 {
			return fmt.Errorf("ping %s: socket closed under the pinger", l.p.opts.Target)
		}
		// Stamps first: an answered echo then already has its TX stamps.
		if fds[0].Revents&unix.POLLERR != 0 {
			l.readErrQueue()
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			l.readReplies()
		}
	}
}

func (l *loop) send(now time.Time) {
	seq := l.seqNext
	l.seqNext++
	l.sent++
	if old := l.bySeq[seq]; old != nil && !old.done {
		// Only possible when Timeout spans 65536 intervals.
		l.finish(old, now)
	}
	e := &echo{seq: seq, optKey: l.optNext, deadline: now.Add(l.p.opts.Timeout)}
	if l.optNext++; l.optNext == 0 {
		l.optNext = optIDBase // stay clear of the kernel counter's range
	}
	pkt := l.p.request(l.pkt, seq)
	e.sent = time.Now()
	err := l.sendmsg(pkt, e.optKey)
	if err != nil && l.useOptID && errors.Is(err, unix.EINVAL) {
		// A kernel without SCM_TS_OPT_ID (before 6.13) refuses it.
		l.useOptID = false
		l.p.countedKeys.Store(true)
		e.sent = time.Now()
		err = l.sendmsg(pkt, 0)
	}
	l.p.count.sent.Add(1)
	consumed := err == nil || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EPERM)
	if consumed {
		e.countKey, e.counted = l.countNext, true
		l.countNext++
	}
	l.inflight = append(l.inflight, e)
	l.bySeq[seq] = e
	l.byOpt[e.optKey] = e
	if e.counted {
		l.byCount[e.countKey] = e
	}
	if err == nil {
		return
	}
	// The request did not leave this host. A full qdisc (ENOBUFS), a full
	// socket buffer (EAGAIN) or a local firewall (EPERM) is a local drop;
	// no route or the like is loss to an unreachable target.
	e.done = true
	local := errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EPERM)
	l.p.count.lost.Add(1)
	if local {
		l.p.count.localDrops.Add(1)
	}
	l.emit(Result{Seq: seq, Sent: e.sent, Lost: true, LocalDrop: local})
}

func (l *loop) sendmsg(pkt []byte, key uint32) error {
	var oob []byte
	if l.useOptID {
		oob = optIDControl(l.ctl, key)
	}
	for {
		_, err := unix.SendmsgN(l.p.fd, pkt, oob, l.p.dst, 0)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func (l *loop) readErrQueue() {
	for {
		_, oobn, _, _, err := unix.Recvmsg(l.p.fd, l.rbuf, l.oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return // EAGAIN: drained
		}
		s, ok := parseTxStamp(l.oob[:oobn])
		if !ok {
			continue
		}
		var e *echo
		if s.key >= optIDBase {
			e = l.byOpt[s.key]
		} else {
			// The kernel keyed this stamp with its own counter: it ignored
			// SCM_TS_OPT_ID on this socket type; count keys from now on.
			l.useOptID = false
			l.p.countedKeys.Store(true)
			e = l.byCount[s.key]
		}
		if e == nil || s.at < e.sent.UnixNano() {
			if e == nil || !e.done {
				l.p.count.unmatched.Add(1)
			}
			continue
		}
		switch s.kind {
		case unix.SCM_TSTAMP_SCHED:
			if e.sched == 0 {
				e.sched = s.at
			}
		case unix.SCM_TSTAMP_SND:
			if e.snd == 0 {
				e.snd = s.at
			}
		}
	}
}

func (l *loop) readReplies() {
	for {
		n, oobn, flags, _, err := unix.Recvmsg(l.p.fd, l.rbuf, l.oob, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// EAGAIN: drained. Anything else is a pending socket error
			// (reading it clears it); the echo concerned times out.
			return
		}
		now := time.Now()
		if flags&unix.MSG_TRUNC != 0 {
			continue
		}
		seq, ok := l.p.reply(l.rbuf[:n])
		if !ok {
			continue
		}
		e := l.bySeq[seq]
		if e == nil {
			l.p.count.late.Add(1)
			continue
		}
		if e.done || e.replied {
			continue // a duplicate, or a reply to a request that never left
		}
		e.replied, e.recv = true, now
		if rx, ok := rxStamp(l.oob[:oobn]); ok {
			e.rx = rx
		}
		l.p.count.replies.Add(1)
		if e.snd != 0 {
			l.finish(e, now)
		}
	}
}

// expire emits echoes whose time is up: unanswered past the deadline, or
// answered but still without TX stamps after the grace period. It then
// forgets finished echoes from the front of the queue.
func (l *loop) expire(now time.Time) {
	for _, e := range l.inflight {
		if e.done {
			continue
		}
		if e.replied && now.Sub(e.recv) >= graceTX {
			l.finish(e, now)
		}
		if !e.replied && !now.Before(e.deadline) {
			l.finish(e, now)
		}
	}
	for len(l.inflight) > 0 {
		e := l.inflight[0]
		if !e.done || now.Before(e.deadline) {
			break
		}
		l.inflight[0] = nil
		l.inflight = l.inflight[1:]
		if l.bySeq[e.seq] == e {
			delete(l.bySeq, e.seq)
		}
		delete(l.byOpt, e.optKey)
		if e.counted {
			delete(l.byCount, e.countKey)
		}
	}
}

func (l *loop) allDone() bool {
	for _, e := range l.inflight {
		if !e.done {
			return false
		}
	}
	return true
}

func (l *loop) nextDeadline() (time.Time, bool) {
	var d time.Time
	for _, e := range l.inflight {
		var t time.Time
		switch {
		case e.done:
			continue // forgotten at any later wake-up; no need to wake for it
		case e.replied:
			t = e.recv.Add(graceTX)
		default:
			t = e.deadline
		}
		if d.IsZero() || t.Before(d) {
			d = t
		}
	}
	return d, !d.IsZero()
}

func (l *loop) finish(e *echo, now time.Time) {
	e.done = true
	r := Result{Seq: e.seq, Sent: e.sent}
	if !e.replied {
		r.Lost = true
		l.p.count.lost.Add(1)
		l.emit(r)
		return
	}
	r.UserRTT = e.recv.Sub(e.sent)
	if e.snd != 0 && e.rx > e.snd {
		r.HasKernel = true
		r.KernelRTT = time.Duration(e.rx - e.snd)
		r.HostDelay = max(r.UserRTT-r.KernelRTT, 0)
		r.Receive = max(time.Duration(e.recv.UnixNano()-e.rx), 0)
	}
	if e.sched != 0 && e.snd >= e.sched {
		r.HasSched = true
		r.Qdisc = time.Duration(e.snd - e.sched)
		r.Send = max(time.Duration(e.sched-e.sent.UnixNano()), 0)
	}
	l.emit(r)
}
