package memory

import (
	"context"
	"errors"
	"io"
	"iter"
	"math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"

	engramv1 "github.com/engram-memory-server/engram/clients/go/gen/engram/v1"
)

// StreamOptions tune a Stream. The zero value is usable.
type StreamOptions struct {
	// EventTypes delivers only these event types when non-empty.
	EventTypes []string
	// InitialBackoff is the first wait before reconnecting (default 100ms);
	// it doubles per consecutive failure up to MaxBackoff (default 2s).
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// MaxRetries bounds consecutive failed reconnects (no frame received in
	// between) before the stream gives up with the last error. 0:
	// DefaultStreamMaxRetries (8);
	// negative: unlimited (until the context ends).
	MaxRetries int
	// IdleTimeout reconnects when no frame (event, caught-up or heartbeat)
	// arrives for this long. 0 disables it; set it to a few times the
	// server's heartbeat interval (MEMORY_STREAM_HEARTBEAT_MS, 15s default).
	IdleTimeout time.Duration
	// OnReconnect, when set, is called before each reconnect with the
	// attempt number (1, 2, ...), the seq the stream will resume after and
	// the error that ended the previous connection. It may block (e.g. to
	// gate reconnection); returning a non-nil error ends the stream with it.
	OnReconnect func(attempt int, afterSeq uint64, cause error) error
	// OnCaughtUp, when set, is called each time a connection finishes its
	// replay, with the session's head seq.
	OnCaughtUp func(headSeq uint64)
}

// Stream follows a session's events: it replays them from a cursor, then
// delivers new ones live, reconnecting from the last delivered seq when the
// connection breaks (UNAVAILABLE or a transport error) with bounded
// exponential backoff. Heartbeats are consumed internally.
//
//	s := client.Stream(ctx, sessionID, 0, nil)
//	defer s.Close()
//	for s.Next() {
//		ev := s.Event()
//	}
//	if err := s.Err(); err != nil { ... }
//
// A Stream is not safe for concurrent use, except Close.
type Stream struct {
	client    *Client
	sessionID string
	opts      StreamOptions

	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
	done   bool

	conn       *connect.ServerStreamForClient[engramv1.StreamSessionEventsResponse]
	connCancel context.CancelFunc
	idle       *time.Timer
	idleFired  bool
	idleMu     sync.Mutex

	started bool   // a cursor exists (afterSeq given or an event seen)
	cursor  uint64 // last seq delivered (or known to be scanned)
	event   Event
	err     error

	caughtUp   bool
	headSeq    uint64
	failures   int
	reconnects int
}

// Stream opens a resuming subscription to sessionID delivering events with
// seq > afterSeq; afterSeq 0 starts with the oldest retained event. The
// connection is made lazily by the first Next. opts may be nil.
func (c *Client) Stream(ctx context.Context, sessionID string, afterSeq uint64, opts *StreamOptions) *Stream {
	s := &Stream{client: c, sessionID: sessionID, cursor: afterSeq, started: afterSeq > 0}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.InitialBackoff <= 0 {
		s.opts.InitialBackoff = DefaultInitialBackoff
	}
	if s.opts.MaxBackoff <= 0 {
		s.opts.MaxBackoff = DefaultMaxBackoff
	}
	if s.opts.MaxBackoff < s.opts.InitialBackoff {
		s.opts.MaxBackoff = s.opts.InitialBackoff
	}
	if s.opts.MaxRetries == 0 {
		s.opts.MaxRetries = DefaultStreamMaxRetries
	}
	s.parent = ctx
	s.ctx, s.cancel = context.WithCancel(ctx)
	return s
}

// Events is Stream as a Go iterator: it yields each event, or a final
// non-nil error, and closes the stream when the loop ends.
func (c *Client) Events(ctx context.Context, sessionID string, afterSeq uint64, opts *StreamOptions) iter.Seq2[Event, error] {
	return c.Stream(ctx, sessionID, afterSeq, opts).All()
}

// All yields the stream's events, then its error if it ended with one; it
// closes the stream when done.
func (s *Stream) All() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		defer s.Close()
		for s.Next() {
			if !yield(s.Event(), nil) {
				return
			}
		}
		if err := s.Err(); err != nil {
			yield(Event{}, err)
		}
	}
}

// Event returns the event Next advanced to.
func (s *Stream) Event() Event { return s.event }

// Err returns the error that ended the stream: nil after Close, the
// context's error when it ended, or the server's non-retryable status
// (*connect.Error; e.g. NOT_FOUND, OUT_OF_RANGE) or the last error once
// MaxRetries reconnects failed in a row.
func (s *Stream) Err() error { return s.err }

// CaughtUp reports whether the replay has finished on the current (or last)
// connection: events delivered from now on are live.
func (s *Stream) CaughtUp() bool { return s.caughtUp }

// HeadSeq is the session's head seq reported by the latest caught-up or
// heartbeat frame.
func (s *Stream) HeadSeq() uint64 { return s.headSeq }

// LastSeq is the seq of the last event delivered (the resume cursor).
func (s *Stream) LastSeq() uint64 { return s.cursor }

// Reconnects counts the reconnections made so far.
func (s *Stream) Reconnects() int { return s.reconnects }

// Close ends the stream; Next then returns false. Safe to call concurrently
// and more than once.
func (s *Stream) Close() error {
	s.cancel()
	return nil
}

// Next blocks until the next event and reports whether there is one. It
// returns false when the stream ends; see Err.
func (s *Stream) Next() bool {
	for !s.done {
		if s.ctx.Err() != nil {
			s.finish(nil)
			break
		}
		if s.conn == nil {
			if err := s.connect(); err != nil {
				s.retry(err)
				continue
			}
		}
		if s.conn.Receive() {
			s.failures = 0
			s.touch()
			switch f := s.conn.Msg().GetFrame().(type) {
			case *engramv1.StreamSessionEventsResponse_Event:
				ev := fromEvent(f.Event)
				if s.started && ev.Seq <= s.cursor {
					continue // already delivered before a reconnect: never twice
				}
				s.started = true
				s.cursor = ev.Seq
				s.event = ev
				return true
			case *engramv1.StreamSessionEventsResponse_CaughtUp:
				s.caughtUp = true
				s.advance(f.CaughtUp.GetHeadSeq())
				if s.opts.OnCaughtUp != nil {
					s.opts.OnCaughtUp(f.CaughtUp.GetHeadSeq())
				}
			case *engramv1.StreamSessionEventsResponse_Heartbeat:
				s.advance(f.Heartbeat.GetHeadSeq())
			}
			continue
		}
		err := s.conn.Err()
		if s.closeConn() {
			err = connect.NewError(connect.CodeUnavailable, errors.New("memory: no stream frame within the idle timeout"))
		} else if err == nil {
			// The server ended the stream without an error status: resume.
			err = connect.NewError(connect.CodeUnavailable, errors.New("memory: stream ended by the server"))
		} else {
			err = cutOffAsUnavailable(err)
		}
		s.retry(err)
	}
	return false
}

// retry handles the error that ended a connection attempt: it waits and
// lets Next reconnect, or ends the stream.
func (s *Stream) retry(err error) {
	s.closeConn()
	if s.ctx.Err() != nil {
		s.finish(nil)
		return
	}
	if !retryable(err) {
		s.finish(err)
		return
	}
	s.failures++
	if s.opts.MaxRetries > 0 && s.failures > s.opts.MaxRetries {
		s.finish(err)
		return
	}
	s.reconnects++
	if s.opts.OnReconnect != nil {
		if herr := s.opts.OnReconnect(s.reconnects, s.cursor, err); herr != nil {
			s.finish(herr)
			return
		}
	}
	if !s.sleep(s.backoff()) {
		s.finish(nil)
	}
}

// advance moves the cursor to a head seq the server has scanned past
// (events up to it were delivered or filtered out).
func (s *Stream) advance(head uint64) {
	s.headSeq = head
	if head > s.cursor {
		s.cursor = head
		s.started = true
	}
}

func (s *Stream) connect() error {
	req := &engramv1.StreamSessionEventsRequest{SessionId: s.sessionID, EventTypes: s.opts.EventTypes}
	if s.started {
		after := s.cursor
		req.AfterSeq = &after
	}
	s.caughtUp = false
	ctx, cancel := context.WithCancel(s.ctx)
	s.connCancel = cancel
	if s.opts.IdleTimeout > 0 {
		s.idleMu.Lock()
		s.idleFired = false
		s.idleMu.Unlock()
		s.idle = time.AfterFunc(s.opts.IdleTimeout, func() {
			s.idleMu.Lock()
			s.idleFired = true
			s.idleMu.Unlock()
			cancel()
		})
	}
	conn, err := s.client.rpc.StreamSessionEvents(ctx, connect.NewRequest(req))
	if err != nil {
		return err
	}
	s.conn = conn
	return nil
}

func (s *Stream) touch() {
	if s.idle != nil {
		s.idle.Reset(s.opts.IdleTimeout)
	}
}

// closeConn closes the current connection; it reports whether the idle
// timer ended it.
func (s *Stream) closeConn() bool {
	idle := false
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
		s.idleMu.Lock()
		idle = s.idleFired
		s.idleMu.Unlock()
	}
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
	if s.connCancel != nil {
		s.connCancel()
		s.connCancel = nil
	}
	return idle
}

// finish ends the stream with err; nil means the context ended (its error
// is reported) or Close was called (no error).
func (s *Stream) finish(err error) {
	s.closeConn()
	s.cancel()
	if err == nil {
		err = s.parent.Err()
	}
	s.done = true
	s.err = err
}

func (s *Stream) backoff() time.Duration {
	d := s.opts.InitialBackoff
	for i := 1; i < s.failures && d < s.opts.MaxBackoff; i++ {
		d *= 2
	}
	if d > s.opts.MaxBackoff {
		d = s.opts.MaxBackoff
	}
	// Jitter: 75%..100% of the delay.
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

func (s *Stream) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// cutOffAsUnavailable reports a stream cut off mid-message as what it is, the
// connection failing (UNAVAILABLE), not a client mistake: connect-go up to
// v1.21.0 (the newest that go 1.25 builds) says INVALID_ARGUMENT, later ones
// INTERNAL. Other errors pass through.
func cutOffAsUnavailable(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) && connect.CodeOf(err) == connect.CodeInvalidArgument {
		return connect.NewError(connect.CodeUnavailable, err)
	}
	return err
}

// retryable reports whether a stream error is worth a reconnect: the server
// going away or the transport failing, never a client mistake.
func retryable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeInternal,
		connect.CodeAborted, connect.CodeDeadlineExceeded:
		return true
	}
	return false
}
