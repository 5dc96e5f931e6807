// Package repocheck holds tests of the repository itself rather than of any package: no
// tracked file is too large (a committed build output cannot come back), and the README's
// and docs/'s runnable commands run and their relative links resolve. It has no code of
// its own; `go test ./...` runs its tests with the rest.
package repocheck
