package memory_test

import (
	"encoding/binary"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engram-memory-server/engram/clients/go/memory"
)

// lossyProxy relays TCP connections on 127.0.0.1 to a real server, but the
// first connection is cut when the server starts its first HTTP/2 response
// (a HEADERS frame): the request reached the server and was handled, the
// response is lost, and the client sees a broken connection.
type lossyProxy struct {
	ln      net.Listener
	target  string
	dropped atomic.Int32 // responses cut so far (at most one)
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn // closed at cleanup, so relays end
}

func (p *lossyProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *lossyProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func startLossyProxy(t *testing.T, target string) *lossyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *lossyProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *lossyProxy) accept() {
	defer p.wg.Done()
	for first := true; ; first = false {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client)
		p.track(server)
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(server, client); server.Close() }()
		lose := first
		go func() {
			defer p.wg.Done()
			defer client.Close()
			defer server.Close()
			if lose {
				p.relayUntilHeaders(client, server)
				return
			}
			io.Copy(client, server)
		}()
	}
}

// relayUntilHeaders forwards the server's HTTP/2 frames (SETTINGS, PING,
// WINDOW_UPDATE, ...) until the first HEADERS frame, which it swallows.
func (p *lossyProxy) relayUntilHeaders(client, server net.Conn) {
	const frameHeaders = 0x1
	for range 1000 { // bounded: a unary call needs a handful of frames
		var head [9]byte
		if _, err := io.ReadFull(server, head[:]); err != nil {
			return
		}
		length := int(binary.BigEndian.Uint32(append([]byte{0}, head[:3]...)))
		payload := make([]byte, length)
		if _, err := io.ReadFull(server, payload); err != nil {
			return
		}
		if head[3] == frameHeaders {
			p.dropped.Add(1)
			return
		}
		if _, err := client.Write(append(head[:], payload...)); err != nil {
			return
		}
	}
}

func TestRetryAfterLostResponse(t *testing.T) {
	direct := memory.New(mainServer.URL)
	sid := uniq(t, "lost")
	must[*memory.Session](t)(direct.CreateSession(testCtx(t), memory.CreateSessionParams{AppName: "a", UserID: "u", SessionID: sid}))

	t.Run("AddEvent", func(t *testing.T) {
		ctx := testCtx(t)
		proxy := startLossyProxy(t, mainServer.URL[len("http://"):])
		ev, err := memory.New(proxy.URL()).AddEvent(ctx, sid, memory.EventInput{EventType: "user_message", Content: "once"})
		if err != nil {
			t.Fatalf("retried append failed: %v", err)
		}
		if proxy.dropped.Load() != 1 {
			t.Fatalf("the proxy cut %d responses, want 1", proxy.dropped.Load())
		}
		page := must[*memory.EventPage](t)(direct.GetSessionEvents(ctx, sid, memory.GetEventsParams{}))
		if len(page.Events) != 1 {
			t.Fatalf("session holds %d events after one retried append, want 1", len(page.Events))
		}
		if got := page.Events[0]; got.EventID != ev.EventID || got.Seq != ev.Seq {
			t.Fatalf("returned %s@%d, stored %s@%d", ev.EventID, ev.Seq, got.EventID, got.Seq)
		}
	})

	t.Run("AddEvents", func(t *testing.T) {
		ctx := testCtx(t)
		proxy := startLossyProxy(t, mainServer.URL[len("http://"):])
		evs, err := memory.New(proxy.URL()).AddEvents(ctx, sid, []memory.EventInput{
			{EventType: "user_message", Content: "two"}, {EventType: "agent_response", Content: "three"},
		})
		if err != nil {
			t.Fatalf("retried batch failed: %v", err)
		}
		if proxy.dropped.Load() != 1 {
			t.Fatalf("the proxy cut %d responses, want 1", proxy.dropped.Load())
		}
		page := must[*memory.EventPage](t)(direct.GetSessionEvents(ctx, sid, memory.GetEventsParams{}))
		if len(page.Events) != 3 {
			t.Fatalf("session holds %d events after a retried batch of 2 on 1, want 3", len(page.Events))
		}
		for i, ev := range evs {
			if got := page.Events[i+1]; got.EventID != ev.EventID || got.Seq != ev.Seq {
				t.Fatalf("returned %s@%d, stored %s@%d", ev.EventID, ev.Seq, got.EventID, got.Seq)
			}
		}
	})

	t.Run("WriteMemories", func(t *testing.T) {
		ctx := testCtx(t)
		app := uniq(t, "lost-memories")
		proxy := startLossyProxy(t, mainServer.URL[len("http://"):])
		written, err := memory.New(proxy.URL()).WriteMemories(ctx, []memory.Memory{
			{AppName: app, UserID: "u", Text: "stored once"}, {AppName: app, UserID: "u", Text: "and this too"},
		})
		if err != nil {
			t.Fatalf("retried write failed: %v", err)
		}
		if proxy.dropped.Load() != 1 {
			t.Fatalf("the proxy cut %d responses, want 1", proxy.dropped.Load())
		}
		page := must[*memory.MemoryPage](t)(direct.ListMemories(ctx, memory.ListMemoriesParams{MemoryFilter: memory.MemoryFilter{Scope: memory.Scope{AppName: app}}}))
		if len(page.Memories) != 2 {
			t.Fatalf("app holds %d memories after a retried batch of 2, want 2", len(page.Memories))
		}
		for _, m := range written.Memories {
			if !slices.ContainsFunc(page.Memories, func(s memory.Memory) bool { return s.MemoryID == m.MemoryID }) {
				t.Fatalf("returned %s, stored %v", m.MemoryID, page.Memories)
			}
		}
	})

	t.Run("GetSession", func(t *testing.T) {
		ctx := testCtx(t)
		proxy := startLossyProxy(t, mainServer.URL[len("http://"):])
		s, err := memory.New(proxy.URL()).GetSession(ctx, sid)
		if err != nil || proxy.dropped.Load() != 1 || s.SessionID != sid {
			t.Fatalf("want the read retried after the cut response, got %v, %v (cut %d)", s, err, proxy.dropped.Load())
		}
	})

	t.Run("WithRetries(0) reports the lost response", func(t *testing.T) {
		ctx := testCtx(t)
		proxy := startLossyProxy(t, mainServer.URL[len("http://"):])
		_, err := memory.New(proxy.URL(), memory.WithRetries(0)).AddEvent(ctx, sid, memory.EventInput{EventType: "user_message"})
		if err == nil || proxy.dropped.Load() != 1 {
			t.Fatalf("want the cut response as an error, got %v (cut %d)", err, proxy.dropped.Load())
		}
	})
}
