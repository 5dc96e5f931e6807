package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ardanlabs/jinja"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
)

// chatTemplate is a model's own chat template (Jinja), compiled once.
type chatTemplate struct {
	tmpl       *jinja.Template
	bos, eos   string
	source     string // where it came from, for logs
	stopTokens []string
}

// loadTemplate reads the chat template of the model directory dir:
// chat_template.jinja (transformers ≥ 4.43), else tokenizer_config.json's
// chat_template (a string, or the entry named "default" of a list); the byte
// tokenizer's model without either gets tokenizer.BytesChatTemplate.
func loadTemplate(dir string, tok tokenizer.Tokenizer) (*chatTemplate, error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err == nil {
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, fmt.Errorf("read chat template: tokenizer_config.json: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read chat template: %w", err)
	}
	src, from := "", ""
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		src, from = string(b), "chat_template.jinja"
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read chat template: %w", err)
	} else if len(cfg.ChatTemplate) > 0 && string(cfg.ChatTemplate) != "null" {
		from = "tokenizer_config.json"
		if err := json.Unmarshal(cfg.ChatTemplate, &src); err != nil {
			var named []struct{ Name, Template string }
			if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil {
				return nil, fmt.Errorf("read chat template: tokenizer_config.json chat_template: want a string or a list of {name, template}")
			}
			for _, n := range named {
				if n.Name == "default" {
					src = n.Template
				}
			}
		}
	}
	if src == "" {
		if tok.Fingerprint() != tokenizer.BytesFingerprint {
			return nil, fmt.Errorf("read chat template: %s has no chat_template.jinja and no chat_template in tokenizer_config.json", dir)
		}
		src, from = tokenizer.BytesChatTemplate, "tokenizer.BytesChatTemplate"
	}
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("compile chat template from %s: %w", from, err)
	}
	ct := &chatTemplate{tmpl: t, bos: specialContent(cfg.BOS), eos: specialContent(cfg.EOS), source: from}
	for _, s := range []string{ct.eos, "<|end|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<end_of_turn>"} {
		if _, ok := tok.SpecialID(s); ok && s != "" {
			ct.stopTokens = append(ct.stopTokens, s)
		}
	}
	return ct, nil
}

// specialContent reads a tokenizer_config.json special token: a string or
// {"content": …}.
func specialContent(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
	}
	json.Unmarshal(raw, &o)
	return o.Content
}

// render renders msgs (with tools, the request's tool definitions) as the model's
// template does for transformers' apply_chat_template.
func (c *chatTemplate) render(msgs []chatMessage, tools []any, addGenerationPrompt bool) (string, error) {
	ms := make([]any, len(msgs))
	for i, m := range msgs {
		ms[i] = m.templateValue()
	}
	data := map[string]any{
		"messages":              ms,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             c.bos,
		"eos_token":             c.eos,
	}
	if len(tools) > 0 {
		data["tools"] = tools
	}
	out, err := c.tmpl.Render(data)
	if err != nil {
		return "", fmt.Errorf("render chat template: %w", err)
	}
	return out, nil
}
