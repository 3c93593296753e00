package main

import (
	"context"
	"fmt"
	"log"

	"github.com/engram-memory-server/engram/clients/go/memory"
)

func main() {
	ctx := context.Background()
	c := memory.New("http://127.0.0.1:8000")
	const app = "readme-memories-go"
	// Alice's drink, then a newer one under the same key: the first stops
	// holding (it is kept, not deleted).
	for _, m := range []memory.Memory{
		{MemoryID: "drink-1", AppName: app, UserID: "alice", Key: "drink", Text: "Alice drinks coffee"},
		{MemoryID: "drink-2", AppName: app, UserID: "alice", Key: "drink", Text: "Alice switched to green tea"},
		{MemoryID: "hours", AppName: app, Text: "The shop opens at nine", Pinned: true},
	} {
		if _, err := c.WriteMemories(ctx, []memory.Memory{m}); err != nil {
			log.Fatal(err)
		}
	}
	alice := memory.Scope{AppName: app, UserID: "alice"}

	// What alice may recall: hers and the app-wide memories, best first.
	found, err := c.SearchMemories(ctx, memory.SearchMemoriesParams{
		MemoryFilter: memory.MemoryFilter{Scope: alice}, Query: "what does alice drink", TopK: 5,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range found {
		fmt.Println("found", r.Memory.MemoryID, r.Memory.Text)
	}
	// Every version of her memories, newest first, page by page.
	for m, err := range c.Memories(ctx, memory.ListMemoriesParams{MemoryFilter: memory.MemoryFilter{Scope: alice, IncludeInvalid: true}}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("listed", m.MemoryID, "holds:", m.Valid())
	}

	// Everything her agent should know in a session, within 1000 tokens.
	s, _, err := c.GetOrCreateSession(ctx, memory.GetOrCreateSessionParams{SessionID: "readme-memories-go-chat", AppName: app, UserID: "alice"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.AddEvent(ctx, s.SessionID, memory.EventInput{EventType: "user_message", Content: "Can I order a drink?"}); err != nil {
		log.Fatal(err)
	}
	r, err := c.Recall(ctx, s.SessionID, memory.RecallParams{Query: "order a drink", TokenBudget: 1000})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Text)
	fmt.Println("tokens", r.TokensUsed, "of 1000")

	forgot, err := c.DeleteMemories(ctx, memory.DeleteMemoriesParams{Scope: alice})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("forgot", forgot)
}
