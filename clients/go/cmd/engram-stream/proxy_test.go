package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engram-memory-server/engram/clients/go/memory"
)

// proxy forwards TCP connections to target and can cut them all, as a
// network failure would, while the server stays up.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return p
}

func (p *proxy) url() string { return "http://" + p.ln.Addr().String() }

// cut closes every proxied connection.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestCLIResume cuts the CLI's connection mid-stream: it reconnects and
// resumes after the last printed seq, without gap or duplicate.
func TestCLIResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := memory.New(srv.URL)
	id := fmt.Sprintf("cli-resume-%d", time.Now().UnixNano())
	if _, err := c.CreateSession(ctx, memory.CreateSessionParams{SessionID: id, AppName: "a", UserID: "u"}); err != nil {
		t.Fatal(err)
	}
	add := func(from, to int) {
		t.Helper()
		var in []memory.EventInput
		for i := from; i <= to; i++ {
			in = append(in, memory.EventInput{EventID: fmt.Sprint("e", i), EventType: "user_message", Content: i})
		}
		if _, err := c.AddEvents(ctx, id, in); err != nil {
			t.Fatal(err)
		}
	}
	add(1, 3)
	p := newProxy(t, strings.TrimPrefix(srv.URL, "http://"))

	cmd := exec.CommandContext(ctx, bin, "-addr", p.url(), "-session", id, "-count", "8", "-timeout", "30s")
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
	p.cut()
	add(4, 6) // written while the CLI reconnects
	for len(lines) < 6 && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	p.cut()
	add(7, 8)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("engram-stream: %v\n%s", err, stderr.String())
	}
	recs := parse(t, strings.Join(lines, "\n"))
	if got := seqs(recs); got != "1,2,3,4,5,6,7,8" {
		t.Fatalf("seqs %s\n%s", got, stderr.String())
	}
	if n := strings.Count(stderr.String(), "reconnecting"); n < 2 {
		t.Fatalf("%d reconnects logged, want >= 2:\n%s", n, stderr.String())
	}
}
