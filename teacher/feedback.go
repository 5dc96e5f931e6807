package teacher

import (
	"context"
	"strings"

	"github.com/hindsight-ai/hindsight/rollout"
)

// FeedbackTeacher uses a person's comment on a segment as the hint, as written (only
// surrounding white space is trimmed). It looks at the segment that triggered the
// selection first, then at the target segment itself.
type FeedbackTeacher struct{}

// Name returns "feedback".
func (FeedbackTeacher) Name() string { return "feedback" }

// Hints implements Teacher.
func (FeedbackTeacher) Hints(_ context.Context, r *rollout.Rollout, sels []Selection) ([]Hint, error) {
	out := make([]Hint, len(sels))
	for i, s := range sels {
		out[i] = Hint{Selection: s, Source: "feedback"}
		for _, j := range []int{s.Source, s.Segment} {
			if j < 0 || j >= len(r.Segments) {
				continue
			}
			if text := strings.TrimSpace(r.Segments[j].Feedback); text != "" {
				out[i].Text = text
				break
			}
		}
	}
	return out, nil
}
