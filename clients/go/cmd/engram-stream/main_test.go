package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engram-memory-server/engram/clients/go/internal/testserver"
	"github.com/engram-memory-server/engram/clients/go/memory"
)

var (
	srv *testserver.Server
	bin string // the built engram-stream
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "engram-stream-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "engram-stream")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	errc := make(chan error, 1)
	go func() { errc <- build.Run() }()
	srv, err = testserver.Start(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Stop()
	if err := <-errc; err != nil {
		fmt.Fprintln(os.Stderr, "go build:", err)
		return 1
	}
	return m.Run()
}

type record struct {
	Seq       uint64         `json:"seq"`
	EventID   string         `json:"event_id"`
	EventType string         `json:"event_type"`
	Content   any            `json:"content"`
	Metadata  map[string]any `json:"metadata"`
	Timestamp string         `json:"timestamp"`
	SessionID string         `json:"session_id"`
}

// runCLI runs the built binary to completion (bounded by the test's own
// -timeout plus a margin) and returns stdout lines, stderr and exit code.
func runCLI(t *testing.T, args ...string) ([]record, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return parse(t, stdout.String()), stderr.String(), code
}

func parse(t *testing.T, out string) []record {
	t.Helper()
	var recs []record
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var r record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("bad output line %q: %v", l, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func seqs(recs []record) string {
	var s []string
	for _, r := range recs {
		s = append(s, fmt.Sprint(r.Seq))
	}
	return strings.Join(s, ",")
}

func TestCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := memory.New(srv.URL)
	id := fmt.Sprintf("cli-%d", time.Now().UnixNano())
	if _, err := c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: "a", UserID: "u"}); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	if _, err := c.AddEvents(ctx, id, []memory.EventInput{
		{EventID: "e1", EventType: "user_message", Content: "hi", Metadata: map[string]any{"k": "v"}, Timestamp: ts},
		{EventID: "e2", EventType: "agent_response", Content: map[string]any{"text": "hello", "n": 1.5}},
		{EventID: "e3", EventType: "tool_call", Content: []any{1, "two", nil}},
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("catch-up and live", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, bin, "-addr", srv.URL, "-session", id, "-count", "5", "-timeout", "30s")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		var lines []string
		for len(lines) < 3 && sc.Scan() {
			lines = append(lines, sc.Text())
		}
		// The first three are the replay; write two more live.
		if _, err := c.AddEvent(ctx, id, memory.EventInput{EventID: "e4", EventType: "user_message", Content: "live"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.AddEvent(ctx, id, memory.EventInput{EventID: "e5", EventType: "agent_response", Content: 5}); err != nil {
			t.Fatal(err)
		}
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("engram-stream: %v\n%s", err, stderr.String())
		}
		recs := parse(t, strings.Join(lines, "\n"))
		if seqs(recs) != "1,2,3,4,5" {
			t.Fatalf("seqs %s", seqs(recs))
		}
		if lines[0] != `{"seq":1,"event_id":"e1","event_type":"user_message","content":"hi","metadata":{"k":"v"},"timestamp":"2024-05-06T07:08:09Z","session_id":"`+id+`"}` {
			t.Fatalf("line format: %s", lines[0])
		}
		if r := recs[1]; r.Content.(map[string]any)["n"] != 1.5 || len(r.Metadata) != 0 || r.Metadata == nil {
			t.Fatalf("record 2: %+v", r)
		}
		if r := recs[3]; r.EventID != "e4" || r.Content != "live" || r.SessionID != id {
			t.Fatalf("live record: %+v", r)
		}
		if _, err := time.Parse(time.RFC3339Nano, recs[4].Timestamp); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("after and types", func(t *testing.T) {
		recs, stderr, code := runCLI(t, "-addr", srv.URL, "-session", id, "-after", "1", "-types", "agent_response,tool_call", "-count", "3", "-timeout", "20s")
		if code != 0 || seqs(recs) != "2,3,5" {
			t.Fatalf("code %d seqs %s: %s", code, seqs(recs), stderr)
		}
	})

	t.Run("connect protocol", func(t *testing.T) {
		recs, stderr, code := runCLI(t, "-addr", srv.URL, "-session", id, "-after", "3", "-count", "2", "-timeout", "20s", "-protocol", "connect")
		if code != 0 || seqs(recs) != "4,5" {
			t.Fatalf("code %d seqs %s: %s", code, seqs(recs), stderr)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		recs, _, code := runCLI(t, "-addr", srv.URL, "-session", id, "-after", "4", "-count", "3", "-timeout", "700ms")
		if code != 3 || seqs(recs) != "5" {
			t.Fatalf("code %d seqs %s", code, seqs(recs))
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("timeout took %v", time.Since(start))
		}
		// Without -count, the timeout is the normal end.
		recs, _, code = runCLI(t, "-addr", srv.URL, "-session", id, "-timeout", "500ms")
		if code != 0 || seqs(recs) != "1,2,3,4,5" {
			t.Fatalf("code %d seqs %s", code, seqs(recs))
		}
	})

	t.Run("errors", func(t *testing.T) {
		_, stderr, code := runCLI(t, "-addr", srv.URL, "-session", "no-such-session", "-timeout", "10s")
		if code != 1 || !strings.Contains(stderr, "not_found") {
			t.Fatalf("missing session: code %d, stderr %q", code, stderr)
		}
		_, _, code = runCLI(t, "-addr", srv.URL)
		if code != 2 {
			t.Fatalf("missing -session: code %d", code)
		}
		_, _, code = runCLI(t, "-session", id, "-protocol", "carrier-pigeon")
		if code != 2 {
			t.Fatalf("bad -protocol: code %d", code)
		}
	})
}
