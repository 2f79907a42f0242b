// Package schema holds the rules about the names NBS puts on the wire:
// metric ids and their tree shape, node names, node labels, and the order of
// severity of states. The agent checks what it is about to send with it and
// the collector checks what it receives, so both read one rule. It imports
// only the standard library and the wire's State enum, so any package may
// use it.
package schema

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// A metric id is a path of at most MaxSegments segments separated by '/',
// at most MaxIDLen bytes long, like tcp_reset/sent/no_socket. The root
// segment takes a-z, 0-9 and '_'; the segments below it also '.', ':' and
// '-', so that device names and addresses fit (latency/qdisc/br-lan.10,
// ping/2001:db8::1).
const (
	MaxIDLen    = 255
	MaxSegments = 8
)

// CheckID returns nil if id is a valid metric id, or an error that says
// what is wrong with it. The error does not repeat the id: the caller
// quotes it, then the error after a colon.
func CheckID(id string) error { return checkPath(id, false) }

// ValidID reports whether id is a valid metric id.
func ValidID(id string) bool { return CheckID(id) == nil }

// CheckPattern is CheckID for a pattern of ids, as alert rules take them:
// '*' may also stand in any segment and matches within one segment
// (path.Match), so "*" is every root and tcp_reset/sent/* every sent reason.
func CheckPattern(p string) error { return checkPath(p, true) }

// ValidPattern reports whether p is a valid pattern of metric ids.
func ValidPattern(p string) bool { return CheckPattern(p) == nil }

func checkPath(id string, star bool) error {
	switch {
	case id == "":
		return errors.New("empty")
	case len(id) > MaxIDLen:
		return fmt.Errorf("%d bytes, at most %d", len(id), MaxIDLen)
	case id[0] == '/':
		return errors.New("starts with '/'")
	case id[len(id)-1] == '/':
		return errors.New("ends with '/'")
	}
	if n := strings.Count(id, "/") + 1; n > MaxSegments {
		return fmt.Errorf("%d segments, at most %d", n, MaxSegments)
	}
	for i, seg := range strings.Split(id, "/") {
		if seg == "" {
			return errors.New("empty segment (\"//\")")
		}
		for j := 0; j < len(seg); j++ {
			if segmentByte(seg[j], i == 0) || (star && seg[j] == '*') {
				continue
			}
			allowed := []string{"a-z", "0-9", "'_'"}
			if i > 0 {
				allowed = append(allowed, "'.'", "':'", "'-'")
			}
			if star {
				allowed = append(allowed, "'*'")
			}
			last := len(allowed) - 1
			return fmt.Errorf("%s is not allowed in segment %q (%s segment takes %s and %s)",
				describeAt(seg, j), seg, segmentName(i), strings.Join(allowed[:last], ", "), allowed[last])
		}
	}
	return nil
}

// segmentByte reports whether b may stand in a segment of a metric id.
func segmentByte(b byte, root bool) bool {
	switch {
	case b >= 'a' && b <= 'z', b >= '0' && b <= '9', b == '_':
		return true
	case b == '.', b == ':', b == '-':
		return !root
	}
	return false
}

func segmentName(i int) string {
	if i == 0 {
		return "the root"
	}
	return "a"
}

// describeAt names the character at byte i of s for an error message: the
// rune if s holds valid UTF-8 there, the byte otherwise.
func describeAt(s string, i int) string {
	r, size := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf("byte 0x%02x", s[i])
	}
	return fmt.Sprintf("%q", r)
}

// Parent returns the id of a metric's parent, "" for a root.
func Parent(id string) string {
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		return id[:i]
	}
	return ""
}

// Root returns the root segment of a metric id: the branch it belongs to.
func Root(id string) string {
	root, _, _ := strings.Cut(id, "/")
	return root
}

// Within reports whether id is subtree itself or one of its descendants.
// Comparing whole segments keeps tcp_reset_x out of tcp_reset's subtree.
func Within(id, subtree string) bool {
	return id == subtree || (strings.HasPrefix(id, subtree) && len(id) > len(subtree) && id[len(subtree)] == '/')
}

// Segment makes any name (a device, a program, a ping target) usable as one
// segment below a root: lower case, and '_' for each character a segment
// cannot hold. The caller bounds its length so the whole id stays within
// MaxIDLen.
func Segment(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if r < utf8.RuneSelf && segmentByte(byte(r), false) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}
