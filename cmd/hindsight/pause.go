package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/user"

	"connectrpc.com/connect"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/api/hindsight/v1/hindsightv1connect"
)

const pauseUsage = `usage: hindsight pause [-addr HOST:PORT] [-reason TEXT] [-timeout D]
       hindsight resume [-addr HOST:PORT] [-timeout D]

pause: hindsightd stops claiming files from incoming/ and starting optimizer steps
(the step in hand finishes; checkpoints of steps taken are still written) until
resume. Status shows who paused it, why and since when. A full disk keeps the daemon
paused after resume until a retried write succeeds. Exit 0 on success, 1 if the
daemon cannot be reached or refuses, 2 on a usage error. The key sent is
$HINDSIGHT_CONTROL_KEY (the daemon's control_keys_file), else $HINDSIGHT_STATUS_KEY
(its status_keys_file); -addr https://… and -cacert as for hindsight status.

flags:
`

// pauseCmd is `hindsight pause` (resume false) and `hindsight resume` (resume true):
// one ControlService call, then the pause state is printed.
func pauseCmd(ctx context.Context, resume bool, args []string, stdout, stderr io.Writer) int {
	name := "hindsight pause"
	if resume {
		name = "hindsight resume"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	daemon := addDaemonFlags(fs)
	var reason *string
	if !resume {
		reason = fs.String("reason", "", "why, shown in status (e.g. \"swap the teacher key\")")
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, pauseUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	baseURL, ok := daemon.check(fs, stderr)
	if !ok {
		return 2
	}
	addr, timeout := daemon.addr, daemon.timeout
	// The daemon's control_keys_file, else its status_keys_file.
	httpClient, err := daemon.client("HINDSIGHT_CONTROL_KEY", "HINDSIGHT_STATUS_KEY")
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	client := hindsightv1connect.NewControlServiceClient(httpClient, baseURL)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var st *hindsightv1.PauseState
	if resume {
		resp, err := client.Resume(ctx, connect.NewRequest(&hindsightv1.ResumeRequest{By: whoAmI()}))
		if err != nil {
			fmt.Fprintf(stderr, "%s: %s: %v\n", name, *addr, err)
			return 1
		}
		st = resp.Msg.GetPause()
	} else {
		resp, err := client.Pause(ctx, connect.NewRequest(&hindsightv1.PauseRequest{By: whoAmI(), Reason: *reason}))
		if err != nil {
			fmt.Fprintf(stderr, "%s: %s: %v\n", name, *addr, err)
			return 1
		}
		st = resp.Msg.GetPause()
	}
	printPause(stdout, st)
	return 0
}

// printPause writes one line: what still pauses the daemon, or "running".
func printPause(w io.Writer, st *hindsightv1.PauseState) {
	switch {
	case st.GetOperator() && st.GetDiskFull():
		fmt.Fprintf(w, "paused by %s since %s; disk full: %s\n", st.GetBy(), formatTime(st.GetSince()), st.GetDiskFullPath())
	case st.GetOperator():
		fmt.Fprintf(w, "paused by %s since %s\n", st.GetBy(), formatTime(st.GetSince()))
	case st.GetDiskFull():
		fmt.Fprintf(w, "still paused: disk full: %s (next try %s)\n", st.GetDiskFullPath(), formatTime(st.GetNextRetryAt()))
	default:
		fmt.Fprintln(w, "running")
	}
}

// whoAmI is user@host, as far as they are known.
func whoAmI() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	switch {
	case name != "" && host != "":
		return name + "@" + host
	case host != "":
		return host
	}
	return name
}

// bearer adds "Authorization: Bearer <key>" to every request.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}
