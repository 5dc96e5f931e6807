package status

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/viewer"
)

// recentCreditFiles is how many of the newest credit files the status page and
// /viewer/ list.
const recentCreditFiles = 30

// pageCSP allows only what the self-contained pages inline: no network, no frames.
const pageCSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; connect-src 'self'"

//go:embed assets/status.html
var statusHTML []byte

// Pages is what the read-only pages of the status port read: the status history, the
// folder of credit files, the tokenizer that decodes them and the credit gate's clip.
type Pages struct {
	History   func() []HistoryPoint
	CreditDir string
	// Tokenizer is the model's tokenizer; nil: the viewer decodes byte-tokenizer rows
	// and shows token ids for others.
	Tokenizer tokenizer.Tokenizer
	Clip      float64
	// Storage is what the data directory's file system offers (fsutil.Probe at start).
	Storage *fsutil.Features
}

// SetPages serves the status page (/), its data (/status/history.json) and the credit
// viewer (/viewer/) from p. Without it those routes are 404.
func (s *Server) SetPages(p Pages) {
	s.mu.Lock()
	s.pages = &p
	s.mu.Unlock()
}

func (s *Server) pagesOrNotFound(w http.ResponseWriter, r *http.Request) *Pages {
	s.mu.Lock()
	p := s.pages
	s.mu.Unlock()
	if p == nil {
		http.NotFound(w, r)
	}
	return p
}

// registerPages adds the page routes to mux.
func (s *Server) registerPages(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", s.statusPage)
	mux.HandleFunc("GET /status/history.json", s.historyJSON)
	mux.HandleFunc("GET /viewer/{$}", s.viewerList)
	mux.HandleFunc("GET /viewer/{name}", s.viewerFile)
}

func pageHeaders(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}

func (s *Server) statusPage(w http.ResponseWriter, r *http.Request) {
	if s.pagesOrNotFound(w, r) == nil {
		return
	}
	pageHeaders(w, "text/html; charset=utf-8")
	_, _ = w.Write(statusHTML)
}

// creditFile is one credit file of a listing.
type creditFile struct {
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

// historyDoc is the body of /status/history.json.
type historyDoc struct {
	Status  json.RawMessage `json:"status"` // the latest status, as GetStatus's JSON; null before the first
	History []HistoryPoint  `json:"history"`
	Files   []creditFile    `json:"files"`
	Error   string          `json:"files_error,omitempty"`
	// Storage is the data directory's file system and how renames work on it.
	Storage *storageDoc `json:"storage,omitempty"`
}

// storageDoc is the storage part of /status/history.json.
type storageDoc struct {
	fsutil.Features
	RenameMode string `json:"rename_mode"` // "renameat2" or "check-then-rename"
}

func (s *Server) historyJSON(w http.ResponseWriter, r *http.Request) {
	p := s.pagesOrNotFound(w, r)
	if p == nil {
		return
	}
	doc := historyDoc{Status: json.RawMessage("null"), History: []HistoryPoint{}, Files: []creditFile{}}
	if st := s.snapshot(); st != nil {
		b, err := protojson.Marshal(st)
		if err != nil {
			http.Error(w, fmt.Sprintf("encode status: %v", err), http.StatusInternalServerError)
			return
		}
		doc.Status = b
	}
	if p.History != nil {
		doc.History = p.History()
	}
	if p.Storage != nil {
		doc.Storage = &storageDoc{Features: *p.Storage, RenameMode: p.Storage.RenameMode()}
	}
	files, err := recentCredit(p.CreditDir, recentCreditFiles)
	if err != nil {
		doc.Error = err.Error()
	} else {
		doc.Files = files
	}
	pageHeaders(w, "application/json")
	_ = json.NewEncoder(w).Encode(doc)
}

// recentCredit lists the newest n credit files of dir, newest first. A missing dir
// has none.
func recentCredit(dir string, n int) ([]creditFile, error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return []creditFile{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list credit files: %w", err)
	}
	files := []creditFile{}
	for _, e := range ents {
		if !e.Type().IsRegular() || !validCreditName(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed since ReadDir
		}
		files = append(files, creditFile{Name: e.Name(), Size: info.Size(), Modified: info.ModTime().UTC()})
	}
	slices.SortFunc(files, func(a, b creditFile) int {
		if c := b.Modified.Compare(a.Modified); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	return files[:min(n, len(files))], nil
}

// validCreditName accepts a plain file name (no separator, no dot-file, no "..")
// that ends in creditfile.Suffix.
func validCreditName(name string) bool {
	return name != "" && filepath.Base(name) == name && !strings.ContainsAny(name, `/\`) &&
		!strings.HasPrefix(name, ".") && !strings.Contains(name, "..") &&
		strings.HasSuffix(name, creditfile.Suffix) && len(name) > len(creditfile.Suffix)
}

var listTmpl = template.Must(template.New("list").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>hindsight credit files</title>
<style>body{font:14px system-ui,sans-serif;margin:2em;color:#222}td{padding:2px 12px 2px 0}a{color:#1a5fb4}</style>
</head><body><h1>Recent credit files</h1><p><a href="/">status</a></p>
{{if .Error}}<p class="error">{{.Error}}</p>{{end}}
{{if not .Files}}<p id="none">No credit files yet.</p>{{else}}
<table id="files"><tr><th align="left">file</th><th align="left">modified (UTC)</th><th align="right">bytes</th></tr>
{{range .Files}}<tr><td><a href="/viewer/{{.Name}}">{{.Name}}</a></td><td>{{.Modified.Format "2006-01-02 15:04:05"}}</td><td align="right">{{.Size}}</td></tr>
{{end}}</table>{{end}}</body></html>
`))

func (s *Server) viewerList(w http.ResponseWriter, r *http.Request) {
	p := s.pagesOrNotFound(w, r)
	if p == nil {
		return
	}
	files, err := recentCredit(p.CreditDir, recentCreditFiles)
	data := struct {
		Files []creditFile
		Error string
	}{Files: files}
	if err != nil {
		data.Error = err.Error()
	}
	var buf bytes.Buffer
	if err := listTmpl.Execute(&buf, data); err != nil {
		http.Error(w, fmt.Sprintf("render credit list: %v", err), http.StatusInternalServerError)
		return
	}
	pageHeaders(w, "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

func (s *Server) viewerFile(w http.ResponseWriter, r *http.Request) {
	p := s.pagesOrNotFound(w, r)
	if p == nil {
		return
	}
	name := r.PathValue("name")
	if !validCreditName(name) {
		http.Error(w, fmt.Sprintf("credit file %q: not a credit file name (want NAME%s, no path)", name, creditfile.Suffix), http.StatusBadRequest)
		return
	}
	path := filepath.Join(p.CreditDir, name)
	if info, err := os.Lstat(path); err != nil || !info.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	rows, err := creditfile.Read(path)
	if err != nil {
		s.log.Warn().Err(err).Str("file", path).Msg("viewer: read credit file")
		http.Error(w, fmt.Sprintf("read credit file %s: %v", name, err), http.StatusInternalServerError)
		return
	}
	page, err := viewer.Build([]string{name}, [][]creditfile.Row{rows}, p.Tokenizer, p.Clip)
	var buf bytes.Buffer
	if err == nil {
		err = viewer.Write(&buf, page)
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("render credit file %s: %v", name, err), http.StatusInternalServerError)
		return
	}
	pageHeaders(w, "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	_, _ = w.Write(buf.Bytes())
}
