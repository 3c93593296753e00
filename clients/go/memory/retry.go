package memory

import (
	"context"
	"time"

	"connectrpc.com/connect"
)

// The one retry policy of the Engram clients (Go, TypeScript, Python share
// these names and defaults; see README "Retries").
const (
	// DefaultRetries is how many times a call that is safe to repeat is
	// retried after UNAVAILABLE (a broken connection or a server restarting).
	DefaultRetries = 2
	// DefaultInitialBackoff is the first wait before a retry or reconnect; it
	// doubles per consecutive failure up to DefaultMaxBackoff.
	DefaultInitialBackoff = 100 * time.Millisecond
	// DefaultMaxBackoff caps the wait between retries or reconnects.
	DefaultMaxBackoff = 2 * time.Second
	// DefaultStreamMaxRetries bounds consecutive failed stream reconnects:
	// 8 waits of 0.1+0.2+0.4+0.8+1.6+2+2+2 s ride out about 9 s of outage
	// (a server restart or failover) and then report it instead of hiding it.
	DefaultStreamMaxRetries = 8
)

// WithRetries sets how many times calls that are safe to repeat (reads,
// GetOrCreateSession, appends without ExpectSeq, whose events carry an
// event id, WriteMemories, whose memories carry a memory id, and
// DeleteMemories) are retried after UNAVAILABLE. Default DefaultRetries; 0
// disables retries.
func WithRetries(n int) Option {
	return func(c *config) {
		if n < 0 {
			n = 0
		}
		c.retries = &n
	}
}

// backoffAfter is the wait before the failures-th consecutive retry (1-based).
func backoffAfter(failures int, initial, max time.Duration) time.Duration {
	d := initial
	for i := 1; i < failures && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// retrying runs call, repeating it after UNAVAILABLE at most retries times.
// Only for calls whose repetition cannot change the outcome.
func retrying[T any](ctx context.Context, retries int, call func() (T, error)) (T, error) {
	for failures := 1; ; failures++ {
		res, err := call()
		if err == nil || connect.CodeOf(err) != connect.CodeUnavailable || failures > retries || ctx.Err() != nil {
			return res, err
		}
		t := time.NewTimer(backoffAfter(failures, DefaultInitialBackoff, DefaultMaxBackoff))
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-t.C:
		}
	}
}

// retried runs a unary call that is safe to repeat (a read, or
// GetOrCreateSession), with c's retries.
func retried[Req, Res any](ctx context.Context, c *Client, call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req) (*connect.Response[Res], error) {
	return retrying(ctx, c.retries, func() (*connect.Response[Res], error) {
		return call(ctx, connect.NewRequest(msg))
	})
}
