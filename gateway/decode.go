package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
)

// decodeBody decodes r's body, at most limit bytes (named by what in the error),
// into v: exactly one JSON value and nothing after it but white space. A body over
// the limit is 413; malformed JSON, a second value or trailing bytes are 400. With
// allowEmpty an empty body leaves v as it is.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, what string, v any, allowEmpty bool) *apiError {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) && allowEmpty {
		return nil
	}
	if err == nil {
		// One value only: what follows must be the end of the body.
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("trailing data after the JSON value (one JSON object per request)")
			var tooBig *http.MaxBytesError
			if errors.As(terr, &tooBig) {
				err = terr
			}
		}
	}
	if err == nil {
		return nil
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return &apiError{status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
			Message: fmt.Sprintf("request body over %d bytes (%s)", tooBig.Limit, what)}
	}
	return badRequest("", "malformed JSON body: %v", err)
}

// parseReward parses a reward given as text (metadata.reward): a finite number that a
// float32 holds.
func parseReward(field, v string) (*float32, *apiError) {
	r, err := strconv.ParseFloat(v, 32)
	if err != nil || math.IsNaN(r) || math.IsInf(r, 0) {
		return nil, badRequest("", "%s %q: want a finite number", field, v)
	}
	r32 := float32(r)
	return &r32, nil
}
