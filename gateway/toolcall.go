package gateway

import (
	"encoding/json"
	"regexp"
	"strings"
)

// toolCallRE matches one Hermes/Qwen tool call: <tool_call>{json}</tool_call>.
var toolCallRE = regexp.MustCompile(`(?s)<tool_call>\s*(.*?)\s*</tool_call>`)

// parseToolCalls splits a generated turn in the Hermes/Qwen format into its text and
// its tool calls ({"name": …, "arguments": {…}} inside <tool_call> tags; the
// arguments are returned as a JSON string, as the OpenAI API carries them). A tag
// whose body is not such an object is left in the text. ids makes the calls' ids.
func parseToolCalls(text string, ids func() string) (string, []ToolCall) {
	var calls []ToolCall
	var rest strings.Builder
	last := 0
	for _, m := range toolCallRE.FindAllStringSubmatchIndex(text, -1) {
		var body struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal([]byte(text[m[2]:m[3]]), &body); err != nil || body.Name == "" {
			continue
		}
		args := "{}"
		if len(body.Arguments) > 0 && string(body.Arguments) != "null" {
			var s string
			if json.Unmarshal(body.Arguments, &s) == nil {
				args = s // some models write the arguments as a JSON string
			} else {
				args = canonicalJSON(body.Arguments)
			}
		}
		rest.WriteString(text[last:m[0]])
		last = m[1]
		calls = append(calls, ToolCall{ID: ids(), Type: "function", Function: FunctionCall{Name: body.Name, Arguments: args}})
	}
	if len(calls) == 0 {
		return text, nil
	}
	rest.WriteString(text[last:])
	return strings.TrimSpace(rest.String()), calls
}

// canonicalJSON re-encodes raw with sorted keys and no spaces, or returns it as it
// is when it is not JSON.
func canonicalJSON(raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// argumentsValue returns a tool call's arguments as a template sees them: the
// decoded object (transformers passes a dict), or the string when it is not JSON.
func argumentsValue(args string) any {
	var v any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		return args
	}
	return v
}
