// Package depsanchor pins the project's chosen dependencies in go.mod until code uses them.
package depsanchor

import (
	_ "connectrpc.com/connect"
	_ "connectrpc.com/grpchealth"
	_ "connectrpc.com/grpcreflect"
	_ "github.com/apache/arrow-go/v18/arrow/array"
	_ "github.com/apache/arrow-go/v18/arrow/ipc"
	_ "github.com/coreos/go-systemd/v22/daemon"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/collectors"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/rs/zerolog"
	_ "github.com/stretchr/testify/require"
	_ "golang.org/x/sync/errgroup"
	_ "golang.org/x/sys/unix"
	_ "google.golang.org/protobuf/proto"
	_ "google.golang.org/protobuf/encoding/protojson"
	_ "google.golang.org/protobuf/types/known/timestamppb"
	_ "gopkg.in/yaml.v3"
)
