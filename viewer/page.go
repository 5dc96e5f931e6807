package viewer

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

//go:embed assets/index.html
var indexHTML string

//go:embed assets/viewer.css
var viewerCSS string

//go:embed assets/viewer.js
var viewerJS string

// Write writes p as one self-contained HTML page: the embedded style and script
// inlined, and p as JSON in a <script type="application/json" id="credit-data">.
func Write(w io.Writer, p *Page) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // escapes <, > and &: the JSON cannot close the script element
	if err := enc.Encode(p); err != nil {
		return fmt.Errorf("write page: %w", err)
	}
	page := strings.NewReplacer(
		"/*CSS*/", viewerCSS,
		"/*JS*/", viewerJS,
		"/*DATA*/", strings.TrimSpace(buf.String()),
	).Replace(indexHTML)
	if _, err := io.WriteString(w, page); err != nil {
		return fmt.Errorf("write page: %w", err)
	}
	return nil
}
