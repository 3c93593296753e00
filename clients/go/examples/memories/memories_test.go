package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/engram-memory-server/engram/clients/go/internal/testserver"
)

// TestReadmeMemoriesExample checks that this program is the README's
// long-term memory example and runs it against a real server.
func TestReadmeMemoriesExample(t *testing.T) {
	out := testserver.RunReadmeExample(t)
	for _, want := range []string{
		"found drink-2 Alice switched to green tea\n",
		"listed drink-2 holds: true\nlisted drink-1 holds: false\n",
		"Can I order a drink?",
		"forgot 2\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "found drink-1") {
		t.Fatalf("the superseded memory was found:\n%s", out)
	}
	// Each memory line of Recall's text is dated (valid_from).
	if !regexp.MustCompile(`## Core memories\n- \d{4}-\d\d-\d\d: The shop opens at nine`).MatchString(out) {
		t.Fatalf("no dated core memory:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^tokens \d+ of 1000$`).MatchString(out) {
		t.Fatalf("no token count:\n%s", out)
	}
}
