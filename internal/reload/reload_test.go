package reload

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestFilesReloadsOnChangeAndKeepsTheLastGoodValue(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "n")
	write := func(s string, age time.Duration) {
		t.Helper()
		// Written beside and renamed, as rotation tools do; the mtime is
		// set explicitly so the test does not depend on its resolution.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		mt := time.Now().Add(age)
		if err := os.Chtimes(tmp, mt, mt); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	parses := 0
	parse := func() (int, error) {
		parses++
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return 0, errors.New("not a number")
		}
		return n, nil
	}

	write("x", -time.Hour)
	if _, err := New(parse, nil, path); err == nil || !strings.Contains(err.Error(), "not a number") {
		t.Fatalf("New on a bad file: %v, want the parse error", err)
	}
	write("1", -time.Hour)
	f, err := New(parse, nil, path)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		change  func()
		want    int
		wantErr bool
		parses  int // parses so far
	}{
		{"unchanged files are not parsed again", func() {}, 1, false, 2},
		{"a change is picked up", func() { write("2", -30*time.Minute) }, 2, false, 3},
		{"a broken file keeps the last good value", func() { write("oops", -20*time.Minute) }, 2, true, 4},
		{"and is not parsed again until it changes", func() {}, 2, true, 4},
		{"a missing file keeps the last good value", func() { os.Remove(path) }, 2, true, 4},
		{"a repaired file is picked up", func() { write("3", -10*time.Minute) }, 3, false, 5},
	}
	for _, s := range steps {
		s.change()
		if got := f.Get(); got != s.want {
			t.Errorf("%s: Get = %d, want %d", s.name, got, s.want)
		}
		if (f.Err() != nil) != s.wantErr {
			t.Errorf("%s: Err = %v, want an error: %v", s.name, f.Err(), s.wantErr)
		}
		if parses != s.parses {
			t.Errorf("%s: parsed %d times, want %d", s.name, parses, s.parses)
		}
	}
}
