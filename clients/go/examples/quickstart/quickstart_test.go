package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engram-memory/engram/clients/go/internal/testserver"
)

// TestReadmeExample checks that this program is the README's example and
// runs it against a real server (its fixed URL rewritten to the test port
// with a build overlay).
func TestReadmeExample(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(src)+"```") {
		t.Fatal("examples/quickstart/main.go differs from the README's example")
	}
	const url = `"http://127.0.0.1:8000"`
	if !strings.Contains(string(src), url) {
		t.Fatalf("the example does not use %s", url)
	}

	srv, err := testserver.Start(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	dir := t.TempDir()
	patched := filepath.Join(dir, "main.go")
	if err := os.WriteFile(patched, []byte(strings.Replace(string(src), url, `"`+srv.URL+`"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs("main.go")
	if err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {abs: patched}})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "run", "-overlay", overlayFile, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go run: %v\n%s", err, out)
	}
	want := "1 user_message What is the capital of France?\n2 agent_response Paris.\n"
	if !strings.HasPrefix(string(out), want) || !strings.Contains(string(out), "Paris.") {
		t.Fatalf("output:\n%s", out)
	}
	t.Logf("output:\n%s", out)
}
