package viewer

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
)

// Handler serves the page of p at "/" (GET and HEAD); other paths are 404.
func Handler(p *Page) (http.Handler, error) {
	var buf bytes.Buffer
	if err := Write(&buf, p); err != nil {
		return nil, fmt.Errorf("serve page: %w", err)
	}
	page := buf.Bytes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Length", strconv.Itoa(len(page)))
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:")
		h.Set("Cache-Control", "no-store")
		if r.Method == http.MethodHead {
			return
		}
		w.Write(page)
	}), nil
}
