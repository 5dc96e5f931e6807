package gateway

import (
	"fmt"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
)

// ChatTemplate is a model directory's own chat template as the gateway renders it,
// for callers that build conversations themselves and must tokenize them as a
// served model sees them (experiments/efficacy's real-model probe).
type ChatTemplate struct{ t *chatTemplate }

// ChatTurn is one message of a plain-text conversation: a role (system, user,
// assistant, tool, or any role the template accepts) and its content.
type ChatTurn struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// LoadChatTemplate reads the chat template of model directory dir as the gateway does
// (chat_template.jinja, else tokenizer_config.json's chat_template, else the byte
// tokenizer's BytesChatTemplate).
func LoadChatTemplate(dir string, tok tokenizer.Tokenizer) (*ChatTemplate, error) {
	t, err := loadTemplate(dir, tok)
	if err != nil {
		return nil, err
	}
	return &ChatTemplate{t: t}, nil
}

// Source is where the template came from (a file name or tokenizer.BytesChatTemplate).
func (c *ChatTemplate) Source() string { return c.t.source }

// StopTokens are the template's turn-end tokens that the tokenizer has as special
// tokens (eos_token first): sampling stops at them.
func (c *ChatTemplate) StopTokens() []string { return append([]string(nil), c.t.stopTokens...) }

// Render renders turns as transformers' apply_chat_template(turns, tokenize=False,
// add_generation_prompt=addGenerationPrompt) does.
func (c *ChatTemplate) Render(turns []ChatTurn, addGenerationPrompt bool) (string, error) {
	msgs := make([]chatMessage, len(turns))
	for i, t := range turns {
		if t.Role == "" {
			return "", fmt.Errorf("render chat template: turn %d: empty role", i)
		}
		msgs[i] = chatMessage{Role: t.Role, Content: t.Content, Status: -1}
	}
	return c.t.render(msgs, nil, addGenerationPrompt)
}
