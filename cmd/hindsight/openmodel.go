package main

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/xla"
)

// openModel is the preamble of the commands that run a model (score, generate): the
// backend -backend names (xla.ResolveBackend), the -precision checked against it,
// and the model or adapter directory opened in that precision (xla.Open).
func openModel(backendSpec, precision, dir string) (backends.Backend, *xla.Model, error) {
	backend, err := xla.NewBackend(xla.ResolveBackend(backendSpec, ""))
	if err != nil {
		return nil, nil, err
	}
	prec := xla.Precision(precision)
	if err := prec.Validate(); err != nil {
		return nil, nil, fmt.Errorf("-precision: %w", err)
	}
	if err := prec.CheckBackend(backend); err != nil {
		return nil, nil, err
	}
	m, err := xla.Open(dir, xla.OpenOptions{Precision: prec})
	if err != nil {
		return nil, nil, err
	}
	return backend, m, nil
}
