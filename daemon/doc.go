// Package daemon is hindsightd's body: it wires the stages of DESIGN.md's data flow
// together (today: the spool, whose journal decides each rollout once), serves the
// protobuf status service with health, reflection and Prometheus metrics on one port,
// talks to systemd, and drains on SIGTERM. It holds no logic a test cannot reach;
// cmd/hindsightd only parses flags and calls Run.
package daemon
