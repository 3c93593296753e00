// Command engram-stream follows an Engram session and prints its events as
// JSON lines, resuming from the last printed seq when the connection breaks.
//
// Usage:
//
//	engram-stream -session ID [-addr http://127.0.0.1:8000] [-after N]
//	              [-types a,b] [-count N] [-timeout D] [-protocol grpc|connect|grpcweb]
//	              [-max-retries N] [-idle-timeout D] [-v]
//
// Each event is one line on stdout, keys in this order:
//
//	{"seq":1,"event_id":"...","event_type":"user_message","content":<JSON>,"metadata":{...},"timestamp":"2024-05-06T07:08:09.123Z","session_id":"..."}
//
// timestamp is RFC 3339 in UTC; metadata is {} when empty; content is any
// JSON value (null when absent). Diagnostics (reconnects, caught-up marks
// with -v, errors) go to stderr only.
//
// Exit status: 0 after -count events, or at -timeout when -count is 0;
// 3 when -timeout passed before -count events; 2 for bad flags; 1 for any
// other error (e.g. NOT_FOUND, OUT_OF_RANGE), printed to stderr.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/engram-memory-server/engram/clients/go/memory"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// line is one output record; the field order is the output's key order.
type line struct {
	Seq       uint64         `json:"seq"`
	EventID   string         `json:"event_id"`
	EventType string         `json:"event_type"`
	Content   any            `json:"content"`
	Metadata  map[string]any `json:"metadata"`
	Timestamp string         `json:"timestamp"`
	SessionID string         `json:"session_id"`
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("engram-stream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "http://127.0.0.1:8000", "server base URL")
	session := fs.String("session", "", "session id to follow (required)")
	after := fs.Uint64("after", 0, "print events with seq > N; 0: from the oldest retained event")
	types := fs.String("types", "", "comma-separated event types to print (default: all)")
	count := fs.Int("count", 0, "exit after printing N events (0: no limit)")
	timeout := fs.Duration("timeout", 0, "exit after this long, e.g. 30s (0: no limit)")
	protocol := fs.String("protocol", "grpc", "wire protocol: grpc (h2c), connect or grpcweb (HTTP/1.1)")
	maxRetries := fs.Int("max-retries", 0, "consecutive failed reconnects before giving up (0: 8, about 9 s of outage; -1: no limit)")
	idle := fs.Duration("idle-timeout", 0, "reconnect when no frame (event or heartbeat) arrives for this long (0: off; use > the server's heartbeat interval)")
	verbose := fs.Bool("v", false, "log caught-up marks to stderr")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: engram-stream -session ID [flags]\n\nPrints one JSON line per event of the session (seq, event_id, event_type,\ncontent, metadata, timestamp, session_id), following it live and resuming\nafter the last printed seq on reconnect.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *session == "" || fs.NArg() > 0 || *count < 0 || *timeout < 0 {
		fs.Usage()
		return 2
	}
	var opt memory.Option
	switch *protocol {
	case "grpc":
		opt = memory.WithProtocol(memory.ProtocolGRPC)
	case "connect":
		opt = memory.WithProtocol(memory.ProtocolConnect)
	case "grpcweb", "grpc-web":
		opt = memory.WithProtocol(memory.ProtocolGRPCWeb)
	default:
		fmt.Fprintf(stderr, "engram-stream: unknown -protocol %q\n", *protocol)
		return 2
	}
	var eventTypes []string
	for _, t := range strings.Split(*types, ",") {
		if t = strings.TrimSpace(t); t != "" {
			eventTypes = append(eventTypes, t)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}

	client := memory.New(*addr, opt)
	s := client.Stream(ctx, *session, *after, &memory.StreamOptions{
		EventTypes:  eventTypes,
		MaxRetries:  *maxRetries,
		IdleTimeout: *idle,
		OnReconnect: func(attempt int, afterSeq uint64, cause error) error {
			fmt.Fprintf(stderr, "engram-stream: reconnecting (attempt %d) after seq %d: %v\n", attempt, afterSeq, cause)
			return nil
		},
		OnCaughtUp: func(head uint64) {
			if *verbose {
				fmt.Fprintf(stderr, "engram-stream: caught up at seq %d\n", head)
			}
		},
	})
	defer s.Close()

	out := bufio.NewWriter(stdout)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	printed := 0
	for (*count == 0 || printed < *count) && s.Next() {
		ev := s.Event()
		md := ev.Metadata
		if md == nil {
			md = map[string]any{}
		}
		rec := line{
			Seq: ev.Seq, EventID: ev.EventID, EventType: ev.EventType, Content: ev.Content,
			Metadata: md, Timestamp: ev.Timestamp.UTC().Format(time.RFC3339Nano), SessionID: ev.SessionID,
		}
		if err := enc.Encode(rec); err != nil {
			fmt.Fprintln(stderr, "engram-stream:", err)
			return 1
		}
		// Flush per event: a reader sees each line as soon as it arrives.
		if err := out.Flush(); err != nil {
			fmt.Fprintln(stderr, "engram-stream:", err)
			return 1
		}
		printed++
	}
	if *count > 0 && printed >= *count {
		return 0
	}
	err := s.Err()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		if *count > 0 {
			fmt.Fprintf(stderr, "engram-stream: timeout after %v: printed %d of %d events\n", *timeout, printed, *count)
			return 3
		}
		return 0
	case errors.Is(err, context.Canceled) || err == nil:
		return 0 // interrupted
	default:
		fmt.Fprintf(stderr, "engram-stream: %s: %v\n", connect.CodeOf(err), err)
		return 1
	}
}
