package memory

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	engramv1 "github.com/engram-memory-server/engram/clients/go/gen/engram/v1"
)

// ScopeMatch says how a Scope selects memories.
type ScopeMatch int32

const (
	// ScopeDefault leaves it to the RPC: ScopeVisible for SearchMemories and
	// WatchMemories, ScopeWithin for ListMemories and DeleteMemories.
	ScopeDefault ScopeMatch = 0
	// ScopeVisible selects what a caller in the scope may recall: each
	// dimension of the memory is unset (shared) or equal to the scope's.
	ScopeVisible ScopeMatch = 1
	// ScopeWithin selects everything inside the scope: dimensions set in
	// the scope are equal; the others match any value.
	ScopeWithin ScopeMatch = 2
	// ScopeExact selects exactly that scope: unset matches only unset.
	ScopeExact ScopeMatch = 3
)

// Scope names memories: an app and any subset of user, agent and session.
// An empty dimension is unset (a memory without it is shared across it).
type Scope struct {
	AppName   string // required
	UserID    string
	AgentID   string
	SessionID string
	Match     ScopeMatch // how the scope selects memories
}

// Fact is a memory's structured form: subject, predicate, object.
type Fact struct {
	Subject   string `json:"subject"`
	Predicate string `json:"predicate"`
	Object    string `json:"object"`
}

// MemorySource names the events a memory was drawn from.
type MemorySource struct {
	SessionID string `json:"session_id"`
	FromSeq   uint64 `json:"from_seq"` // 0 when unknown
	ToSeq     uint64 `json:"to_seq"`   // 0 when unknown
}

// Memory is one long-term memory, as written and as stored. Empty UserID,
// AgentID and SessionID mean shared across that dimension.
type Memory struct {
	// MemoryID is the idempotency key: writing the same id with the same
	// content again returns the stored original. Optional on write; the
	// client assigns a UUID when empty, before the first try, so its
	// retries are idempotent.
	MemoryID  string `json:"memory_id"`
	AppName   string `json:"app_name"` // required
	UserID    string `json:"user_id,omitempty"`
	AgentID   string `json:"agent_id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	Text      string `json:"text"` // required
	Fact      *Fact  `json:"fact,omitempty"`
	// Key is the supersession key: a newer memory with the same key in the
	// same scope closes this one's validity. Empty: the fact's subject and
	// predicate, when both are set.
	Key        string         `json:"key,omitempty"`
	Topics     []string       `json:"topics,omitempty"`
	Importance float32        `json:"importance"` // 0..1
	Pinned     bool           `json:"pinned"`     // a core memory: Recall always includes it
	Metadata   map[string]any `json:"metadata,omitempty"`
	Source     *MemorySource  `json:"source,omitempty"`
	CreatedAt  time.Time      `json:"created_at"` // set by the server
	// ValidFrom is when it holds from; CreatedAt when zero on write.
	ValidFrom time.Time `json:"valid_from"`
	// InvalidAt is when it stopped holding; zero while it holds.
	InvalidAt time.Time `json:"invalid_at"`
	// SupersededBy is the memory whose write closed this one (set by the server).
	SupersededBy string    `json:"superseded_by,omitempty"`
	Embedding    []float32 `json:"embedding,omitempty"`
}

// Valid reports whether the memory holds now (its validity is still open).
func (m Memory) Valid() bool { return m.InvalidAt.IsZero() }

// MemoriesWritten is what WriteMemories stored.
type MemoriesWritten struct {
	Memories   []Memory // in input order (the originals of retried ids)
	Superseded []Memory // memories whose validity the write closed, as they are now
}

// MemoryFilter selects memories for SearchMemories and ListMemories.
type MemoryFilter struct {
	Scope
	Topics         []string  // at least one of these topics, when non-empty
	AsOf           time.Time // only memories valid then; now when zero
	IncludeInvalid bool      // also memories no longer (or not yet) valid; not with AsOf
	Pinned         *bool     // only pinned (true) or unpinned (false), when set
}

// SearchMemoriesParams is a SearchMemories query.
type SearchMemoriesParams struct {
	MemoryFilter
	Query          string    // text to rank by; empty ranks by importance and recency
	TopK           uint32    // 1..100; 10 when 0
	QueryEmbedding []float32 // optional, for vector similarity
	// IncludeEmbeddings returns each memory with its embedding; left out by
	// default (ranking uses it either way).
	IncludeEmbeddings bool
}

// ScoredMemory is a search result.
type ScoredMemory struct {
	Memory       Memory
	Score        float64 // the fused score it was ranked by (higher first)
	LexicalScore float64 // BM25 score for the query; 0 when it did not match
	VectorScore  float64 // cosine similarity with QueryEmbedding; 0 when either is missing
}

// ListMemoriesParams filters and pages ListMemories.
type ListMemoriesParams struct {
	MemoryFilter
	Key       string // only memories with this explicit key
	Subject   string // only memories whose fact has this subject
	Predicate string // only memories whose fact has this predicate
	PageSize  uint32 // 1..1000; 100 when 0
	PageToken string // from a previous page's NextPageToken
	// IncludeEmbeddings returns each memory with its embedding (an export, a
	// re-index); left out by default.
	IncludeEmbeddings bool
}

// MemoryPage is one page of memories, newest first.
type MemoryPage struct {
	Memories      []Memory
	NextPageToken string // empty on the last page
}

// DeleteMemoriesParams names what DeleteMemories forgets: MemoryIDs, or,
// without ids, every memory the Scope selects (ScopeWithin by default; with
// no user, agent or session, Match must be given: ScopeWithin forgets the
// whole app, ScopeExact its app-wide memories).
type DeleteMemoriesParams struct {
	Scope
	MemoryIDs []string
}

// ChangeKind says what a MemoryChange reports.
type ChangeKind int

const (
	// ChangeStarted is the first change of a watch: every change after it
	// is delivered.
	ChangeStarted ChangeKind = iota + 1
	// ChangeWritten: Memory was written.
	ChangeWritten
	// ChangeSuperseded: Memory's validity was closed by a newer one (its new state).
	ChangeSuperseded
	// ChangeDeleted: the memories DeletedIDs were forgotten.
	ChangeDeleted
)

// String names the kind as the wire's frame does.
func (k ChangeKind) String() string {
	switch k {
	case ChangeStarted:
		return "started"
	case ChangeWritten:
		return "written"
	case ChangeSuperseded:
		return "superseded"
	case ChangeDeleted:
		return "deleted"
	}
	return fmt.Sprintf("ChangeKind(%d)", int(k))
}

// MemoryChange is one change WatchMemories delivers.
type MemoryChange struct {
	Kind       ChangeKind
	Memory     *Memory  // ChangeWritten and ChangeSuperseded
	DeletedIDs []string // ChangeDeleted
	// Cursor is the change's number in its app (on ChangeStarted: the
	// number the watch starts after): WatchOptions.After resumes after it.
	Cursor uint64
}

// WatchOptions tune WatchMemories. The zero value is usable.
type WatchOptions struct {
	// After, when set, replays the app's changes after this cursor that the
	// server still retains (the newest 10,000 per app), then goes live.
	// An older cursor fails with OUT_OF_RANGE naming "after".
	After *uint64
	// InitialBackoff is the first wait before reconnecting (default 100ms);
	// it doubles per consecutive failure up to MaxBackoff (default 2s).
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// MaxRetries bounds consecutive failed reconnects. 0:
	// DefaultStreamMaxRetries (8); negative: unlimited (until ctx ends).
	MaxRetries int
	// OnReconnect, when set, is called before each reconnect with the
	// attempt number, the cursor the watch resumes after and the error that
	// ended the previous connection; a non-nil error ends the watch with it.
	OnReconnect func(attempt int, after uint64, cause error) error
}

// SearchEventsParams is an episodic search over the events of an app's (or
// one user's) sessions.
type SearchEventsParams struct {
	AppName    string   // required
	UserID     string   // only this user's sessions, when set
	Query      string   // required
	TopK       uint32   // 1..100; 10 when 0
	EventTypes []string // only these event types, when non-empty
}

// EventHit is one event matching SearchEvents.
type EventHit struct {
	SessionID string
	Seq       uint64
	Snippet   string  // the event's text around the first match
	Score     float64 // BM25 (higher first)
	Event     Event
}

// RecallParams tune Recall; the zero value is usable.
type RecallParams struct {
	Query          string    // text to rank memories by (usually the latest user message)
	TokenBudget    uint32    // most tokens of the whole recall; 4000 when 0
	AgentID        string    // the calling agent: other agents' memories are left out
	Tokenizer      string    // o200k_base (default), cl100k_base or chars4
	TopK           uint32    // most relevant memories considered, 1..100; 10 when 0
	QueryEmbedding []float32 // optional, for vector similarity
	// IncludeEmbeddings returns each memory with its embedding; left out by
	// default, as the answer is for a prompt.
	IncludeEmbeddings bool
}

// Recall is everything an agent should know before its next model call,
// within one token budget.
type Recall struct {
	Text          string         // every part rendered as one block, ready for a system prompt
	Pinned        []Memory       // pinned memories that fit, most important first
	Memories      []ScoredMemory // relevant memories that fit, best first
	Context       *ConversationContext
	PinnedTokens  uint32
	MemoryTokens  uint32
	ContextTokens uint32
	TokensUsed    uint32 // of Text, at most the budget
	Tokenizer     string
}

// WriteMemories stores a batch of memories atomically (all or none) and
// returns them as stored. Memories without MemoryID get a UUID before the
// first try, so the write is retried after UNAVAILABLE (see WithRetries)
// and stored once. A memory with the supersession key of a valid one in the
// same scope closes that one's validity (returned in Superseded).
func (c *Client) WriteMemories(ctx context.Context, memories []Memory) (*MemoriesWritten, error) {
	in := make([]*engramv1.Memory, len(memories))
	for i, m := range memories {
		pm, err := toMemory(m)
		if err != nil {
			return nil, invalid(fmt.Errorf("memories[%d].%w", i, err))
		}
		in[i] = pm
	}
	res, err := retried(ctx, c, c.rpc.WriteMemories, &engramv1.WriteMemoriesRequest{Memories: in})
	if err != nil {
		return nil, err
	}
	return &MemoriesWritten{Memories: fromMemories(res.Msg.GetMemories()), Superseded: fromMemories(res.Msg.GetSuperseded())}, nil
}

// GetMemory returns one memory, or a NOT_FOUND error (also for a memory
// the API key may not see).
func (c *Client) GetMemory(ctx context.Context, appName, memoryID string) (*Memory, error) {
	res, err := retried(ctx, c, c.rpc.GetMemory, &engramv1.GetMemoryRequest{AppName: appName, MemoryId: memoryID})
	if err != nil {
		return nil, err
	}
	m := fromMemory(res.Msg.GetMemory())
	return &m, nil
}

// SearchMemories ranks the memories of a scope by relevance to p.Query
// (lexical, fused with vector similarity, recency and importance), best
// first. The scope selects what a caller in it may recall unless
// p.Match says otherwise.
func (c *Client) SearchMemories(ctx context.Context, p SearchMemoriesParams) ([]ScoredMemory, error) {
	req := &engramv1.SearchMemoriesRequest{
		AppName: p.AppName, UserId: optional(p.UserID), AgentId: optional(p.AgentID), SessionId: optional(p.SessionID),
		ScopeMatch: engramv1.ScopeMatch(p.Match), Query: p.Query, TopK: p.TopK, Topics: p.Topics,
		AsOf: timestamp(p.AsOf), IncludeInvalid: p.IncludeInvalid, Pinned: p.Pinned, QueryEmbedding: p.QueryEmbedding,
		IncludeEmbeddings: p.IncludeEmbeddings,
	}
	res, err := retried(ctx, c, c.rpc.SearchMemories, req)
	if err != nil {
		return nil, err
	}
	out := make([]ScoredMemory, len(res.Msg.GetResults()))
	for i, r := range res.Msg.GetResults() {
		out[i] = fromScoredMemory(r)
	}
	return out, nil
}

// ListMemories returns one page of a scope's memories, newest first. See
// Memories for an iterator over every page.
func (c *Client) ListMemories(ctx context.Context, p ListMemoriesParams) (*MemoryPage, error) {
	req := &engramv1.ListMemoriesRequest{
		AppName: p.AppName, UserId: optional(p.UserID), AgentId: optional(p.AgentID), SessionId: optional(p.SessionID),
		ScopeMatch: engramv1.ScopeMatch(p.Match), Topics: p.Topics, AsOf: timestamp(p.AsOf),
		IncludeInvalid: p.IncludeInvalid, Pinned: p.Pinned,
		Key: optional(p.Key), Subject: optional(p.Subject), Predicate: optional(p.Predicate),
		PageSize: p.PageSize, PageToken: p.PageToken, IncludeEmbeddings: p.IncludeEmbeddings,
	}
	res, err := retried(ctx, c, c.rpc.ListMemories, req)
	if err != nil {
		return nil, err
	}
	return &MemoryPage{Memories: fromMemories(res.Msg.GetMemories()), NextPageToken: res.Msg.GetNextPageToken()}, nil
}

// Memories iterates over every memory matching p, newest first, fetching
// pages as needed (starting at p.PageToken). Iteration stops at the first
// error, which is yielded with a zero Memory.
func (c *Client) Memories(ctx context.Context, p ListMemoriesParams) iter.Seq2[Memory, error] {
	return func(yield func(Memory, error) bool) {
		seen := map[string]bool{}
		for {
			page, err := c.ListMemories(ctx, p)
			if err != nil {
				yield(Memory{}, err)
				return
			}
			for _, m := range page.Memories {
				if !yield(m, nil) {
					return
				}
			}
			if page.NextPageToken == "" || seen[page.NextPageToken] || len(page.Memories) == 0 {
				return
			}
			seen[page.NextPageToken] = true // never loop on a repeated token
			p.PageToken = page.NextPageToken
		}
	}
}

// DeleteMemories forgets memories by id or by scope and returns how many
// this call removed. Forgetting twice forgets the same, so the call is
// retried after UNAVAILABLE; after a lost response the count is what the
// retry removed.
func (c *Client) DeleteMemories(ctx context.Context, p DeleteMemoriesParams) (deleted uint64, err error) {
	req := &engramv1.DeleteMemoriesRequest{
		AppName: p.AppName, MemoryIds: p.MemoryIDs,
		UserId: optional(p.UserID), AgentId: optional(p.AgentID), SessionId: optional(p.SessionID),
		ScopeMatch: engramv1.ScopeMatch(p.Match),
	}
	res, err := retried(ctx, c, c.rpc.DeleteMemories, req)
	if err != nil {
		return 0, err
	}
	return res.Msg.GetDeletedCount(), nil
}

// WatchMemories follows the writes, supersessions and deletions of a
// scope's memories (ScopeVisible unless scope.Match says otherwise). The
// first change is ChangeStarted; with options.After, the retained changes
// after it are replayed first. Each change carries its Cursor; heartbeats
// are consumed. When the connection breaks (UNAVAILABLE or a transport
// error) it reconnects with bounded exponential backoff and resumes after
// the last cursor it saw, so nothing is skipped or repeated (ChangeStarted
// is yielded once). Other errors (OUT_OF_RANGE: the resume point is older
// than the server's change log; list or search, then watch again) and
// exhausted retries are yielded last, as is ctx's error when it ends.
func (c *Client) WatchMemories(ctx context.Context, scope Scope, options ...WatchOptions) iter.Seq2[MemoryChange, error] {
	var o WatchOptions
	if len(options) > 0 {
		o = options[0]
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.MaxBackoff < o.InitialBackoff {
		o.MaxBackoff = o.InitialBackoff
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = DefaultStreamMaxRetries
	}
	return func(yield func(MemoryChange, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // leaving the loop early ends the call
		var cursor *uint64
		if o.After != nil {
			after := *o.After
			cursor = &after
		}
		started, failures := false, 0
		for attempt := 0; ; attempt++ {
			req := &engramv1.WatchMemoriesRequest{
				AppName: scope.AppName, UserId: optional(scope.UserID), AgentId: optional(scope.AgentID),
				SessionId: optional(scope.SessionID), ScopeMatch: engramv1.ScopeMatch(scope.Match), After: cursor,
			}
			stop, err := c.watchOnce(ctx, req, func(change MemoryChange) bool {
				failures = 0 // a frame arrived: this connection works
				if change.Kind == ChangeStarted {
					if cursor == nil {
						at := change.Cursor
						cursor = &at
					}
					if started {
						return true
					}
					started = true
					return yield(change, nil)
				}
				if cursor != nil && change.Cursor <= *cursor {
					return true // never repeat
				}
				at := change.Cursor
				cursor = &at
				return yield(change, nil)
			})
			if stop {
				return
			}
			if ctx.Err() != nil {
				yield(MemoryChange{}, ctx.Err())
				return
			}
			if !retryable(err) {
				yield(MemoryChange{}, err)
				return
			}
			failures++
			if o.MaxRetries > 0 && failures > o.MaxRetries {
				yield(MemoryChange{}, err)
				return
			}
			var after uint64
			if cursor != nil {
				after = *cursor
			}
			if o.OnReconnect != nil {
				if herr := o.OnReconnect(attempt+1, after, err); herr != nil {
					yield(MemoryChange{}, herr)
					return
				}
			}
			d := o.InitialBackoff
			for i := 1; i < failures && d < o.MaxBackoff; i++ {
				d *= 2
			}
			t := time.NewTimer(min(d, o.MaxBackoff))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				yield(MemoryChange{}, ctx.Err())
				return
			}
		}
	}
}

// watchOnce runs one watch call, handing each change to deliver; it reports
// whether the caller stopped, and otherwise the error that ended the call.
func (c *Client) watchOnce(ctx context.Context, req *engramv1.WatchMemoriesRequest, deliver func(MemoryChange) bool) (bool, error) {
	conn, err := c.rpc.WatchMemories(ctx, connect.NewRequest(req))
	if err != nil {
		return false, cutOffAsUnavailable(err)
	}
	defer conn.Close()
	for conn.Receive() {
		res := conn.Msg()
		change := MemoryChange{Cursor: res.GetCursor()}
		switch f := res.GetFrame().(type) {
		case *engramv1.WatchMemoriesResponse_Started:
			change.Kind, change.Cursor = ChangeStarted, f.Started.GetCursor()
		case *engramv1.WatchMemoriesResponse_Written:
			m := fromMemory(f.Written)
			change.Kind, change.Memory = ChangeWritten, &m
		case *engramv1.WatchMemoriesResponse_Superseded:
			m := fromMemory(f.Superseded)
			change.Kind, change.Memory = ChangeSuperseded, &m
		case *engramv1.WatchMemoriesResponse_Deleted:
			change.Kind, change.DeletedIDs = ChangeDeleted, f.Deleted.GetMemoryIds()
		default:
			continue // heartbeats, and frames this client does not know
		}
		if !deliver(change) {
			return true, nil
		}
	}
	err = conn.Err()
	if err == nil {
		return false, connect.NewError(connect.CodeUnavailable, errors.New("memory: watch ended by the server"))
	}
	return false, cutOffAsUnavailable(err)
}

// SearchEvents searches the events of an app's (or one user's) sessions by
// text (episodic recall), best first.
func (c *Client) SearchEvents(ctx context.Context, p SearchEventsParams) ([]EventHit, error) {
	req := &engramv1.SearchEventsRequest{AppName: p.AppName, UserId: optional(p.UserID), Query: p.Query, TopK: p.TopK, EventTypes: p.EventTypes}
	res, err := retried(ctx, c, c.rpc.SearchEvents, req)
	if err != nil {
		return nil, err
	}
	out := make([]EventHit, len(res.Msg.GetHits()))
	for i, h := range res.Msg.GetHits() {
		out[i] = EventHit{SessionID: h.GetSessionId(), Seq: h.GetSeq(), Snippet: h.GetSnippet(), Score: h.GetScore(), Event: fromEvent(h.GetEvent())}
	}
	return out, nil
}

// Recall returns, within one token budget, the pinned memories of the
// session's user, the memories most relevant to p.Query and the session's
// context, rendered as one text block.
func (c *Client) Recall(ctx context.Context, sessionID string, p RecallParams) (*Recall, error) {
	req := &engramv1.RecallRequest{
		SessionId: sessionID, Query: p.Query, TokenBudget: p.TokenBudget, AgentId: optional(p.AgentID),
		Tokenizer: p.Tokenizer, TopK: p.TopK, QueryEmbedding: p.QueryEmbedding, IncludeEmbeddings: p.IncludeEmbeddings,
	}
	res, err := retried(ctx, c, c.rpc.Recall, req)
	if err != nil {
		return nil, err
	}
	msg := res.Msg
	out := &Recall{
		Text: msg.GetText(), Pinned: fromMemories(msg.GetPinned()),
		PinnedTokens: msg.GetPinnedTokens(), MemoryTokens: msg.GetMemoryTokens(), ContextTokens: msg.GetContextTokens(),
		TokensUsed: msg.GetTokensUsed(), Tokenizer: msg.GetTokenizer(),
	}
	for _, r := range msg.GetMemories() {
		out.Memories = append(out.Memories, fromScoredMemory(r))
	}
	if msg.GetContext() != nil {
		out.Context = fromContext(msg.GetContext())
	}
	return out, nil
}

// optional is nil for "" (unset) and a pointer to s otherwise.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// timestamp is nil for the zero time.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// toMemory converts a memory to write, assigning its id when it has none.
func toMemory(m Memory) (*engramv1.Memory, error) {
	md, err := toStruct(m.Metadata)
	if err != nil {
		return nil, err
	}
	id := m.MemoryID
	if id == "" {
		// Assigned once, before the first try: every retry of the write
		// then carries the same idempotency key.
		id = uuid.NewString()
	}
	out := &engramv1.Memory{
		MemoryId: id, AppName: m.AppName, UserId: optional(m.UserID), AgentId: optional(m.AgentID), SessionId: optional(m.SessionID),
		Text: m.Text, Key: m.Key, Topics: m.Topics, Importance: m.Importance, Pinned: m.Pinned, Metadata: md,
		ValidFrom: timestamp(m.ValidFrom), InvalidAt: timestamp(m.InvalidAt), Embedding: m.Embedding,
	}
	if m.Fact != nil {
		out.Fact = &engramv1.MemoryFact{Subject: m.Fact.Subject, Predicate: m.Fact.Predicate, Object: m.Fact.Object}
	}
	if m.Source != nil {
		out.Source = &engramv1.MemorySource{SessionId: m.Source.SessionID, FromSeq: m.Source.FromSeq, ToSeq: m.Source.ToSeq}
	}
	return out, nil
}

func fromMemory(m *engramv1.Memory) Memory {
	out := Memory{
		MemoryID: m.GetMemoryId(), AppName: m.GetAppName(), UserID: m.GetUserId(), AgentID: m.GetAgentId(), SessionID: m.GetSessionId(),
		Text: m.GetText(), Key: m.GetKey(), Topics: m.GetTopics(), Importance: m.GetImportance(), Pinned: m.GetPinned(),
		Metadata: fromStruct(m.GetMetadata()), CreatedAt: fromTimestamp(m.GetCreatedAt()), ValidFrom: fromTimestamp(m.GetValidFrom()),
		InvalidAt: fromTimestamp(m.GetInvalidAt()), SupersededBy: m.GetSupersededBy(), Embedding: m.GetEmbedding(),
	}
	if f := m.GetFact(); f != nil {
		out.Fact = &Fact{Subject: f.GetSubject(), Predicate: f.GetPredicate(), Object: f.GetObject()}
	}
	if s := m.GetSource(); s != nil {
		out.Source = &MemorySource{SessionID: s.GetSessionId(), FromSeq: s.GetFromSeq(), ToSeq: s.GetToSeq()}
	}
	return out
}

func fromMemories(in []*engramv1.Memory) []Memory {
	out := make([]Memory, len(in))
	for i, m := range in {
		out[i] = fromMemory(m)
	}
	return out
}

func fromScoredMemory(r *engramv1.ScoredMemory) ScoredMemory {
	return ScoredMemory{Memory: fromMemory(r.GetMemory()), Score: r.GetScore(), LexicalScore: r.GetLexicalScore(), VectorScore: r.GetVectorScore()}
}
