package main

import (
	"strings"
	"testing"

	"github.com/engram-memory-server/engram/clients/go/internal/testserver"
)

// TestReadmeExample checks that this program is the README's example and
// runs it against a real server.
func TestReadmeExample(t *testing.T) {
	out := testserver.RunReadmeExample(t)
	want := "1 user_message What is the capital of France?\n2 agent_response Paris.\n"
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "Paris.") {
		t.Fatalf("output:\n%s", out)
	}
}
