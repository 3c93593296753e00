package memory_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/engram-memory-server/engram/clients/go/internal/testserver"
	"github.com/engram-memory-server/engram/clients/go/memory"
)

var (
	mainServer  *testserver.Server // default limits
	smallServer *testserver.Server // MEMORY_MAX_SESSION_EVENTS=5
)

func TestMain(m *testing.M) {
	var wg sync.WaitGroup
	var errMain, errSmall error
	wg.Add(2)
	go func() { defer wg.Done(); mainServer, errMain = testserver.Start(0) }()
	go func() {
		defer wg.Done()
		smallServer, errSmall = testserver.Start(0, "MEMORY_MAX_SESSION_EVENTS=5")
	}()
	wg.Wait()
	code := 1
	if err := errors.Join(errMain, errSmall); err != nil {
		fmt.Fprintln(os.Stderr, "starting test servers:", err)
	} else {
		code = m.Run()
	}
	mainServer.Stop()
	smallServer.Stop()
	os.Exit(code)
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// uniq returns an id unique to this test run.
func uniq(t *testing.T, prefix string) string {
	return fmt.Sprintf("%s-%s-%d", prefix, t.Name(), time.Now().UnixNano())
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("want %v error, got nil", code)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("want *connect.Error with %v, got %T: %v", code, err, err)
	}
	if ce.Code() != code {
		t.Fatalf("want %v, got %v: %v", code, ce.Code(), err)
	}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestSessions(t *testing.T) {
	ctx := testCtx(t)
	c := memory.New(mainServer.URL)
	app := uniq(t, "app")

	gen := must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{AppName: app, UserID: "u1"}))
	if gen.SessionID == "" || gen.AppName != app || gen.UserID != "u1" {
		t.Fatalf("generated session: %+v", gen)
	}
	if gen.HeadSeq != 0 || gen.FirstSeq != 1 || gen.EventCount != 0 || gen.CreatedAt.IsZero() {
		t.Fatalf("new session counters: %+v", gen)
	}

	id := uniq(t, "s")
	s := must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{
		SessionID: id, AppName: app, UserID: "u2", Metadata: map[string]any{"team": "blue", "n": 3},
	}))
	if s.SessionID != id || s.Metadata["team"] != "blue" || s.Metadata["n"] != 3.0 {
		t.Fatalf("created session: %+v", s)
	}

	_, err := c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: app, UserID: "u2"})
	wantCode(t, err, connect.CodeAlreadyExists)
	_, err = c.CreateSession(ctx, memory.CreateSessionParams{AppName: "", UserID: "u"})
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = c.CreateSession(ctx, memory.CreateSessionParams{SessionID: "has space", AppName: app, UserID: "u"})
	wantCode(t, err, connect.CodeInvalidArgument)

	got := must[*memory.Session](t)(c.GetSession(ctx, id))
	if got.SessionID != id || got.UserID != "u2" {
		t.Fatalf("GetSession: %+v", got)
	}
	_, err = c.GetSession(ctx, uniq(t, "missing"))
	wantCode(t, err, connect.CodeNotFound)
	if !memory.IsNotFound(err) {
		t.Fatal("IsNotFound")
	}

	goc := uniq(t, "goc")
	s1, created, err := c.GetOrCreateSession(ctx, memory.GetOrCreateSessionParams{SessionID: goc, AppName: app})
	if err != nil || !created || s1.UserID != "user" {
		t.Fatalf("GetOrCreateSession first: %+v %v %v", s1, created, err)
	}
	s2, created, err := c.GetOrCreateSession(ctx, memory.GetOrCreateSessionParams{SessionID: goc, AppName: app, UserID: "other"})
	if err != nil || created || s2.UserID != "user" {
		t.Fatalf("GetOrCreateSession second: %+v %v %v", s2, created, err)
	}

	// Concurrent callers observe exactly one creation.
	race := uniq(t, "race")
	var wg sync.WaitGroup
	createdCount := make(chan bool, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, created, err := c.GetOrCreateSession(ctx, memory.GetOrCreateSessionParams{SessionID: race, AppName: app + "-race"})
			if err != nil {
				t.Error(err)
			}
			createdCount <- created
		}()
	}
	wg.Wait()
	close(createdCount)
	n := 0
	for created := range createdCount {
		if created {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d concurrent GetOrCreateSession calls reported created", n)
	}

	// Paging: 3 sessions of this app, pages of 2.
	page := must[*memory.SessionPage](t)(c.ListSessions(ctx, memory.ListSessionsParams{AppName: app, PageSize: 2}))
	if len(page.Sessions) != 2 || page.NextPageToken == "" {
		t.Fatalf("first page: %d sessions, token %q", len(page.Sessions), page.NextPageToken)
	}
	page2 := must[*memory.SessionPage](t)(c.ListSessions(ctx, memory.ListSessionsParams{AppName: app, PageSize: 2, PageToken: page.NextPageToken}))
	if len(page2.Sessions) != 1 || page2.NextPageToken != "" {
		t.Fatalf("second page: %d sessions, token %q", len(page2.Sessions), page2.NextPageToken)
	}
	var ids []string
	for s, err := range c.Sessions(ctx, memory.ListSessionsParams{AppName: app, PageSize: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.SessionID)
	}
	if len(ids) != 3 {
		t.Fatalf("Sessions iterator: %v", ids)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i-1] >= ids[i] {
			t.Fatalf("sessions not in session_id order: %v", ids)
		}
	}
	byUser := must[*memory.SessionPage](t)(c.ListSessions(ctx, memory.ListSessionsParams{AppName: app, UserID: "u2"}))
	if len(byUser.Sessions) != 1 || byUser.Sessions[0].SessionID != id {
		t.Fatalf("user filter: %+v", byUser.Sessions)
	}
	_, err = c.ListSessions(ctx, memory.ListSessionsParams{PageSize: 5000})
	wantCode(t, err, connect.CodeInvalidArgument)

	if deleted := must[bool](t)(c.DeleteSession(ctx, id)); !deleted {
		t.Fatal("DeleteSession: not deleted")
	}
	if deleted := must[bool](t)(c.DeleteSession(ctx, id)); deleted {
		t.Fatal("DeleteSession twice: deleted")
	}
	_, err = c.GetSession(ctx, id)
	wantCode(t, err, connect.CodeNotFound)
}

type toolArgs struct {
	City string `json:"city"`
}

func TestEvents(t *testing.T) {
	ctx := testCtx(t)
	c := memory.New(mainServer.URL)
	id := uniq(t, "s")
	must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: "a", UserID: "u"}))

	ts := time.Date(2024, 5, 6, 7, 8, 9, 123000000, time.UTC)
	in1 := memory.EventInput{
		EventID: "e1", EventType: "user_message", Content: "hello",
		Metadata: map[string]any{"trace": "t1"}, Timestamp: ts,
	}
	e1 := must[memory.Event](t)(c.AddEvent(ctx, id, in1))
	if e1.Seq != 1 || e1.EventID != "e1" || e1.Content != "hello" || e1.Metadata["trace"] != "t1" || !e1.Timestamp.Equal(ts) || e1.SessionID != id {
		t.Fatalf("AddEvent: %+v", e1)
	}

	// Idempotent retry: same event id, same stored event, no new seq.
	again := must[memory.Event](t)(c.AddEvent(ctx, id, in1))
	if again.Seq != 1 || again.EventID != "e1" || !again.Timestamp.Equal(ts) {
		t.Fatalf("retry: %+v", again)
	}
	// The same id with different content is a conflict, not a retry.
	_, err := c.AddEvent(ctx, id, memory.EventInput{EventID: "e1", EventType: "user_message", Content: "other"})
	wantCode(t, err, connect.CodeAlreadyExists)

	// Content of several Go shapes.
	e2 := must[memory.Event](t)(c.AddEvent(ctx, id, memory.EventInput{EventType: "tool_call", Content: map[string]any{"tool": "weather", "tool_call_id": "c1", "arguments": toolArgs{City: "Oslo"}}}, memory.ExpectSeq(1)))
	if e2.Seq != 2 || e2.EventID == "" {
		t.Fatalf("server-generated id / seq: %+v", e2)
	}
	args := e2.Content.(map[string]any)["arguments"].(map[string]any)
	if args["city"] != "Oslo" {
		t.Fatalf("struct content: %#v", e2.Content)
	}
	e3 := must[memory.Event](t)(c.AddEvent(ctx, id, memory.EventInput{EventType: "tool_result", Content: json.RawMessage(`{"tool_call_id":"c1","result":{"temp":[1,2.5,null]}}`)}))
	if r := e3.Content.(map[string]any)["result"].(map[string]any)["temp"].([]any); len(r) != 3 || r[1] != 2.5 || r[2] != nil {
		t.Fatalf("raw JSON content: %#v", e3.Content)
	}
	e4 := must[memory.Event](t)(c.AddEvent(ctx, id, memory.EventInput{EventType: "agent_response", Content: nil}))
	if e4.Content != nil || e4.Seq != 4 {
		t.Fatalf("null content: %+v", e4)
	}

	// Optimistic concurrency.
	_, err = c.AddEvent(ctx, id, memory.EventInput{EventType: "user_message", Content: "x"}, memory.ExpectSeq(2))
	wantCode(t, err, connect.CodeFailedPrecondition)
	if cur, ok := memory.CurrentSeq(err); !ok || cur != 4 {
		t.Fatalf("CurrentSeq: %d %v (%v)", cur, ok, err)
	}
	if !memory.IsConflict(err) {
		t.Fatal("IsConflict")
	}
	if _, ok := memory.CurrentSeq(errors.New("plain")); ok {
		t.Fatal("CurrentSeq of a plain error")
	}

	batch := must[[]memory.Event](t)(c.AddEvents(ctx, id, []memory.EventInput{
		{EventID: "b1", EventType: "user_message", Content: map[string]any{"text": "what is the weather?"}},
		{EventID: "b2", EventType: "agent_response", Content: "sunny"},
		{EventID: "b3", EventType: "custom.kind", Content: []string{"x", "y"}},
	}, memory.ExpectSeq(4)))
	if len(batch) != 3 || batch[0].Seq != 5 || batch[2].Seq != 7 {
		t.Fatalf("AddEvents: %+v", batch)
	}
	// Idempotent batch retry returns the originals.
	retry := must[[]memory.Event](t)(c.AddEvents(ctx, id, []memory.EventInput{
		{EventID: "b1", EventType: "user_message", Content: map[string]any{"text": "what is the weather?"}},
		{EventID: "b2", EventType: "agent_response", Content: "sunny"},
		{EventID: "b3", EventType: "custom.kind", Content: []string{"x", "y"}},
	}))
	if len(retry) != 3 || retry[0].Seq != 5 || retry[2].Seq != 7 {
		t.Fatalf("AddEvents retry: %+v", retry)
	}
	_, err = c.AddEvents(ctx, id, []memory.EventInput{{EventType: "user_message"}}, memory.ExpectSeq(0))
	wantCode(t, err, connect.CodeFailedPrecondition)
	if cur, ok := memory.CurrentSeq(err); !ok || cur != 7 {
		t.Fatalf("CurrentSeq after batch: %d %v", cur, ok)
	}
	_, err = c.AddEvents(ctx, id, nil)
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = c.AddEvent(ctx, id, memory.EventInput{EventType: "9bad"})
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = c.AddEvent(ctx, uniq(t, "missing"), memory.EventInput{EventType: "user_message"})
	wantCode(t, err, connect.CodeNotFound)

	// Reads.
	all := must[*memory.EventPage](t)(c.GetSessionEvents(ctx, id, memory.GetEventsParams{}))
	if len(all.Events) != 7 || all.HeadSeq != 7 {
		t.Fatalf("GetSessionEvents: %d events, head %d", len(all.Events), all.HeadSeq)
	}
	for i, e := range all.Events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
	users := must[*memory.EventPage](t)(c.GetSessionEvents(ctx, id, memory.GetEventsParams{EventTypes: []string{"user_message"}}))
	if len(users.Events) != 2 || users.Events[1].Seq != 5 {
		t.Fatalf("type filter: %+v", users.Events)
	}
	after := must[*memory.EventPage](t)(c.GetSessionEvents(ctx, id, memory.GetEventsParams{AfterSeq: memory.After(5), Limit: 1}))
	if len(after.Events) != 1 || after.Events[0].Seq != 6 || after.NextPageToken == "" {
		t.Fatalf("after_seq+limit: %+v %q", after.Events, after.NextPageToken)
	}
	next := must[*memory.EventPage](t)(c.GetSessionEvents(ctx, id, memory.GetEventsParams{PageToken: after.NextPageToken, Limit: 5}))
	if len(next.Events) != 1 || next.Events[0].Seq != 7 {
		t.Fatalf("page token: %+v", next.Events)
	}
	tail := must[*memory.EventPage](t)(c.GetSessionEvents(ctx, id, memory.GetEventsParams{Tail: 2}))
	if len(tail.Events) != 2 || tail.Events[0].Seq != 6 || tail.Events[1].Seq != 7 {
		t.Fatalf("tail: %+v", tail.Events)
	}
	_, err = c.GetSessionEvents(ctx, id, memory.GetEventsParams{Tail: 2, AfterSeq: memory.After(1)})
	wantCode(t, err, connect.CodeInvalidArgument)
	var seqs []uint64
	for e, err := range c.SessionEvents(ctx, id, memory.GetEventsParams{Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, e.Seq)
	}
	if fmt.Sprint(seqs) != "[1 2 3 4 5 6 7]" {
		t.Fatalf("SessionEvents iterator: %v", seqs)
	}

	recent := must[[]memory.Event](t)(c.ListEvents(ctx, id, 3))
	if len(recent) != 3 || recent[0].Seq != 5 || recent[2].Seq != 7 {
		t.Fatalf("ListEvents: %+v", recent)
	}
	global := must[[]memory.Event](t)(c.ListEvents(ctx, "", 1000))
	found := false
	for _, e := range global {
		found = found || (e.SessionID == id && e.EventID == "b3")
	}
	if !found {
		t.Fatal("ListEvents over all sessions misses the newest event")
	}

	sess := must[*memory.Session](t)(c.GetSession(ctx, id))
	if sess.HeadSeq != 7 || sess.EventCount != 7 || sess.FirstSeq != 1 {
		t.Fatalf("session counters: %+v", sess)
	}
}

func TestConversationContextStatsCleanup(t *testing.T) {
	ctx := testCtx(t)
	c := memory.New(mainServer.URL)
	id := uniq(t, "s")
	must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: "a", UserID: "u"}))
	must[[]memory.Event](t)(c.AddEvents(ctx, id, []memory.EventInput{
		{EventType: "user_message", Content: "weather in Oslo?"},
		{EventType: "tool_call", Content: map[string]any{"tool": "weather", "tool_call_id": "c1", "arguments": map[string]any{"city": "Oslo"}}},
		{EventType: "tool_result", Content: map[string]any{"tool": "weather", "tool_call_id": "c1", "result": "sunny"}},
		{EventType: "agent_response", Content: "It is sunny."},
	}))
	cc := must[*memory.ConversationContext](t)(c.BuildConversationContext(ctx, id, 10))
	if cc.EventsIncluded != 4 || cc.EventsDropped != 0 || len(cc.Messages) != 4 {
		t.Fatalf("context: %+v", cc)
	}
	m := cc.Messages
	if m[0].Role != "user" || m[0].Content != "weather in Oslo?" {
		t.Fatalf("user message: %+v", m[0])
	}
	if m[1].Role != "assistant" || len(m[1].ToolCalls) != 1 || m[1].ToolCalls[0].ID != "c1" || m[1].ToolCalls[0].Name != "weather" || m[1].ToolCalls[0].Type != "function" {
		t.Fatalf("tool call: %+v", m[1])
	}
	var a map[string]any
	if err := json.Unmarshal([]byte(m[1].ToolCalls[0].Arguments), &a); err != nil || a["city"] != "Oslo" {
		t.Fatalf("tool arguments %q: %v", m[1].ToolCalls[0].Arguments, err)
	}
	if m[2].Role != "tool" || m[2].ToolCallID != "c1" || m[2].Content != "sunny" {
		t.Fatalf("tool result: %+v", m[2])
	}
	if m[3].Role != "assistant" || m[3].Content != "It is sunny." {
		t.Fatalf("assistant: %+v", m[3])
	}
	if cc.Text == "" {
		t.Fatal("empty context text")
	}
	short := must[*memory.ConversationContext](t)(c.BuildConversationContext(ctx, id, 1))
	if short.EventsIncluded != 1 || len(short.Messages) != 1 {
		t.Fatalf("max_events 1: %+v", short)
	}
	_, err := c.BuildConversationContext(ctx, uniq(t, "missing"), 0)
	wantCode(t, err, connect.CodeNotFound)

	st := must[*memory.Stats](t)(c.Stats(ctx))
	if st.TotalSessions < 1 || st.TotalEvents < 4 || st.Backend != "local" || st.AvgEventsPerSession <= 0 {
		t.Fatalf("stats: %+v", st)
	}

	_, err = c.Cleanup(ctx, 0)
	wantCode(t, err, connect.CodeInvalidArgument)
	if n := must[uint64](t)(c.Cleanup(ctx, time.Hour)); n != 0 {
		t.Fatalf("Cleanup(1h) removed %d fresh sessions", n)
	}
	time.Sleep(20 * time.Millisecond)
	if n := must[uint64](t)(c.Cleanup(ctx, 5*time.Millisecond)); n < 1 {
		t.Fatalf("Cleanup(5ms) removed %d", n)
	}
	_, err = c.GetSession(ctx, id)
	wantCode(t, err, connect.CodeNotFound)
}

func TestDeleteUserData(t *testing.T) {
	ctx := testCtx(t)
	c := memory.New(mainServer.URL)
	app := uniq(t, "erase")
	ids := map[string]string{"a": app + "-a", "b": app + "-b", "kept": app + "-kept"}
	for label, id := range ids {
		user := "gone"
		if label == "kept" {
			user = "stays"
		}
		must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: app, UserID: user}))
	}
	must[[]memory.Event](t)(c.AddEvents(ctx, ids["a"], []memory.EventInput{{EventType: "user_message", Content: "one"}, {EventType: "agent_response", Content: "two"}}))
	must[memory.Event](t)(c.AddEvent(ctx, ids["b"], memory.EventInput{EventType: "user_message", Content: "three"}))
	must[memory.Event](t)(c.AddEvent(ctx, ids["kept"], memory.EventInput{EventType: "user_message", Content: "four"}))

	erased := must[*memory.UserDataErased](t)(c.DeleteUserData(ctx, app, "gone"))
	if *erased != (memory.UserDataErased{RemovedSessions: 2, RemovedEvents: 3}) {
		t.Fatalf("DeleteUserData: %+v", erased)
	}
	_, err := c.GetSession(ctx, ids["a"])
	wantCode(t, err, connect.CodeNotFound)
	again := must[*memory.UserDataErased](t)(c.DeleteUserData(ctx, app, "gone"))
	if *again != (memory.UserDataErased{}) {
		t.Fatalf("DeleteUserData again: %+v", again)
	}
	if kept := must[*memory.Session](t)(c.GetSession(ctx, ids["kept"])); kept.EventCount != 1 {
		t.Fatalf("kept session: %+v", kept)
	}
	_, err = c.DeleteUserData(ctx, app, "")
	wantCode(t, err, connect.CodeInvalidArgument)
}

func TestCleanupWhere(t *testing.T) {
	ctx := testCtx(t)
	c := memory.New(smallServer.URL)
	app := uniq(t, "clean")
	for _, p := range []memory.CreateSessionParams{
		{SessionID: app + "-mine", AppName: app, UserID: "u"},
		{SessionID: app + "-other-user", AppName: app, UserID: "v"},
		{SessionID: app + "-other-app", AppName: app + "-2", UserID: "u"},
	} {
		must[*memory.Session](t)(c.CreateSession(ctx, p))
	}
	time.Sleep(20 * time.Millisecond)
	if n := must[uint64](t)(c.CleanupWhere(ctx, 5*time.Millisecond, memory.CleanupFilter{AppName: app, UserID: "u"})); n != 1 {
		t.Fatalf("CleanupWhere(app, u) removed %d", n)
	}
	_, err := c.GetSession(ctx, app+"-mine")
	wantCode(t, err, connect.CodeNotFound)
	must[*memory.Session](t)(c.GetSession(ctx, app+"-other-user"))
	must[*memory.Session](t)(c.GetSession(ctx, app+"-other-app"))
}

func TestProtocols(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  memory.Option
	}{
		{"grpc", memory.WithProtocol(memory.ProtocolGRPC)},
		{"connect", memory.WithConnect()},
		{"grpc-web", memory.WithProtocol(memory.ProtocolGRPCWeb)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := memory.New(mainServer.URL, tc.opt)
			id := uniq(t, "s")
			must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: "a", UserID: "u"}))
			must[memory.Event](t)(c.AddEvent(ctx, id, memory.EventInput{EventType: "user_message", Content: "hi"}))
			_, err := c.AddEvent(ctx, id, memory.EventInput{EventType: "user_message"}, memory.ExpectSeq(0))
			wantCode(t, err, connect.CodeFailedPrecondition)
			if cur, ok := memory.CurrentSeq(err); !ok || cur != 1 {
				t.Fatalf("CurrentSeq over %s: %d %v", tc.name, cur, ok)
			}
			_, err = c.GetSession(ctx, uniq(t, "missing"))
			wantCode(t, err, connect.CodeNotFound)

			s := c.Stream(ctx, id, 0, nil)
			defer s.Close()
			if !s.Next() || s.Event().Content != "hi" {
				t.Fatalf("stream over %s: %v", tc.name, s.Err())
			}
		})
	}
}

func TestOutOfRange(t *testing.T) {
	ctx := testCtx(t)
	c := memory.New(smallServer.URL)
	id := uniq(t, "s")
	must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: "a", UserID: "u"}))
	for i := range 10 {
		must[memory.Event](t)(c.AddEvent(ctx, id, memory.EventInput{EventType: "user_message", Content: i}))
	}
	sess := must[*memory.Session](t)(c.GetSession(ctx, id))
	if sess.HeadSeq != 10 || sess.FirstSeq != 6 || sess.EventCount != 5 {
		t.Fatalf("retention: %+v", sess)
	}
	_, err := c.GetSessionEvents(ctx, id, memory.GetEventsParams{AfterSeq: memory.After(1)})
	wantCode(t, err, connect.CodeOutOfRange)

	s := c.Stream(ctx, id, 1, nil)
	if s.Next() {
		t.Fatalf("stream from an evicted cursor delivered %+v", s.Event())
	}
	wantCode(t, s.Err(), connect.CodeOutOfRange)
	if s.Reconnects() != 0 {
		t.Fatalf("OUT_OF_RANGE was retried %d times", s.Reconnects())
	}

	// From the oldest retained event (afterSeq 0) the stream works.
	s = c.Stream(ctx, id, 0, nil)
	defer s.Close()
	var seqs []uint64
	for len(seqs) < 5 && s.Next() {
		seqs = append(seqs, s.Event().Seq)
	}
	if fmt.Sprint(seqs) != "[6 7 8 9 10]" {
		t.Fatalf("retained events: %v (%v)", seqs, s.Err())
	}
}
