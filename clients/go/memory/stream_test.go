package memory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/engram-memory-server/engram/clients/go/internal/testserver"
	"github.com/engram-memory-server/engram/clients/go/memory"
)

// next reads one event with a deadline so a broken stream fails the test
// instead of hanging it.
func next(t *testing.T, s *memory.Stream, within time.Duration) memory.Event {
	t.Helper()
	type result struct {
		ev memory.Event
		ok bool
	}
	ch := make(chan result, 1)
	go func() {
		ok := s.Next()
		ch <- result{s.Event(), ok}
	}()
	select {
	case r := <-ch:
		if !r.ok {
			t.Fatalf("stream ended: %v", s.Err())
		}
		return r.ev
	case <-time.After(within):
		s.Close()
		<-ch
		t.Fatalf("no event within %v", within)
		return memory.Event{}
	}
}

func TestStreamCatchUpAndLive(t *testing.T) {
	ctx := testCtx(t)
	c := memory.New(mainServer.URL)
	id := uniq(t, "s")
	must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: "a", UserID: "u"}))
	for i := 1; i <= 3; i++ {
		must[memory.Event](t)(c.AddEvent(ctx, id, memory.EventInput{EventID: fmt.Sprint("e", i), EventType: "user_message", Content: i}))
	}

	caughtUp := make(chan uint64, 4)
	s := c.Stream(ctx, id, 0, &memory.StreamOptions{OnCaughtUp: func(head uint64) { caughtUp <- head }})
	defer s.Close()
	for i := 1; i <= 3; i++ {
		if ev := next(t, s, 5*time.Second); ev.Seq != uint64(i) || ev.EventID != fmt.Sprint("e", i) || ev.Content != float64(i) {
			t.Fatalf("replayed event %d: %+v", i, ev)
		}
	}
	if s.CaughtUp() {
		t.Fatal("caught up before reading past the replay")
	}

	// Live: written after the replay.
	go func() {
		time.Sleep(300 * time.Millisecond) // past a heartbeat (200ms)
		for i := 4; i <= 6; i++ {
			_, _ = c.AddEvent(context.Background(), id, memory.EventInput{EventID: fmt.Sprint("e", i), EventType: "agent_response", Content: i})
		}
	}()
	for i := 4; i <= 6; i++ {
		if ev := next(t, s, 5*time.Second); ev.Seq != uint64(i) || ev.EventType != "agent_response" {
			t.Fatalf("live event %d: %+v", i, ev)
		}
	}
	if !s.CaughtUp() || s.LastSeq() != 6 {
		t.Fatalf("CaughtUp %v LastSeq %d", s.CaughtUp(), s.LastSeq())
	}
	select {
	case head := <-caughtUp:
		if head != 3 {
			t.Fatalf("caught up at head %d", head)
		}
	default:
		t.Fatal("OnCaughtUp not called")
	}
	if s.Reconnects() != 0 {
		t.Fatalf("%d reconnects on a healthy stream", s.Reconnects())
	}
	s.Close()
	if s.Next() || s.Err() != nil {
		t.Fatalf("after Close: Err %v", s.Err())
	}

	// Type filter and resume cursor, as an iterator.
	var got []uint64
	for ev, err := range c.Events(ctx, id, 1, &memory.StreamOptions{EventTypes: []string{"agent_response"}}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Seq)
		if len(got) == 3 {
			break
		}
	}
	if fmt.Sprint(got) != "[4 5 6]" {
		t.Fatalf("filtered stream: %v", got)
	}

	// Errors that are not retried.
	s = c.Stream(ctx, uniq(t, "missing"), 0, nil)
	if s.Next() {
		t.Fatal("stream of a missing session delivered an event")
	}
	wantCode(t, s.Err(), connect.CodeNotFound)

	// The caller's context ends the stream with its error.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	s = c.Stream(short, id, 6, nil)
	if s.Next() {
		t.Fatal("unexpected event")
	}
	if !errors.Is(s.Err(), context.DeadlineExceeded) {
		t.Fatalf("context end: %v", s.Err())
	}
}

// TestStreamResumeAfterRestart stops the server under a live stream and
// starts a new one on the same port: the stream reconnects and resumes after
// the last delivered seq, with no gap and no duplicate.
func TestStreamResumeAfterRestart(t *testing.T) {
	t.Run("graceful", func(t *testing.T) { testResume(t, false) })
	t.Run("killed", func(t *testing.T) { testResume(t, true) })
}

func testResume(t *testing.T, kill bool) {
	srv, err := testserver.Start(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	ctx := testCtx(t)
	c := memory.New(srv.URL)
	id := uniq(t, "s")
	inputs := make([]memory.EventInput, 6)
	for i := range inputs {
		inputs[i] = memory.EventInput{EventID: fmt.Sprint("e", i+1), EventType: "user_message", Content: i + 1}
	}
	must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: "a", UserID: "u"}))
	must[[]memory.Event](t)(c.AddEvents(ctx, id, inputs[:3]))

	// The in-memory store starts empty: the new server must hold the
	// session again before the stream reconnects, so gate the reconnect.
	ready := make(chan struct{})
	type reconnect struct {
		after uint64
		cause error
	}
	reconnects := make(chan reconnect, 100)
	s := c.Stream(ctx, id, 0, &memory.StreamOptions{
		InitialBackoff: 50 * time.Millisecond,
		MaxBackoff:     500 * time.Millisecond,
		MaxRetries:     40,
		OnReconnect: func(attempt int, after uint64, cause error) error {
			reconnects <- reconnect{after, cause}
			select {
			case <-ready:
				return nil
			case <-time.After(30 * time.Second):
				return errors.New("new server not ready in 30s")
			}
		},
	})
	defer s.Close()
	for i := 1; i <= 3; i++ {
		if ev := next(t, s, 5*time.Second); ev.Seq != uint64(i) {
			t.Fatalf("before restart: %+v", ev)
		}
	}
	// Read the next events concurrently while the server restarts.
	got := make(chan memory.Event, 10)
	done := make(chan error, 1)
	go func() {
		for range 3 { // the first Next reads the caught-up frame, then waits live
			if !s.Next() {
				done <- s.Err()
				return
			}
			got <- s.Event()
		}
		done <- nil
	}()
	time.Sleep(300 * time.Millisecond) // let the stream go live (a heartbeat or two)

	port := srv.Port
	t0 := time.Now()
	if kill {
		srv.Kill()
	} else {
		srv.Stop()
	}
	srv2, err := testserver.Start(port)
	t.Logf("restarted in %v", time.Since(t0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv2.Stop() })
	// Rebuild the session on the new server: same events, same seqs.
	must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: "a", UserID: "u"}))
	must[[]memory.Event](t)(c.AddEvents(ctx, id, inputs[:4]))
	close(ready)
	// One more written live after the reconnect.
	time.Sleep(300 * time.Millisecond)
	must[[]memory.Event](t)(c.AddEvents(ctx, id, inputs[4:]))

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stream after restart: %v", err)
		}
	case <-time.After(20 * time.Second):
		s.Close()
		t.Fatal("stream did not resume within 20s")
	}
	t.Logf("resumed after %v", time.Since(t0))
	close(got)
	var seqs []uint64
	for ev := range got {
		seqs = append(seqs, ev.Seq)
		if ev.EventID != fmt.Sprint("e", ev.Seq) {
			t.Fatalf("event %d has id %s", ev.Seq, ev.EventID)
		}
	}
	if fmt.Sprint(seqs) != "[4 5 6]" {
		t.Fatalf("resumed events: %v", seqs)
	}
	first := <-reconnects
	if first.after != 3 {
		t.Fatalf("reconnected after seq %d, want 3", first.after)
	}
	code := connect.CodeOf(first.cause)
	if code != connect.CodeUnavailable && code != connect.CodeUnknown && code != connect.CodeInternal {
		t.Fatalf("restart ended the stream with %v", first.cause)
	}
	if last, ok := memory.LastSeq(first.cause); (!kill && !ok) || (ok && last != 3) {
		t.Fatalf("engram-last-seq %d (present %v), want 3", last, ok)
	}
	t.Logf("first disconnect: %v; reconnects: %d", first.cause, s.Reconnects())
	if s.Reconnects() < 1 {
		t.Fatal("no reconnect recorded")
	}
}

// TestStreamIdleTimeout: with an idle timeout shorter than the server's
// heartbeat (200ms in tests) the stream reconnects while idle, and still
// delivers every event exactly once.
func TestStreamIdleTimeout(t *testing.T) {
	ctx := testCtx(t)
	c := memory.New(mainServer.URL)
	id := uniq(t, "s")
	must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: "a", UserID: "u"}))
	must[memory.Event](t)(c.AddEvent(ctx, id, memory.EventInput{EventType: "user_message", Content: 1}))
	causes := make(chan error, 100)
	s := c.Stream(ctx, id, 0, &memory.StreamOptions{
		IdleTimeout:    60 * time.Millisecond,
		InitialBackoff: 10 * time.Millisecond,
		MaxRetries:     -1,
		OnReconnect: func(_ int, _ uint64, cause error) error {
			select {
			case causes <- cause:
			default:
			}
			return nil
		},
	})
	defer s.Close()
	if ev := next(t, s, 5*time.Second); ev.Seq != 1 {
		t.Fatalf("first event: %+v", ev)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		_, _ = c.AddEvent(context.Background(), id, memory.EventInput{EventType: "user_message", Content: 2})
	}()
	if ev := next(t, s, 5*time.Second); ev.Seq != 2 {
		t.Fatalf("second event: %+v", ev)
	}
	select {
	case cause := <-causes:
		if connect.CodeOf(cause) != connect.CodeUnavailable {
			t.Fatalf("idle reconnect cause: %v", cause)
		}
	default:
		t.Fatal("no reconnect on idle")
	}
}
