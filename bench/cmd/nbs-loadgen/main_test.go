package main

import (
	"fmt"
	"strings"
	"testing"
)

// The open-file limit follows the connections, not the nodes: 30,000
// nodes four a connection fit the development machine's 20,000 files, and
// when a fleet does not fit, the error names both ways out.
func TestFileLimit(t *testing.T) {
	for _, tc := range []struct {
		name           string
		nodes, perConn int
		cur, hard      uint64
		want           uint64
		wantErr        []string // substrings of the error; nil: no error
	}{
		{name: "enough already", nodes: 1000, perConn: 1, cur: 20000, hard: 20000, want: 20000},
		{name: "raised to what a connection each needs", nodes: 1000, perConn: 1, cur: 1024, hard: 20000, want: 1000 + 100 + 256},
		{name: "30000 nodes four a connection", nodes: 30000, perConn: 4, cur: 1024, hard: 20000, want: 7500 + 750 + 256},
		{name: "50000 nodes four a connection", nodes: 50000, perConn: 4, cur: 1024, hard: 20000, want: 12500 + 1250 + 256},
		{name: "a partial last connection counts", nodes: 10, perConn: 4, cur: 64, hard: 1024, want: 3 + 0 + 256},
		{name: "0 nodes a connection is one", nodes: 100, perConn: 0, cur: 64, hard: 1024, want: 100 + 10 + 256},
		{name: "30000 nodes a connection each", nodes: 30000, perConn: 1, cur: 1024, hard: 20000,
			wantErr: []string{"30000 connections", "33256 open files", "hard limit is 20000", "ulimit -n 33256", "--nodes-per-conn 2 or more"}},
		{name: "hard limit below the process's own files", nodes: 10, perConn: 1, cur: 100, hard: 200,
			wantErr: []string{"hard limit is 200", "raise the hard limit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := fileLimit(tc.nodes, tc.perConn, tc.cur, tc.hard)
			if tc.wantErr == nil {
				if err != nil || got != tc.want {
					t.Fatalf("fileLimit = %d, %v; want %d", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("fileLimit = %d, want an error", got)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// The --nodes-per-conn an error suggests is the least that fits.
func TestFileLimitSuggestionFits(t *testing.T) {
	const hard = 20000
	for _, nodes := range []int{20000, 30000, 50000, 100000, 1000000} {
		_, err := fileLimit(nodes, 1, 1024, hard)
		if err == nil {
			t.Fatalf("%d nodes a connection each fit in %d files", nodes, hard)
		}
		msg := err.Error()
		i := strings.LastIndex(msg, "use --nodes-per-conn")
		var p int
		if _, scanErr := fmt.Sscanf(msg[max(i, 0):], "use --nodes-per-conn %d", &p); i < 0 || scanErr != nil {
			t.Fatalf("%d nodes: no --nodes-per-conn in %q", nodes, err)
		}
		if filesNeeded(nodes, p) > hard || filesNeeded(nodes, p-1) <= hard {
			t.Fatalf("%d nodes: suggested --nodes-per-conn %d is not the least that fits %d files", nodes, p, hard)
		}
	}
}
