// Package testserver starts real Engram servers (the repository's
// TypeScript server run with tsx) for the Go client's tests.
package testserver

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Server is a running Engram server.
type Server struct {
	Port int
	URL  string // http://127.0.0.1:PORT

	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	logs []string
}

// RepoRoot finds the repository root: two levels above the Go module
// (the directory holding go.mod) that contains the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 20 {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Abs(filepath.Join(dir, "..", ".."))
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("testserver: go.mod not found above the working directory")
}

// Start runs a server on 127.0.0.1:port (0: a free port) with extra
// environment variables ("NAME=value") and waits until it listens.
func Start(port int, env ...string) (*Server, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	tsx := filepath.Join(root, "node_modules", ".bin", "tsx")
	if _, err := os.Stat(tsx); err != nil {
		return nil, fmt.Errorf("testserver: %s not found (run npm ci at the repository root): %w", tsx, err)
	}
	cmd := exec.Command(tsx, "src/main.ts", "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	cmd.Dir = root
	// Hermetic settings: drop the caller's server configuration.
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "MEMORY_") || name == "HOST" || name == "PORT" || name == "AGENT_NAME" {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env,
		"MEMORY_STREAM_HEARTBEAT_MS=200",
		"MEMORY_SHUTDOWN_GRACE_MS=300",
		"MEMORY_TYPE=local",
		"MEMORY_ENABLED=true",
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	// Own process group: tsx runs node as a child; stop both together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{cmd: cmd, done: make(chan struct{})}
	portCh := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			if len(s.logs) < 2000 {
				s.logs = append(s.logs, line)
			}
			s.mu.Unlock()
			if sent {
				continue
			}
			var rec struct {
				Msg  string `json:"msg"`
				Port int    `json:"port"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" && rec.Port > 0 {
				portCh <- rec.Port
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	select {
	case p := <-portCh:
		s.Port = p
		s.URL = "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("testserver: server exited before listening:\n%s", s.Logs())
	case <-time.After(60 * time.Second):
		s.Stop()
		return nil, fmt.Errorf("testserver: server did not listen within 60s:\n%s", s.Logs())
	}
}

// Logs returns the server's stdout lines so far.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ""
	for _, l := range s.logs {
		out += l + "\n"
	}
	return out
}

// Stop stops the server gracefully (SIGTERM), killing it after 10s.
func (s *Server) Stop() {
	if s == nil || s.cmd.Process == nil {
		return
	}
	pgid := s.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
		}
	}
	// tsx runs node as a child: wait (bounded) for the whole group to go,
	// so that the port is free for a restart.
	deadline := time.Now().Add(3 * time.Second)
	for syscall.Kill(-pgid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// Kill stops the server abruptly (SIGKILL to its process group), as a crash
// would: connections drop without a status.
func (s *Server) Kill() {
	if s == nil || s.cmd.Process == nil {
		return
	}
	pgid := s.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
	deadline := time.Now().Add(3 * time.Second)
	for syscall.Kill(-pgid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}
