// Package viewer renders credit output files (creditfile.Read) as one
// self-contained HTML page: a sortable list of rollouts and, per rollout, its
// tokens coloured by advantage with segments, hints and per-token numbers.
//
// It sits after the ledger in the data flow (docs/design.md): it only reads the
// published credit files. The page's assets (assets/) are embedded with go:embed
// and inlined into the page together with the data as JSON, so the page needs no
// build step and no network. `hindsight inspect` writes or serves it.
package viewer
