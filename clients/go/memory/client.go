// Package memory is the Go client of Engram, a memory server for AI agents:
// sessions holding ordered, append-only event logs.
//
//	c := memory.New("http://127.0.0.1:8000")
//	s, _, err := c.GetOrCreateSession(ctx, memory.GetOrCreateSessionParams{SessionID: "demo"})
//	ev, err := c.AddEvent(ctx, s.SessionID, memory.EventInput{EventType: "user_message", Content: "hi"})
//
// The client speaks gRPC over h2c (HTTP/2 without TLS) by default, the fast
// path of the server; WithConnect selects the Connect protocol over
// HTTP/1.1. Errors returned by the server are *connect.Error values: use
// connect.CodeOf(err) for the status code and CurrentSeq / LastSeq for the
// seqs carried in trailers.
package memory

import (
	"context"
	"errors"
	"iter"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	engramv1 "github.com/engram-memory-server/engram/clients/go/gen/engram/v1"
	"github.com/engram-memory-server/engram/clients/go/gen/engram/v1/engramv1connect"
)

// Protocol is the wire protocol the client uses.
type Protocol int

const (
	// ProtocolGRPC is gRPC over HTTP/2 (h2c for http:// URLs). The default.
	ProtocolGRPC Protocol = iota
	// ProtocolConnect is the Connect protocol over HTTP/1.1.
	ProtocolConnect
	// ProtocolGRPCWeb is gRPC-Web over HTTP/1.1.
	ProtocolGRPCWeb
)

type config struct {
	protocol   Protocol
	httpClient connect.HTTPClient
	clientOpts []connect.ClientOption
	retries    *int
}

// Option configures a Client.
type Option func(*config)

// WithProtocol selects the wire protocol (ProtocolGRPC by default).
func WithProtocol(p Protocol) Option { return func(c *config) { c.protocol = p } }

// WithConnect selects the Connect protocol over HTTP/1.1.
func WithConnect() Option { return WithProtocol(ProtocolConnect) }

// WithHTTPClient replaces the HTTP client. With ProtocolGRPC it must speak
// HTTP/2 (for http:// URLs: h2c with prior knowledge).
func WithHTTPClient(h connect.HTTPClient) Option { return func(c *config) { c.httpClient = h } }

// WithClientOptions adds connect-go client options (interceptors, codecs, ...).
func WithClientOptions(opts ...connect.ClientOption) Option {
	return func(c *config) { c.clientOpts = append(c.clientOpts, opts...) }
}

// WithAPIKey sends "authorization: Bearer <key>" on every call and stream,
// for a server running with MEMORY_AUTH=true. A missing or bad key fails with
// connect.CodeUnauthenticated, a key whose role or apps do not allow the call
// with connect.CodePermissionDenied.
func WithAPIKey(key string) Option {
	return WithClientOptions(connect.WithInterceptors(bearerInterceptor("Bearer " + key)))
}

// bearerInterceptor sets the authorization header on unary calls and streams.
type bearerInterceptor string

func (b bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", string(b))
		return next(ctx, req)
	}
}

func (b bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", string(b))
		return conn
	}
}

func (b bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Client calls an Engram server. It is safe for concurrent use.
type Client struct {
	rpc     engramv1connect.MemoryServiceClient
	retries int // see WithRetries
}

// New returns a client of the server at baseURL (e.g. "http://127.0.0.1:8000").
func New(baseURL string, opts ...Option) *Client {
	cfg := config{}
	for _, o := range opts {
		o(&cfg)
	}
	var copts []connect.ClientOption
	switch cfg.protocol {
	case ProtocolGRPC:
		copts = append(copts, connect.WithGRPC())
	case ProtocolGRPCWeb:
		copts = append(copts, connect.WithGRPCWeb())
	}
	copts = append(copts, cfg.clientOpts...)
	if cfg.httpClient == nil {
		cfg.httpClient = defaultHTTPClient(cfg.protocol == ProtocolGRPC)
	}
	retries := DefaultRetries
	if cfg.retries != nil {
		retries = *cfg.retries
	}
	return &Client{rpc: engramv1connect.NewMemoryServiceClient(cfg.httpClient, baseURL, copts...), retries: retries}
}

// NewFromService wraps a generated client (for tests or custom transports).
func NewFromService(rpc engramv1connect.MemoryServiceClient) *Client {
	return &Client{rpc: rpc, retries: DefaultRetries}
}

// Service returns the generated connect-go client for direct use.
func (c *Client) Service() engramv1connect.MemoryServiceClient { return c.rpc }

func defaultHTTPClient(http2 bool) *http.Client {
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	if http2 {
		// gRPC needs HTTP/2: h2c with prior knowledge for http://, ALPN for https://.
		t.Protocols = new(http.Protocols)
		t.Protocols.SetHTTP2(true)
		t.Protocols.SetUnencryptedHTTP2(true)
		// Detect dead connections (a long-lived stream would otherwise hang).
		t.HTTP2 = &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}
	} else {
		t.ForceAttemptHTTP2 = true // HTTP/2 over TLS when offered; HTTP/1.1 for http://
	}
	return &http.Client{Transport: t}
}

// CreateSessionParams names the owner of a new session.
type CreateSessionParams struct {
	AppName   string         // required
	UserID    string         // required
	SessionID string         // optional; the server generates a UUID when empty
	Metadata  map[string]any // optional
}

// CreateSession creates a session; ALREADY_EXISTS when SessionID is taken.
func (c *Client) CreateSession(ctx context.Context, p CreateSessionParams) (*Session, error) {
	md, err := toStruct(p.Metadata)
	if err != nil {
		return nil, invalid(err)
	}
	req := &engramv1.CreateSessionRequest{AppName: p.AppName, UserId: p.UserID, Metadata: md}
	if p.SessionID != "" {
		req.SessionId = &p.SessionID
	}
	res, err := c.rpc.CreateSession(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return fromSession(res.Msg.GetSession()), nil
}

// GetOrCreateSessionParams names a session and the owner used if it is created.
type GetOrCreateSessionParams struct {
	SessionID string         // required
	AppName   string         // default "agent"
	UserID    string         // default "user"
	Metadata  map[string]any // used when the session is created
}

// GetOrCreateSession returns the session, creating it when absent; created
// tells whether this call created it.
func (c *Client) GetOrCreateSession(ctx context.Context, p GetOrCreateSessionParams) (session *Session, created bool, err error) {
	md, err := toStruct(p.Metadata)
	if err != nil {
		return nil, false, invalid(err)
	}
	res, err := retried(ctx, c, c.rpc.GetOrCreateSession, &engramv1.GetOrCreateSessionRequest{
		SessionId: p.SessionID, AppName: p.AppName, UserId: p.UserID, Metadata: md,
	})
	if err != nil {
		return nil, false, err
	}
	return fromSession(res.Msg.GetSession()), res.Msg.GetCreated(), nil
}

// GetSession returns one session, or a NOT_FOUND error.
func (c *Client) GetSession(ctx context.Context, sessionID string) (*Session, error) {
	res, err := retried(ctx, c, c.rpc.GetSession, &engramv1.GetSessionRequest{SessionId: sessionID})
	if err != nil {
		return nil, err
	}
	return fromSession(res.Msg.GetSession()), nil
}

// ListSessionsParams filters and pages sessions.
type ListSessionsParams struct {
	AppName   string // only this app's sessions when set
	UserID    string // only this user's sessions when set
	PageSize  uint32 // 1..1000; 100 when 0
	PageToken string // from a previous page's NextPageToken
}

// SessionPage is one page of sessions, in session_id order.
type SessionPage struct {
	Sessions      []*Session
	NextPageToken string // empty on the last page
}

// ListSessions returns one page of sessions. See Sessions for an iterator
// over every page.
func (c *Client) ListSessions(ctx context.Context, p ListSessionsParams) (*SessionPage, error) {
	req := &engramv1.ListSessionsRequest{PageSize: p.PageSize, PageToken: p.PageToken}
	if p.AppName != "" {
		req.AppName = &p.AppName
	}
	if p.UserID != "" {
		req.UserId = &p.UserID
	}
	res, err := retried(ctx, c, c.rpc.ListSessions, req)
	if err != nil {
		return nil, err
	}
	page := &SessionPage{NextPageToken: res.Msg.GetNextPageToken()}
	for _, s := range res.Msg.GetSessions() {
		page.Sessions = append(page.Sessions, fromSession(s))
	}
	return page, nil
}

// Sessions iterates over every session matching p, fetching pages as
// needed (starting at p.PageToken). Iteration stops at the first error,
// which is yielded with a nil session.
func (c *Client) Sessions(ctx context.Context, p ListSessionsParams) iter.Seq2[*Session, error] {
	return func(yield func(*Session, error) bool) {
		seen := map[string]bool{}
		for {
			page, err := c.ListSessions(ctx, p)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, s := range page.Sessions {
				if !yield(s, nil) {
					return
				}
			}
			if page.NextPageToken == "" || seen[page.NextPageToken] {
				return
			}
			seen[page.NextPageToken] = true // never loop on a repeated token
			p.PageToken = page.NextPageToken
		}
	}
}

// DeleteSession removes a session and its events; deleted is false when no
// such session existed.
func (c *Client) DeleteSession(ctx context.Context, sessionID string) (deleted bool, err error) {
	res, err := c.rpc.DeleteSession(ctx, connect.NewRequest(&engramv1.DeleteSessionRequest{SessionId: sessionID}))
	if err != nil {
		return false, err
	}
	return res.Msg.GetDeleted(), nil
}

// UpdateSessionParams says what UpdateSession changes; nil fields stay as
// they are.
type UpdateSessionParams struct {
	Metadata   map[string]any // replaces the metadata when non-nil
	StateDelta map[string]any // state changes, as EventInput.StateDelta
	// StateRemovals are state keys deleted before StateDelta applies.
	StateRemovals []string
	// StateNullsAreValues stores StateDelta's nil values as values.
	StateNullsAreValues bool
	// ExpectedVersion makes the update succeed only at this session version;
	// otherwise FAILED_PRECONDITION and CurrentVersion(err) tells the current.
	ExpectedVersion *uint64
}

// UpdateSession replaces a session's metadata and/or applies a state delta,
// and returns the session with its merged state. Not retried on a lost
// connection: the update may have been applied.
func (c *Client) UpdateSession(ctx context.Context, sessionID string, p UpdateSessionParams) (*Session, error) {
	req := &engramv1.UpdateSessionRequest{
		SessionId:           sessionID,
		ExpectedVersion:     p.ExpectedVersion,
		StateRemovals:       p.StateRemovals,
		StateNullsAreValues: p.StateNullsAreValues,
	}
	var err error
	if p.Metadata != nil {
		if req.Metadata, err = toStruct(p.Metadata); err != nil {
			return nil, invalid(err)
		}
	}
	if p.StateDelta != nil {
		if req.StateDelta, err = toStateDelta(p.StateDelta); err != nil {
			return nil, invalid(err)
		}
	}
	res, err := c.rpc.UpdateSession(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return fromSession(res.Msg.GetSession()), nil
}

// AppendOption configures AddEvent and AddEvents.
type AppendOption func(*appendConfig)

type appendConfig struct{ expectedSeq *uint64 }

// retries is how often c may retry this append: never with ExpectSeq, since
// a retry after a lost success would fail on the seq the append itself moved.
func (a appendConfig) retries(c *Client) int {
	if a.expectedSeq != nil {
		return 0
	}
	return c.retries
}

// ExpectSeq makes the append succeed only when the session's head seq equals
// seq (0: no event yet); otherwise the error is FAILED_PRECONDITION and
// CurrentSeq(err) returns the current head.
func ExpectSeq(seq uint64) AppendOption {
	return func(c *appendConfig) { c.expectedSeq = &seq }
}

// AddEvent appends one event and returns it with its seq. Re-sending an
// event with the same EventID returns the originally stored event. An event
// without EventID gets a UUID before the first try, so an append retried
// after a lost response (see WithRetries) is stored once; appends with
// ExpectSeq are not retried.
func (c *Client) AddEvent(ctx context.Context, sessionID string, ev EventInput, opts ...AppendOption) (Event, error) {
	var cfg appendConfig
	for _, o := range opts {
		o(&cfg)
	}
	in, err := toEventInput(ev)
	if err != nil {
		return Event{}, invalid(err)
	}
	req := &engramv1.AddEventRequest{SessionId: sessionID, Event: in, ExpectedSeq: cfg.expectedSeq}
	res, err := retrying(ctx, cfg.retries(c), func() (*connect.Response[engramv1.AddEventResponse], error) {
		return c.rpc.AddEvent(ctx, connect.NewRequest(req))
	})
	if err != nil {
		return Event{}, err
	}
	return fromEvent(res.Msg.GetEvent()), nil
}

// AddEvents appends a batch atomically (all or none) and returns the stored
// events in seq order. Events without EventID get a UUID before the first
// try, as in AddEvent.
func (c *Client) AddEvents(ctx context.Context, sessionID string, events []EventInput, opts ...AppendOption) ([]Event, error) {
	var cfg appendConfig
	for _, o := range opts {
		o(&cfg)
	}
	ins := make([]*engramv1.EventInput, len(events))
	for i, ev := range events {
		in, err := toEventInput(ev)
		if err != nil {
			return nil, invalid(err)
		}
		ins[i] = in
	}
	req := &engramv1.AddEventsRequest{SessionId: sessionID, Events: ins, ExpectedSeq: cfg.expectedSeq}
	res, err := retrying(ctx, cfg.retries(c), func() (*connect.Response[engramv1.AddEventsResponse], error) {
		return c.rpc.AddEvents(ctx, connect.NewRequest(req))
	})
	if err != nil {
		return nil, err
	}
	return fromEvents(res.Msg.GetEvents()), nil
}

// GetEventsParams selects the events GetSessionEvents returns.
type GetEventsParams struct {
	EventTypes []string // only these types when non-empty
	// AfterSeq returns only events with seq > *AfterSeq (OUT_OF_RANGE when
	// some of them were evicted). Nil: from the oldest retained event.
	AfterSeq  *uint64
	Limit     uint32 // 1..1000; 100 when 0
	PageToken string // from a previous page; overrides AfterSeq
	Tail      uint32 // > 0: only the newest Tail matching events
}

// After returns a pointer to seq, for GetEventsParams.AfterSeq.
func After(seq uint64) *uint64 { return &seq }

// EventPage is one page of a session's log.
type EventPage struct {
	Events        []Event
	NextPageToken string // empty when no more events are stored now
	HeadSeq       uint64 // the session's head seq when the page was read
}

// GetSessionEvents reads a page of a session's events in seq order.
func (c *Client) GetSessionEvents(ctx context.Context, sessionID string, p GetEventsParams) (*EventPage, error) {
	res, err := retried(ctx, c, c.rpc.GetSessionEvents, &engramv1.GetSessionEventsRequest{
		SessionId: sessionID, EventTypes: p.EventTypes, AfterSeq: p.AfterSeq,
		Limit: p.Limit, PageToken: p.PageToken, Tail: p.Tail,
	})
	if err != nil {
		return nil, err
	}
	return &EventPage{
		Events:        fromEvents(res.Msg.GetEvents()),
		NextPageToken: res.Msg.GetNextPageToken(),
		HeadSeq:       res.Msg.GetHeadSeq(),
	}, nil
}

// SessionEvents iterates over a session's stored events page by page
// (p.Tail must be 0). It stops at the current end of the log; use Stream
// to follow new events live.
func (c *Client) SessionEvents(ctx context.Context, sessionID string, p GetEventsParams) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		seen := map[string]bool{}
		for {
			page, err := c.GetSessionEvents(ctx, sessionID, p)
			if err != nil {
				yield(Event{}, err)
				return
			}
			for _, e := range page.Events {
				if !yield(e, nil) {
					return
				}
			}
			if page.NextPageToken == "" || seen[page.NextPageToken] || len(page.Events) == 0 {
				return
			}
			seen[page.NextPageToken] = true
			p.PageToken = page.NextPageToken
		}
	}
}

// ListEvents returns the newest limit events (100 when 0), oldest first, of
// one session, or of all sessions when sessionID is empty.
func (c *Client) ListEvents(ctx context.Context, sessionID string, limit uint32) ([]Event, error) {
	req := &engramv1.ListEventsRequest{Limit: limit}
	if sessionID != "" {
		req.SessionId = &sessionID
	}
	res, err := retried(ctx, c, c.rpc.ListEvents, req)
	if err != nil {
		return nil, err
	}
	return fromEvents(res.Msg.GetEvents()), nil
}

// ToolCall is one tool invocation of an assistant message.
type ToolCall struct {
	ID        string `json:"id"`
	Type      string `json:"type"` // always "function"
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // JSON text
}

// Stats are totals over the whole store.
type Stats struct {
	TotalSessions       uint64
	TotalEvents         uint64
	AvgEventsPerSession float64
	Backend             string // local, null, redis or postgres
}

// Stats reports totals over the whole store.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	res, err := retried(ctx, c, c.rpc.GetStats, &engramv1.GetStatsRequest{})
	if err != nil {
		return nil, err
	}
	return &Stats{
		TotalSessions:       res.Msg.GetTotalSessions(),
		TotalEvents:         res.Msg.GetTotalEvents(),
		AvgEventsPerSession: res.Msg.GetAvgEventsPerSession(),
		Backend:             res.Msg.GetBackend(),
	}, nil
}

// Cleanup removes the sessions not updated within maxAge (> 0) and returns
// how many were removed.
func (c *Client) Cleanup(ctx context.Context, maxAge time.Duration) (removed uint64, err error) {
	res, err := c.rpc.Cleanup(ctx, connect.NewRequest(&engramv1.CleanupRequest{MaxAge: durationpb.New(maxAge)}))
	if err != nil {
		return 0, err
	}
	return res.Msg.GetRemovedSessions(), nil
}

// CleanupFilter restricts CleanupWhere to one app and/or one user; an empty
// field does not filter.
type CleanupFilter struct {
	AppName string
	UserID  string
}

// CleanupWhere removes the sessions matching filter that were not updated
// within maxAge (> 0) and returns how many were removed.
func (c *Client) CleanupWhere(ctx context.Context, maxAge time.Duration, filter CleanupFilter) (removed uint64, err error) {
	req := &engramv1.CleanupRequest{MaxAge: durationpb.New(maxAge)}
	if filter.AppName != "" {
		req.AppName = &filter.AppName
	}
	if filter.UserID != "" {
		req.UserId = &filter.UserID
	}
	res, err := c.rpc.Cleanup(ctx, connect.NewRequest(req))
	if err != nil {
		return 0, err
	}
	return res.Msg.GetRemovedSessions(), nil
}

// UserDataErased is what one DeleteUserData call removed.
type UserDataErased struct {
	RemovedSessions uint64
	RemovedEvents   uint64
	RemovedMemories uint64 // long-term memories of the user (user_id equal to it)
}

// DeleteUserData erases one user of one app: every session and event of
// theirs. It is safe to repeat: a call that fails midway leaves whole
// sessions, and calling again removes the rest (its counts are what that
// call removed).
func (c *Client) DeleteUserData(ctx context.Context, appName, userID string) (*UserDataErased, error) {
	res, err := c.rpc.DeleteUserData(ctx, connect.NewRequest(&engramv1.DeleteUserDataRequest{AppName: appName, UserId: userID}))
	if err != nil {
		return nil, err
	}
	return &UserDataErased{
		RemovedSessions: res.Msg.GetRemovedSessions(),
		RemovedEvents:   res.Msg.GetRemovedEvents(),
		RemovedMemories: res.Msg.GetRemovedMemories(),
	}, nil
}

// invalid wraps a client-side encoding problem as INVALID_ARGUMENT.
func invalid(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	return connect.NewError(connect.CodeInvalidArgument, err)
}
