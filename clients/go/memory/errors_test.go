package memory_test

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/engram-memory-server/engram/clients/go/internal/testserver"
	"github.com/engram-memory-server/engram/clients/go/memory"
)

// protocols are the three wire protocols, for tests that must hold on each.
var protocols = []struct {
	name string
	opt  memory.Option
}{
	{"grpc", memory.WithProtocol(memory.ProtocolGRPC)},
	{"connect", memory.WithConnect()},
	{"grpc-web", memory.WithProtocol(memory.ProtocolGRPCWeb)},
}

func TestErrorDetailsNameTheFieldAndTheReason(t *testing.T) {
	for _, tc := range protocols {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := memory.New(mainServer.URL, tc.opt)

			_, err := c.AddEvents(ctx, "s", []memory.EventInput{{EventType: "user_message"}, {EventType: "user_message", EventID: "has space"}})
			wantCode(t, err, connect.CodeInvalidArgument)
			if field, ok := memory.Field(err); !ok || field != "events[1].event_id" {
				t.Fatalf("Field: %q %v (%v)", field, ok, err)
			}
			want := []memory.FieldViolation{{Field: "events[1].event_id", Description: "must be 1-128 printable ASCII characters without spaces (pattern ^[!-~]{1,128}$)"}}
			if got := memory.Details(err).FieldViolations; !reflect.DeepEqual(got, want) {
				t.Fatalf("FieldViolations: %#v", got)
			}

			id := uniq(t, "s")
			must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: "a", UserID: "u"}))
			must[memory.Event](t)(c.AddEvent(ctx, id, memory.EventInput{EventType: "user_message"}))
			_, err = c.AddEvent(ctx, id, memory.EventInput{EventType: "user_message"}, memory.ExpectSeq(0))
			wantCode(t, err, connect.CodeFailedPrecondition)
			d := memory.Details(err)
			if d.Reason != "SEQ_CONFLICT" || d.Metadata["current_seq"] != "1" || d.Metadata["expected_seq"] != "0" {
				t.Fatalf("conflict details: %+v", d)
			}

			_, err = c.GetSession(ctx, uniq(t, "missing"))
			if memory.Reason(err) != "SESSION_NOT_FOUND" {
				t.Fatalf("Reason of a missing session: %q (%v)", memory.Reason(err), err)
			}
		})
	}
}

func TestRetryDelayOfARateLimit(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys.json")
	key := createKey(t, keyFile, "--app", "go-app", "--role", "read", "--rate-limit", "1")
	srv, err := testserver.Start(0, "MEMORY_AUTH=true", "MEMORY_AUTH_KEYS_FILE="+keyFile, "MEMORY_AUTH_CACHE_MS=0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range protocols {
		c := memory.New(srv.URL, tc.opt, memory.WithAPIKey(key))
		refused := 0
		for range 3 {
			_, err := c.Stats(ctx)
			if err == nil {
				continue
			}
			wantCode(t, err, connect.CodeResourceExhausted)
			refused++
			delay, ok := memory.RetryDelay(err)
			if !ok || delay <= 0 || delay > time.Second {
				t.Fatalf("%s RetryDelay: %v %v (%v)", tc.name, delay, ok, err)
			}
			if memory.Reason(err) != "RATE_LIMITED" {
				t.Fatalf("%s Reason: %q", tc.name, memory.Reason(err))
			}
		}
		if refused == 0 {
			t.Fatalf("%s: 3 calls at once under a 1/s limit were all served", tc.name)
		}
	}
}

func TestDetailsOfAPlainError(t *testing.T) {
	if d := memory.Details(context.Canceled); d.Reason != "" || d.FieldViolations != nil || d.HasRetryDelay {
		t.Fatalf("Details of a plain error: %+v", d)
	}
	if _, ok := memory.Field(nil); ok {
		t.Fatal("Field(nil)")
	}
}
