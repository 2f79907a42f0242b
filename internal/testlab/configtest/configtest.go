// Package configtest checks the shape every part's configuration shares:
// DefaultConfig, RegisterFlags taking its defaults from the struct, and a
// Validate that reports every problem at once.
package configtest

import (
	"flag"
	"reflect"
	"strings"
	"testing"
)

// FlagsKeepDefaults checks that binding flags to the defaults and parsing
// none leaves the defaults as they were: the flags carry no second copy.
func FlagsKeepDefaults[C any](t testing.TB, defaults func() C, register func(*C, *flag.FlagSet)) {
	t.Helper()
	c := defaults()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	register(&c, fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if want := defaults(); !reflect.DeepEqual(c, want) {
		t.Errorf("after parsing no flags:\n%+v\nwant the defaults\n%+v", c, want)
	}
}

// Problems checks that err reports exactly the problems want names, one
// line each, all at once; no want means err must be nil.
func Problems(t testing.TB, err error, want ...string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("Validate() = %v, want valid", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("Validate() = nil, want problems naming %q", want)
	}
	lines := strings.Split(err.Error(), "\n")
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Validate() = %v\nwant it to name %s", err, w)
		}
	}
	if len(lines) != len(want) {
		t.Errorf("Validate() reported %d problems, want %d: %v", len(lines), len(want), err)
	}
}
