package memory_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/engram-memory-server/engram/clients/go/memory"
)

func TestConversationContextOptions(t *testing.T) {
	ctx := testCtx(t)
	c := memory.New(mainServer.URL)
	id := uniq(t, "ctx")
	must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: "a", UserID: "u"}))
	events := []memory.EventInput{{EventType: "system", Content: "You are terse."}}
	for i := 0; i < 8; i++ {
		events = append(events, memory.EventInput{EventType: "user_message", Content: "a message padded with a few more words"})
	}
	events = append(events,
		memory.EventInput{EventType: "document", Content: "Paris has the Louvre.", Metadata: map[string]any{"section": "documents"}},
		memory.EventInput{EventType: "document", Content: "Bees dance.", Metadata: map[string]any{"section": "documents"}},
	)
	must[[]memory.Event](t)(c.AddEvents(ctx, id, events))

	full := must[*memory.ConversationContext](t)(c.BuildConversationContext(ctx, id, 0, memory.WithTokenBudget(100000)))
	if full.EventsIncluded != 11 || full.Tokenizer != "o200k_base" || full.TokensUsed == 0 || len(full.Sections) != 3 {
		t.Fatalf("full context: %+v", full)
	}

	tight := must[*memory.ConversationContext](t)(c.BuildConversationContext(ctx, id, 0, memory.WithTokenBudget(40), memory.WithTokenizer("chars4")))
	if tight.Tokenizer != "chars4" || tight.TokensUsed > 40 || tight.Messages[0].Content != "You are terse." || tight.EventsDropped == 0 {
		t.Fatalf("tight context: %+v", tight)
	}
	noSystem := must[*memory.ConversationContext](t)(c.BuildConversationContext(ctx, id, 0,
		memory.WithTokenBudget(40), memory.WithTokenizer("chars4"), memory.WithPreserveSystem(false)))
	for _, m := range noSystem.Messages {
		if m.Content == "You are terse." {
			t.Fatalf("system kept with WithPreserveSystem(false): %+v", noSystem)
		}
	}

	ranked := must[*memory.ConversationContext](t)(c.BuildConversationContext(ctx, id, 0,
		memory.WithQuery("Louvre"), memory.WithRetrievalThreshold(1), memory.WithTokenizer("chars4"),
		memory.WithSectionBudget("documents", 12), memory.WithSectionPriority("documents", "messages")))
	if !ranked.RetrievalUsed || ranked.Sections[1].Name != "documents" || !ranked.Sections[1].RetrievalUsed || ranked.Sections[1].EventsIncluded != 1 {
		t.Fatalf("ranked context: %+v", ranked)
	}
	for _, m := range ranked.Messages {
		if strings.HasPrefix(m.Content, "[document]") && m.Content != "[document] Paris has the Louvre." {
			t.Fatalf("BM25 chose %q", m.Content)
		}
	}

	_, err := c.BuildConversationContext(ctx, id, 0, memory.WithTokenizer("nope"))
	wantCode(t, err, connect.CodeInvalidArgument)
	if !strings.HasPrefix(err.(*connect.Error).Message(), "tokenizer") {
		t.Fatalf("error does not name the field: %v", err)
	}
}

func TestConversationContextSummariesAndImages(t *testing.T) {
	ctx := testCtx(t)
	c := memory.New(mainServer.URL)
	id := uniq(t, "parts")
	must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: "a", UserID: "u"}))
	must[[]memory.Event](t)(c.AddEvents(ctx, id, []memory.EventInput{
		{EventType: "user_message", Content: "hi"},
		{EventType: "agent_response", Content: "hello"},
		{EventType: "summary", Content: "Greetings were exchanged.", Metadata: map[string]any{"covers": map[string]any{"from_seq": 1, "to_seq": 2}}},
		{EventType: "user_message", Content: []any{
			map[string]any{"type": "text", "text": "What is this?"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.test/a.png", "detail": "low"}},
		}},
	}))
	cc := must[*memory.ConversationContext](t)(c.BuildConversationContext(ctx, id, 0, memory.WithTokenBudget(10000)))
	if cc.EventsSummarized != 2 || len(cc.Messages) != 2 || cc.Messages[0].Content != "[Summary of events 1-2] Greetings were exchanged." {
		t.Fatalf("summary: %+v", cc)
	}
	img := cc.Messages[1]
	if img.Content != "What is this?" || len(img.ContentParts) != 2 || img.ContentParts[1].Type != "image_url" ||
		img.ContentParts[1].ImageURL == nil || img.ContentParts[1].ImageURL.URL != "https://example.test/a.png" || img.ContentParts[1].ImageURL.Detail != "low" {
		t.Fatalf("image message: %+v", img)
	}
}
