// Package status is hindsightd's status port: the protobuf status and control
// services (gRPC, gRPC-Web and Connect through connect-go) with gRPC health,
// reflection and Prometheus metrics on one port, plus the read-only status page and
// the credit viewer (pages.go) over a bounded ring of status points (history.go).
//
// Where it sits in the data flow (docs/design.md "Data flow"): beside the pipeline,
// never in it. The daemon hands a Server a snapshot function (the atomic status the
// stages publish), a Controller for pause and resume, and the Pages to read; the
// server reads those and nothing else, and no stage waits on it. statustest starts a
// real Server for the tests of this package and of the daemon.
package status
