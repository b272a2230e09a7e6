package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Assets are the page's files (index.html, app.js, style.css), as served.
var Assets, _ = fs.Sub(assets, "assets")

// Prefix is the path the page is served under.
const Prefix = "/ui/"

// Handler serves the page under Prefix: index.html at Prefix itself and
// the other assets by name, with content types from their extensions.
// Mount it at Prefix. Every answer carries a Content-Security-Policy
// that allows nothing but this server, so the page cannot reach the
// network beyond the JSON APIs of the origin.
func Handler() http.Handler {
	files := http.StripPrefix(Prefix, http.FileServerFS(Assets))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed, use GET", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// Redirect sends a browser from / to the page.
func Redirect() http.Handler {
	return http.RedirectHandler(Prefix, http.StatusFound)
}
