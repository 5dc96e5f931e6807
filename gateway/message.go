package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hindsight-ai/hindsight/rollout"
)

// chatMessage is a message in the gateway's canonical form: text content, tool
// calls with canonical JSON arguments. Two requests carry the same conversation
// when their messages' keys are equal.
type chatMessage struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Status     int8       `json:"status"` // a tool message's status: -1 null, 0 ok, 1 error
}

// canonical checks the request's messages and returns them in canonical form.
func canonical(in []Message) ([]chatMessage, *apiError) {
	if len(in) == 0 {
		return nil, badRequest("", "messages: empty")
	}
	out := make([]chatMessage, len(in))
	calls := map[string]bool{} // the ids of the tool calls of the assistant messages so far
	for i, m := range in {
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		switch role {
		case "system", "user", "assistant", "tool":
		default:
			return nil, badRequest("", "messages[%d].role %q: want system, developer, user, assistant or tool", i, m.Role)
		}
		text, err := contentText(m.Content)
		if err != nil {
			return nil, badRequest("", "messages[%d].%s", i, err)
		}
		st, err := toolStatus(m.Status)
		if err != nil {
			return nil, badRequest("", "messages[%d].%s", i, err)
		}
		c := chatMessage{Role: role, Content: text, Name: m.Name, ToolCallID: m.ToolCallID, Status: st}
		// A tool message answers a call of an earlier assistant message by its id,
		// as OpenAI requires: the rollout's tool result is then paired with its call.
		switch {
		case role == "tool" && m.ToolCallID == "":
			return nil, badRequest("", "messages[%d].tool_call_id: missing; a tool message answers an assistant message's tool call by its id", i)
		case role == "tool" && !calls[m.ToolCallID]:
			return nil, badRequest("", "messages[%d].tool_call_id %q: no earlier assistant message has a tool call with this id", i, m.ToolCallID)
		case role != "tool" && m.ToolCallID != "":
			return nil, badRequest("", "messages[%d].tool_call_id: only tool messages have one (role %q)", i, m.Role)
		case role != "assistant" && len(m.ToolCalls) > 0:
			return nil, badRequest("", "messages[%d].tool_calls: only assistant messages have them (role %q)", i, m.Role)
		}
		for j, tc := range m.ToolCalls {
			if tc.Function.Name == "" {
				return nil, badRequest("", "messages[%d].tool_calls[%d].function.name: empty", i, j)
			}
			if tc.ID == "" {
				return nil, badRequest("", "messages[%d].tool_calls[%d].id: empty; the tool message that answers the call names it", i, j)
			}
			calls[tc.ID] = true
			c.ToolCalls = append(c.ToolCalls, ToolCall{ID: tc.ID, Type: "function",
				Function: FunctionCall{Name: tc.Function.Name, Arguments: canonicalJSON([]byte(tc.Function.Arguments))}})
		}
		out[i] = c
	}
	return out, nil
}

// key identifies the message for prefix matching: role, text, name, tool calls
// (names and arguments; ids are the client's to keep or drop) and tool_call_id.
func (m chatMessage) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%s\x00%s\x00%s", m.Role, m.Content, m.Name, m.ToolCallID)
	for _, tc := range m.ToolCalls {
		fmt.Fprintf(&b, "\x00%s\x00%s", tc.Function.Name, tc.Function.Arguments)
	}
	return b.String()
}

// templateValue is m as a chat template sees it (transformers' message dicts).
func (m chatMessage) templateValue() map[string]any {
	v := map[string]any{"role": m.Role, "content": m.Content}
	if m.Name != "" {
		v["name"] = m.Name
	}
	if m.ToolCallID != "" {
		v["tool_call_id"] = m.ToolCallID
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]any, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			fn := map[string]any{"name": tc.Function.Name, "arguments": argumentsValue(tc.Function.Arguments)}
			calls[i] = map[string]any{"id": tc.ID, "type": "function", "function": fn}
		}
		v["tool_calls"] = calls
	}
	return v
}

// segmentOf is the kind and tool name a message's tokens get in the rollout; tool
// results take their name from the message, else from the earlier call they answer.
func segmentOf(msgs []chatMessage, i int) (rollout.SegmentKind, string, rollout.ToolStatus) {
	m := msgs[i]
	switch m.Role {
	case "system":
		return rollout.KindSystem, "", rollout.StatusNone
	case "user":
		return rollout.KindUser, "", rollout.StatusNone
	case "assistant":
		if len(m.ToolCalls) > 0 {
			return rollout.KindToolCall, toolNames(m.ToolCalls), rollout.StatusNone
		}
		return rollout.KindAssistant, "", rollout.StatusNone
	}
	name := m.Name
	for j := i - 1; j >= 0 && name == ""; j-- {
		for _, tc := range msgs[j].ToolCalls {
			if tc.ID != "" && tc.ID == m.ToolCallID {
				name = tc.Function.Name
			}
		}
	}
	return rollout.KindToolResult, name, rollout.ToolStatus(m.Status)
}

// toolNames joins the called tools' names with commas.
func toolNames(calls []ToolCall) string {
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.Function.Name
	}
	return strings.Join(names, ",")
}

// toolDefs decodes the request's tool definitions for the template.
func toolDefs(raw []json.RawMessage) ([]any, *apiError) {
	out := make([]any, len(raw))
	for i, r := range raw {
		var t struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(r, &t); err != nil || t.Function.Name == "" {
			return nil, badRequest("", "tools[%d]: want {\"type\": \"function\", \"function\": {\"name\": …}}", i)
		}
		var v any
		json.Unmarshal(r, &v)
		out[i] = v
	}
	return out, nil
}
