package configtest

import (
	"errors"
	"flag"
	"testing"
)

// recorder stands in for a test, to see whether a check fails it.
type recorder struct {
	testing.TB
	failed bool
}

type fatal struct{}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true; panic(fatal{}) }
func (r *recorder) Fatal(...any)          { r.failed = true; panic(fatal{}) }

// check runs f with the recorder (the methods it lacks are those of the
// nil testing.TB it embeds, so an unexpected call panics) and says whether
// f failed the test.
func (r *recorder) check(f func(testing.TB)) (failed bool) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(fatal); !ok {
				panic(p)
			}
		}
		failed = r.failed
	}()
	f(r)
	return r.failed
}

func TestProblems(t *testing.T) {
	two := errors.Join(errors.New("--a is bad"), errors.New("--b is bad"))
	cases := []struct {
		name  string
		err   error
		want  []string
		fails bool
	}{
		{"valid", nil, nil, false},
		{"unexpected problem", errors.New("--a is bad"), nil, true},
		{"missing problem", nil, []string{"--a"}, true},
		{"all named", two, []string{"--a", "--b"}, false},
		{"one not named", two, []string{"--a", "--c"}, true},
		{"more reported than named", two, []string{"--a"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{}
			if got := r.check(func(tb testing.TB) { Problems(tb, c.err, c.want...) }); got != c.fails {
				t.Errorf("Problems(%v, %q) failed the test: %v, want %v", c.err, c.want, got, c.fails)
			}
		})
	}
}

type cfg struct{ N int }

func TestFlagsKeepDefaults(t *testing.T) {
	defaults := func() cfg { return cfg{N: 7} }
	cases := []struct {
		name     string
		register func(*cfg, *flag.FlagSet)
		fails    bool
	}{
		{"default from the struct", func(c *cfg, fs *flag.FlagSet) { fs.IntVar(&c.N, "n", c.N, "") }, false},
		{"a second copy", func(c *cfg, fs *flag.FlagSet) { fs.IntVar(&c.N, "n", 8, "") }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{}
			if got := r.check(func(tb testing.TB) { FlagsKeepDefaults(tb, defaults, c.register) }); got != c.fails {
				t.Errorf("failed the test: %v, want %v", got, c.fails)
			}
		})
	}
}
