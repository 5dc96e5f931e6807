package status

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
)

func TestWatchInterval(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval *durationpb.Duration
		want     time.Duration
		wantCode connect.Code
	}{
		{name: "unset", want: time.Second},
		{name: "zero", interval: durationpb.New(0), want: time.Second},
		{name: "below minimum", interval: durationpb.New(time.Millisecond), want: 100 * time.Millisecond},
		{name: "as asked", interval: durationpb.New(5 * time.Second), want: 5 * time.Second},
		{name: "negative", interval: durationpb.New(-time.Second), wantCode: connect.CodeInvalidArgument},
		{name: "invalid", interval: &durationpb.Duration{Seconds: 1, Nanos: -1}, wantCode: connect.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := watchInterval(&hindsightv1.WatchStatusRequest{Interval: tc.interval})
			if tc.wantCode != 0 {
				require.Equal(t, tc.wantCode, connect.CodeOf(err), "err: %v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
