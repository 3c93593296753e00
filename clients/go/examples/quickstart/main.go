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
	s, err := c.CreateSession(ctx, memory.CreateSessionParams{AppName: "my-agent", UserID: "alice"})
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.AddEvents(ctx, s.SessionID, []memory.EventInput{
		{EventType: "user_message", Content: "What is the capital of France?"},
		{EventType: "agent_response", Content: "Paris."},
	})
	if err != nil {
		log.Fatal(err)
	}
	for ev, err := range c.SessionEvents(ctx, s.SessionID, memory.GetEventsParams{}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.Seq, ev.EventType, ev.Content)
	}
	cc, err := c.BuildConversationContext(ctx, s.SessionID, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cc.Text)
}
