package memory

import (
	"context"

	engramv1 "github.com/engram-memory-server/engram/clients/go/gen/engram/v1"
)

// ChatMessage is one message in the OpenAI chat shape.
type ChatMessage struct {
	Role       string     `json:"role"` // system, user, assistant or tool
	Content    string     `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	// ContentParts is set only on messages that carry images: the text part,
	// then the images. Send it as the content to a vision model.
	ContentParts []ContentPart `json:"content_parts,omitempty"`
}

// ContentPart is one part of a multi-part message (OpenAI shape): Type is
// "text" (Text set) or "image_url" (ImageURL set).
type ContentPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *ImageURL `json:"image_url,omitempty"`
}

// ImageURL references an image by URL (https: or data:).
type ImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"` // auto, low or high; empty when not given
}

// ContextSection is what one section contributed to a context.
type ContextSection struct {
	Name           string
	TokensUsed     uint32
	EventsIncluded uint32
	EventsDropped  uint32
	RetrievalUsed  bool // chosen by BM25 relevance to the query
}

// ConversationContext is the context for a session's next model call.
type ConversationContext struct {
	Text             string // "User: ...\nAssistant: ..." lines
	Messages         []ChatMessage
	EventsIncluded   uint32
	EventsDropped    uint32
	EventsSummarized uint32 // events a summary in the context stands in for
	TokensUsed       uint32 // counted by Tokenizer
	RetrievalUsed    bool   // a section was ranked by relevance to the query
	Tokenizer        string // o200k_base, cl100k_base or chars4 (also the fallback)
	Sections         []ContextSection
}

// ContextOption configures BuildConversationContext.
type ContextOption func(*contextConfig)

// contextConfig is the request being built (kept private so the generated type stays out of the API).
type contextConfig struct {
	req *engramv1.BuildConversationContextRequest
}

// WithTokenBudget caps the tokens of the messages. With maxEvents 0 the
// server then chooses from the newest 1000 events.
func WithTokenBudget(tokens uint32) ContextOption {
	return func(c *contextConfig) { c.req.TokenBudget = tokens }
}

// WithQuery ranks sections holding more than the retrieval threshold items
// by BM25 relevance to query instead of recency.
func WithQuery(query string) ContextOption {
	return func(c *contextConfig) { c.req.Query = query }
}

// WithTokenizer names the tokenizer: "o200k_base" (default), "cl100k_base" or "chars4".
func WithTokenizer(name string) ContextOption {
	return func(c *contextConfig) { c.req.Tokenizer = name }
}

// WithPreserveSystem keeps system events first (the server's default) or,
// with false, lets them compete by recency like any other event.
func WithPreserveSystem(preserve bool) ContextOption {
	return func(c *contextConfig) { c.req.PreserveSystem = &preserve }
}

// WithSectionBudget caps the tokens of one section (metadata.section).
func WithSectionBudget(section string, tokens uint32) ContextOption {
	return func(c *contextConfig) {
		if c.req.SectionBudgets == nil {
			c.req.SectionBudgets = map[string]uint32{}
		}
		c.req.SectionBudgets[section] = tokens
	}
}

// WithSectionPriority orders sections from highest to lowest priority; the
// lowest are trimmed first.
func WithSectionPriority(sections ...string) ContextOption {
	return func(c *contextConfig) { c.req.SectionPriority = sections }
}

// WithRetrievalThreshold ranks a section by relevance once it holds more
// than n items (the server's default is 20).
func WithRetrievalThreshold(n uint32) ContextOption {
	return func(c *contextConfig) { c.req.RetrievalThreshold = &n }
}

// BuildConversationContext assembles the newest maxEvents events (the
// server's default when 0), or what fits the budgets given as options, as
// text and chat messages.
func (c *Client) BuildConversationContext(ctx context.Context, sessionID string, maxEvents uint32, opts ...ContextOption) (*ConversationContext, error) {
	req := &engramv1.BuildConversationContextRequest{SessionId: sessionID, MaxEvents: maxEvents}
	cfg := contextConfig{req: req}
	for _, o := range opts {
		o(&cfg)
	}
	res, err := retried(ctx, c, c.rpc.BuildConversationContext, req)
	if err != nil {
		return nil, err
	}
	return fromContext(res.Msg), nil
}

// fromContext converts a context as the server built it (also Recall's part).
func fromContext(msg *engramv1.BuildConversationContextResponse) *ConversationContext {
	out := &ConversationContext{
		Text:             msg.GetText(),
		EventsIncluded:   msg.GetEventsIncluded(),
		EventsDropped:    msg.GetEventsDropped(),
		EventsSummarized: msg.GetEventsSummarized(),
		TokensUsed:       msg.GetTokensUsed(),
		RetrievalUsed:    msg.GetRetrievalUsed(),
		Tokenizer:        msg.GetTokenizer(),
	}
	for _, s := range msg.GetSections() {
		out.Sections = append(out.Sections, ContextSection{
			Name: s.GetName(), TokensUsed: s.GetTokensUsed(), EventsIncluded: s.GetEventsIncluded(),
			EventsDropped: s.GetEventsDropped(), RetrievalUsed: s.GetRetrievalUsed(),
		})
	}
	for _, m := range msg.GetMessages() {
		cm := ChatMessage{Role: m.GetRole(), Content: m.GetContent(), Name: m.GetName(), ToolCallID: m.GetToolCallId()}
		for _, tc := range m.GetToolCalls() {
			cm.ToolCalls = append(cm.ToolCalls, ToolCall{
				ID: tc.GetId(), Type: tc.GetType(),
				Name: tc.GetFunction().GetName(), Arguments: tc.GetFunction().GetArguments(),
			})
		}
		for _, p := range m.GetContentParts() {
			part := ContentPart{Type: p.GetType(), Text: p.GetText()}
			if p.GetImageUrl() != nil {
				part.ImageURL = &ImageURL{URL: p.GetImageUrl().GetUrl(), Detail: p.GetImageUrl().GetDetail()}
			}
			cm.ContentParts = append(cm.ContentParts, part)
		}
		out.Messages = append(out.Messages, cm)
	}
	return out
}
