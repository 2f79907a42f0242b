// Package migrations holds the collector's versioned SQL schema. Files are
// named NNN_description.sql and applied in order by collector/store; go:embed
// cannot reach "..", so the files are exposed from here.
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
