// Package buildinfo says which release a binary is: the version the build
// stamped in (make build, make image), or what the Go toolchain recorded.
package buildinfo

import "runtime/debug"

// version is set by the linker, never at run time:
//
//	go build -ldflags "-X github.com/nbs-project/nbs/internal/buildinfo.version=v1.2.3"
//
// A package variable because -X can stamp nothing else.
var version string

// Version is the stamped version; without one, the module version `go
// install` records; otherwise "devel" (a go build or go run in a work tree).
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
