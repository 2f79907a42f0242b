// Package web serves the operator UI: static files built by Vite into dist/
// and embedded in the collector binary. The Go build never depends on the UI
// having been built; without it, a page explains how to build it.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed all:dist
var dist embed.FS

// Handler serves the built UI, falling back to index.html for client-side
// routes so shared links open the right view.
func Handler() http.Handler {
	root, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embed pattern guarantees dist exists
	}
	if _, err := fs.Stat(root, "index.html"); err != nil {
		return http.HandlerFunc(notBuilt)
	}
	files := http.FileServerFS(root)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimPrefix(r.URL.Path, "/")
		if p != "" {
			if _, err := fs.Stat(root, p); err == nil {
				if strings.HasPrefix(p, "assets/") {
					w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
				}
				files.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("Cache-Control", "no-cache")
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/"
		files.ServeHTTP(w, r2)
	})
}

// IndexHTML is the built UI's index.html (nil when the UI was not built),
// so the Content-Security-Policy can allow exactly its inline scripts.
func IndexHTML() []byte {
	b, err := dist.ReadFile("dist/index.html")
	if err != nil {
		return nil
	}
	return b
}

func notBuilt(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`<!doctype html><title>NBS</title><h1>NBS collector</h1>
<p>The web UI was not built into this binary. Run <code>make build</code> (needs Node.js and npm).</p>
<p>The JSON API works regardless: <a href="/api/v1/nodes">/api/v1/nodes</a>.</p>`))
}
