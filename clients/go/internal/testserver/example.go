package testserver

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ExampleURL is the server address the README's examples use as written.
const ExampleURL = `"http://127.0.0.1:8000"`

// RunReadmeExample checks that main.go in the working directory (an
// example program) appears verbatim in the client's README.md as a Go code
// block, then runs it against a fresh real server (its ExampleURL rewritten
// to the server's with a build overlay) and returns what it printed.
func RunReadmeExample(t testing.TB) string {
	t.Helper()
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(src)+"```") {
		t.Fatal("main.go differs from the README's example")
	}
	if !strings.Contains(string(src), ExampleURL) {
		t.Fatalf("the example does not use %s", ExampleURL)
	}

	srv, err := Start(0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	dir := t.TempDir()
	patched := filepath.Join(dir, "main.go")
	if err := os.WriteFile(patched, []byte(strings.Replace(string(src), ExampleURL, `"`+srv.URL+`"`, 1)), 0o644); err != nil {
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
	t.Logf("output:\n%s", out)
	return string(out)
}
