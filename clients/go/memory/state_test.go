package memory_test

import (
	"reflect"
	"testing"

	"connectrpc.com/connect"

	"github.com/engram-memory-server/engram/clients/go/memory"
)

func TestSessionState(t *testing.T) {
	ctx := testCtx(t)
	c := memory.New(mainServer.URL)
	app := uniq(t, "app")
	id := uniq(t, "s")
	must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: app, UserID: "ada"}))

	ev := must[memory.Event](t)(c.AddEvent(ctx, id, memory.EventInput{
		EventType:  "agent_response",
		StateDelta: map[string]any{"topic": "cats", "user:lang": "en", "temp:x": 1},
	}))
	if want := map[string]any{"topic": "cats", "user:lang": "en"}; !reflect.DeepEqual(ev.StateDelta, want) {
		t.Fatalf("event delta: %v, want %v", ev.StateDelta, want)
	}
	plain := must[memory.Event](t)(c.AddEvent(ctx, id, memory.EventInput{EventType: "user_message"}))
	if plain.StateDelta != nil {
		t.Fatalf("an event without a delta has one: %v", plain.StateDelta)
	}
	must[[]memory.Event](t)(c.AddEvents(ctx, id, []memory.EventInput{{EventType: "agent_response", StateDelta: map[string]any{"app:motd": "hi", "topic": nil}}}))

	s := must[*memory.Session](t)(c.GetSession(ctx, id))
	if want := map[string]any{"user:lang": "en", "app:motd": "hi"}; !reflect.DeepEqual(s.State, want) || s.Version != 2 {
		t.Fatalf("merged state: %v (version %d), want %v (version 2)", s.State, s.Version, want)
	}

	v := uint64(2)
	updated := must[*memory.Session](t)(c.UpdateSession(ctx, id, memory.UpdateSessionParams{
		Metadata: map[string]any{"title": "t"}, StateDelta: map[string]any{"step": 1}, ExpectedVersion: &v,
	}))
	if updated.Version != 3 || updated.Metadata["title"] != "t" || updated.State["step"] != 1.0 {
		t.Fatalf("updated session: %+v", updated)
	}
	_, err := c.UpdateSession(ctx, id, memory.UpdateSessionParams{StateDelta: map[string]any{"step": 2}, ExpectedVersion: &v})
	wantCode(t, err, connect.CodeFailedPrecondition)
	if current, ok := memory.CurrentVersion(err); !ok || current != 3 {
		t.Fatalf("CurrentVersion: %d, %v", current, ok)
	}
}

func TestStateRemovalsAndNullValues(t *testing.T) {
	ctx := testCtx(t)
	c := memory.New(mainServer.URL)
	id := uniq(t, "s")
	must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: uniq(t, "app"), UserID: "ada"}))

	ev := must[memory.Event](t)(c.AddEvent(ctx, id, memory.EventInput{
		EventType:           "agent_response",
		StateDelta:          map[string]any{"kept": nil, "gone": 1},
		StateNullsAreValues: true,
	}))
	if !ev.StateNullsAreValues {
		t.Fatalf("the event lost StateNullsAreValues: %+v", ev)
	}
	ev = must[memory.Event](t)(c.AddEvent(ctx, id, memory.EventInput{EventType: "agent_response", StateRemovals: []string{"gone"}}))
	if !reflect.DeepEqual(ev.StateRemovals, []string{"gone"}) {
		t.Fatalf("event removals: %v", ev.StateRemovals)
	}
	s := must[*memory.Session](t)(c.UpdateSession(ctx, id, memory.UpdateSessionParams{
		StateDelta: map[string]any{"also": nil}, StateNullsAreValues: true,
	}))
	if want := map[string]any{"kept": nil, "also": nil}; !reflect.DeepEqual(s.State, want) {
		t.Fatalf("state: %v, want %v", s.State, want)
	}
}
