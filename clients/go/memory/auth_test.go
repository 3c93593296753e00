package memory_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/engram-memory-server/engram/clients/go/internal/testserver"
	"github.com/engram-memory-server/engram/clients/go/memory"
)

// createKey makes an API key with the repository's `engram keys` CLI in the key file.
func createKey(t *testing.T, keyFile string, args ...string) string {
	t.Helper()
	root, err := testserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "node_modules", ".bin", "tsx"), append([]string{"src/cli/main.ts", "keys", "create", "--json"}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "MEMORY_TYPE=local", "MEMORY_AUTH_KEYS_FILE="+keyFile)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("engram keys create: %v", err)
	}
	var created struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(out, &created); err != nil {
		t.Fatalf("engram keys create output %q: %v", out, err)
	}
	return created.Key
}

func TestAPIKey(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys.json")
	writer := createKey(t, keyFile, "--app", "go-app", "--role", "write")
	reader := createKey(t, keyFile, "--app", "go-app", "--role", "read")
	srv, err := testserver.Start(0, "MEMORY_AUTH=true", "MEMORY_AUTH_KEYS_FILE="+keyFile, "MEMORY_AUTH_CACHE_MS=0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, proto := range []memory.Protocol{memory.ProtocolGRPC, memory.ProtocolConnect} {
		anonymous := memory.New(srv.URL, memory.WithProtocol(proto))
		if _, err := anonymous.Stats(ctx); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("%v without a key: got %v, want Unauthenticated", proto, err)
		}

		c := memory.New(srv.URL, memory.WithProtocol(proto), memory.WithAPIKey(writer))
		session, err := c.CreateSession(ctx, memory.CreateSessionParams{AppName: "go-app", UserID: "u"})
		if err != nil {
			t.Fatalf("%v create with a write key: %v", proto, err)
		}
		id := session.SessionID
		if _, err := c.AddEvent(ctx, id, memory.EventInput{EventType: "user_message", Content: "hi"}); err != nil {
			t.Fatalf("%v append with a write key: %v", proto, err)
		}
		if _, err := c.CreateSession(ctx, memory.CreateSessionParams{AppName: "other-app", UserID: "u"}); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("%v create in another app: got %v, want PermissionDenied", proto, err)
		}

		r := memory.New(srv.URL, memory.WithProtocol(proto), memory.WithAPIKey(reader))
		if _, err := r.AddEvent(ctx, id, memory.EventInput{EventType: "user_message", Content: "no"}); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("%v append with a read key: got %v, want PermissionDenied", proto, err)
		}
		// Streams carry the key too.
		streamCtx, stop := context.WithTimeout(ctx, 10*time.Second)
		got := 0
		for ev, err := range r.Events(streamCtx, id, 0, nil) {
			if err != nil {
				t.Fatalf("%v stream with a read key: %v", proto, err)
			}
			if ev.Content != "hi" {
				t.Fatalf("%v streamed %+v", proto, ev)
			}
			got++
			break
		}
		stop()
		if got != 1 {
			t.Fatalf("%v stream delivered %d events, want 1", proto, got)
		}
	}
}
