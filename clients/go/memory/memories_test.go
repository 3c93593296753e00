package memory_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/engram-memory-server/engram/clients/go/memory"
)

// memoryIDs lists the ids of memories, in order.
func memoryIDs(ms []memory.Memory) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.MemoryID
	}
	return out
}

// scoredIDs lists the ids of search results, in rank order.
func scoredIDs(rs []memory.ScoredMemory) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Memory.MemoryID
	}
	return out
}

func TestMemories(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []memory.Option
	}{{"grpc", nil}, {"connect", []memory.Option{memory.WithConnect()}}} {
		t.Run(tc.name, func(t *testing.T) {
			c := memory.New(mainServer.URL, tc.opts...)
			app := uniq(t, "memories")

			t.Run("writes a batch, assigns missing ids and reads every field back", func(t *testing.T) {
				ctx := testCtx(t)
				validFrom := time.Date(2024, 3, 1, 9, 0, 0, 250_000_000, time.UTC)
				written := must[*memory.MemoriesWritten](t)(c.WriteMemories(ctx, []memory.Memory{
					{
						MemoryID: "tea", AppName: app, UserID: "alice", AgentID: "planner",
						Text: "Alice prefers green tea", Fact: &memory.Fact{Subject: "alice", Predicate: "prefers", Object: "green tea"},
						Topics: []string{"drinks"}, Importance: 0.5, Pinned: true, Metadata: map[string]any{"origin": "chat"},
						Source: &memory.MemorySource{SessionID: "s-1", FromSeq: 3, ToSeq: 4}, ValidFrom: validFrom,
						Embedding: []float32{0.5, 0.25, 0},
					},
					{AppName: app, Text: "The office closes at six"},
				}))
				if len(written.Memories) != 2 || len(written.Superseded) != 0 || len(written.Memories[1].MemoryID) != 36 {
					t.Fatalf("want 2 stored memories, a UUID for the second, nothing superseded; got %+v", written)
				}
				got := must[*memory.Memory](t)(c.GetMemory(ctx, app, "tea"))
				want := memory.Memory{
					MemoryID: "tea", AppName: app, UserID: "alice", AgentID: "planner",
					Text: "Alice prefers green tea", Fact: &memory.Fact{Subject: "alice", Predicate: "prefers", Object: "green tea"},
					Topics: []string{"drinks"}, Importance: 0.5, Pinned: true, Metadata: map[string]any{"origin": "chat"},
					Source: &memory.MemorySource{SessionID: "s-1", FromSeq: 3, ToSeq: 4}, ValidFrom: validFrom,
					Embedding: []float32{0.5, 0.25, 0}, CreatedAt: got.CreatedAt,
				}
				if got.CreatedAt.IsZero() || !got.Valid() || !memoryEqual(*got, want) {
					t.Fatalf("read back\n%+v\nwant\n%+v", *got, want)
				}
				shared := must[*memory.Memory](t)(c.GetMemory(ctx, app, written.Memories[1].MemoryID))
				if shared.UserID != "" || shared.Fact != nil || !shared.ValidFrom.Equal(shared.CreatedAt) {
					t.Fatalf("an app-wide memory without a fact, valid from its creation: got %+v", shared)
				}
				_, err := c.GetMemory(ctx, app, "absent")
				wantCode(t, err, connect.CodeNotFound)
			})

			t.Run("a repeated id returns the original, other content under it is ALREADY_EXISTS", func(t *testing.T) {
				ctx := testCtx(t)
				first := must[*memory.MemoriesWritten](t)(c.WriteMemories(ctx, []memory.Memory{{MemoryID: "again", AppName: app, Text: "said once"}}))
				second := must[*memory.MemoriesWritten](t)(c.WriteMemories(ctx, []memory.Memory{{MemoryID: "again", AppName: app, Text: "said once"}}))
				if !second.Memories[0].CreatedAt.Equal(first.Memories[0].CreatedAt) {
					t.Fatalf("a repeated write stored anew: %v then %v", first.Memories[0].CreatedAt, second.Memories[0].CreatedAt)
				}
				_, err := c.WriteMemories(ctx, []memory.Memory{{MemoryID: "again", AppName: app, Text: "said otherwise"}})
				wantCode(t, err, connect.CodeAlreadyExists)
				_, err = c.WriteMemories(ctx, []memory.Memory{{AppName: app, Text: "x", Importance: 2}})
				wantCode(t, err, connect.CodeInvalidArgument)
				if f, _ := memory.Field(err); f != "memories[0].importance" {
					t.Fatalf("field %q, want memories[0].importance", f)
				}
			})

			t.Run("searches a user's scope: theirs and the shared ones, never another user's or agent's", func(t *testing.T) {
				ctx := testCtx(t)
				must[*memory.MemoriesWritten](t)(c.WriteMemories(ctx, []memory.Memory{
					{MemoryID: "kim-lake", AppName: app, UserID: "kim", Text: "Kim booked a cabin by the lake", Topics: []string{"travel"}},
					{MemoryID: "kim-guide", AppName: app, UserID: "kim", AgentID: "guide", Text: "Kim's guide knows the lake trails"},
					{MemoryID: "lou-lake", AppName: app, UserID: "lou", Text: "Lou wants a lake cabin too", Topics: []string{"travel"}},
					{MemoryID: "shared-lake", AppName: app, Text: "The lake is frozen in winter"},
				}))
				kim := memory.Scope{AppName: app, UserID: "kim"}
				results := must[[]memory.ScoredMemory](t)(c.SearchMemories(ctx, memory.SearchMemoriesParams{MemoryFilter: memory.MemoryFilter{Scope: kim}, Query: "lake cabin"}))
				ids := scoredIDs(results)
				if len(ids) == 0 || ids[0] != "kim-lake" || !slices.Contains(ids, "shared-lake") || slices.Contains(ids, "lou-lake") || slices.Contains(ids, "kim-guide") {
					t.Fatalf("visible to kim, best first: got %v", ids)
				}
				if results[0].Score <= 0 || results[0].LexicalScore <= 0 {
					t.Fatalf("want positive scores, got %+v", results[0])
				}
				travel := must[[]memory.ScoredMemory](t)(c.SearchMemories(ctx, memory.SearchMemoriesParams{MemoryFilter: memory.MemoryFilter{Scope: kim, Topics: []string{"travel"}}, Query: "lake"}))
				if got := scoredIDs(travel); !slices.Equal(got, []string{"kim-lake"}) {
					t.Fatalf("topic travel: got %v", got)
				}
				within := kim
				within.Match = memory.ScopeWithin
				all := must[[]memory.ScoredMemory](t)(c.SearchMemories(ctx, memory.SearchMemoriesParams{MemoryFilter: memory.MemoryFilter{Scope: within}, Query: "lake"}))
				if got := scoredIDs(all); len(got) != 2 || !slices.Contains(got, "kim-guide") || !slices.Contains(got, "kim-lake") {
					t.Fatalf("within kim: got %v", got)
				}
				exact := kim
				exact.Match = memory.ScopeExact
				one := must[[]memory.ScoredMemory](t)(c.SearchMemories(ctx, memory.SearchMemoriesParams{MemoryFilter: memory.MemoryFilter{Scope: exact}, Query: "lake", TopK: 5}))
				if got := scoredIDs(one); !slices.Equal(got, []string{"kim-lake"}) {
					t.Fatalf("exactly kim: got %v", got)
				}
			})

			t.Run("supersedes by key: now the new value, AsOf the old one, IncludeInvalid both", func(t *testing.T) {
				ctx := testCtx(t)
				before := must[*memory.MemoriesWritten](t)(c.WriteMemories(ctx, []memory.Memory{{MemoryID: "city-1", AppName: app, UserID: "mo", Key: "city", Text: "Mo lives in Lyon"}}))
				lyon := before.Memories[0].ValidFrom
				moved := must[*memory.MemoriesWritten](t)(c.WriteMemories(ctx, []memory.Memory{{MemoryID: "city-2", AppName: app, UserID: "mo", Key: "city", Text: "Mo lives in Porto", ValidFrom: lyon.Add(time.Minute)}}))
				if len(moved.Superseded) != 1 || moved.Superseded[0].SupersededBy != "city-2" || !moved.Superseded[0].InvalidAt.Equal(lyon.Add(time.Minute)) || moved.Superseded[0].Valid() {
					t.Fatalf("want city-1 closed at city-2's ValidFrom, got %+v", moved.Superseded)
				}
				search := func(f memory.MemoryFilter) []string {
					f.Scope = memory.Scope{AppName: app, UserID: "mo", Match: memory.ScopeExact}
					return scoredIDs(must[[]memory.ScoredMemory](t)(c.SearchMemories(ctx, memory.SearchMemoriesParams{MemoryFilter: f, Query: "Mo lives"})))
				}
				if got := search(memory.MemoryFilter{AsOf: lyon.Add(2 * time.Minute)}); !slices.Equal(got, []string{"city-2"}) {
					t.Fatalf("as of after the move: got %v", got)
				}
				if got := search(memory.MemoryFilter{AsOf: lyon.Add(time.Second)}); !slices.Equal(got, []string{"city-1"}) {
					t.Fatalf("as of before the move: got %v", got)
				}
				if got := search(memory.MemoryFilter{IncludeInvalid: true}); len(got) != 2 {
					t.Fatalf("include invalid: got %v", got)
				}
			})

			t.Run("lists newest first, one page at a time or every page through Memories", func(t *testing.T) {
				ctx := testCtx(t)
				for i := range 5 {
					must[*memory.MemoriesWritten](t)(c.WriteMemories(ctx, []memory.Memory{{MemoryID: "page-" + string(rune('0'+i)), AppName: app, UserID: "pager", Text: "note", Pinned: i == 0}}))
				}
				filter := memory.MemoryFilter{Scope: memory.Scope{AppName: app, UserID: "pager"}}
				var all []string
				for m, err := range c.Memories(ctx, memory.ListMemoriesParams{MemoryFilter: filter, PageSize: 2}) {
					if err != nil {
						t.Fatal(err)
					}
					all = append(all, m.MemoryID)
				}
				if !slices.Equal(all, []string{"page-4", "page-3", "page-2", "page-1", "page-0"}) {
					t.Fatalf("every page: got %v", all)
				}
				first := must[*memory.MemoryPage](t)(c.ListMemories(ctx, memory.ListMemoriesParams{MemoryFilter: filter, PageSize: 3}))
				if !slices.Equal(memoryIDs(first.Memories), []string{"page-4", "page-3", "page-2"}) || first.NextPageToken == "" {
					t.Fatalf("first page: got %v, token %q", memoryIDs(first.Memories), first.NextPageToken)
				}
				rest := must[*memory.MemoryPage](t)(c.ListMemories(ctx, memory.ListMemoriesParams{MemoryFilter: filter, PageSize: 3, PageToken: first.NextPageToken}))
				if !slices.Equal(memoryIDs(rest.Memories), []string{"page-1", "page-0"}) || rest.NextPageToken != "" {
					t.Fatalf("last page: got %v, token %q", memoryIDs(rest.Memories), rest.NextPageToken)
				}
				pinned := true
				filter.Pinned = &pinned
				only := must[*memory.MemoryPage](t)(c.ListMemories(ctx, memory.ListMemoriesParams{MemoryFilter: filter}))
				if !slices.Equal(memoryIDs(only.Memories), []string{"page-0"}) {
					t.Fatalf("pinned only: got %v", memoryIDs(only.Memories))
				}
			})

			t.Run("forgets by ids and by scope, and DeleteUserData counts the user's memories", func(t *testing.T) {
				ctx := testCtx(t)
				must[*memory.MemoriesWritten](t)(c.WriteMemories(ctx, []memory.Memory{
					{MemoryID: "f-1", AppName: app, UserID: "nia", Text: "one"},
					{MemoryID: "f-2", AppName: app, UserID: "nia", AgentID: "a", Text: "two"},
					{MemoryID: "f-3", AppName: app, UserID: "nia", SessionID: "s", Text: "three"},
					{MemoryID: "f-keep", AppName: app, UserID: "ola", Text: "kept"},
				}))
				for _, step := range []struct {
					p    memory.DeleteMemoriesParams
					want uint64
				}{
					{memory.DeleteMemoriesParams{Scope: memory.Scope{AppName: app}, MemoryIDs: []string{"f-1", "f-absent"}}, 1},
					{memory.DeleteMemoriesParams{Scope: memory.Scope{AppName: app, UserID: "nia"}}, 2},
					{memory.DeleteMemoriesParams{Scope: memory.Scope{AppName: app, UserID: "nia"}}, 0},
				} {
					if got := must[uint64](t)(c.DeleteMemories(ctx, step.p)); got != step.want {
						t.Fatalf("DeleteMemories(%+v) = %d, want %d", step.p, got, step.want)
					}
				}
				erased := must[*memory.UserDataErased](t)(c.DeleteUserData(ctx, app, "ola"))
				if *erased != (memory.UserDataErased{RemovedMemories: 1}) {
					t.Fatalf("erased %+v, want one memory", *erased)
				}
			})

			t.Run("watches a scope live: started first, then what it can see", func(t *testing.T) {
				ctx := testCtx(t)
				var got []string
				writes := func() {
					for _, m := range []memory.Memory{
						{MemoryID: "w-1", AppName: app, UserID: "pia", Key: "mood", Text: "Pia is calm"},
						{MemoryID: "w-other", AppName: app, UserID: "quin", Text: "Quin is busy"},
						{MemoryID: "w-shared", AppName: app, Text: "the office is open"},
						{MemoryID: "w-2", AppName: app, UserID: "pia", Key: "mood", Text: "Pia is excited"},
					} {
						must[*memory.MemoriesWritten](t)(c.WriteMemories(ctx, []memory.Memory{m}))
					}
					must[uint64](t)(c.DeleteMemories(ctx, memory.DeleteMemoriesParams{Scope: memory.Scope{AppName: app}, MemoryIDs: []string{"w-1", "w-other"}}))
				}
				for change, err := range c.WatchMemories(ctx, memory.Scope{AppName: app, UserID: "pia"}) {
					if err != nil {
						t.Fatalf("watch ended after %v: %v", got, err)
					}
					switch change.Kind {
					case memory.ChangeStarted:
						got = append(got, "started")
						writes() // the watch is live: everything from here on is delivered
					case memory.ChangeDeleted:
						got = append(got, "deleted "+change.DeletedIDs[0])
					default:
						got = append(got, change.Kind.String()+" "+change.Memory.MemoryID)
					}
					if len(got) == 6 {
						break
					}
				}
				want := []string{"started", "written w-1", "written w-shared", "superseded w-1", "written w-2", "deleted w-1"}
				if !slices.Equal(got, want) {
					t.Fatalf("changes %v, want %v", got, want)
				}
			})

			t.Run("a watch resumed with After replays what it missed, in order and once, then goes live", func(t *testing.T) {
				ctx := testCtx(t)
				resumeApp := app + "-resume"
				write := func(id, user, key, text string) {
					must[*memory.MemoriesWritten](t)(c.WriteMemories(ctx, []memory.Memory{{MemoryID: id, AppName: resumeApp, UserID: user, Key: key, Text: text}}))
				}
				var last uint64
				for change, err := range c.WatchMemories(ctx, memory.Scope{AppName: resumeApp, UserID: "pia"}) {
					if err != nil {
						t.Fatalf("first watch: %v", err)
					}
					if change.Kind == memory.ChangeStarted {
						write("w-1", "pia", "mood", "Pia is calm")
						continue
					}
					last = change.Cursor
					break
				}
				write("w-other", "quin", "", "Quin is busy")
				write("w-2", "pia", "mood", "Pia is excited")
				must[uint64](t)(c.DeleteMemories(ctx, memory.DeleteMemoriesParams{Scope: memory.Scope{AppName: resumeApp}, MemoryIDs: []string{"w-1"}}))
				var got []string
				var cursors []uint64
				for change, err := range c.WatchMemories(ctx, memory.Scope{AppName: resumeApp, UserID: "pia"}, memory.WatchOptions{After: &last}) {
					if err != nil {
						t.Fatalf("resumed watch ended after %v: %v", got, err)
					}
					switch change.Kind {
					case memory.ChangeStarted:
						continue
					case memory.ChangeDeleted:
						got = append(got, "deleted "+change.DeletedIDs[0])
						write("w-3", "pia", "", "Pia is back") // caught up: one live change follows
					default:
						got = append(got, change.Kind.String()+" "+change.Memory.MemoryID)
					}
					cursors = append(cursors, change.Cursor)
					if len(got) == 3 {
						break
					}
				}
				want := []string{"written w-2", "deleted w-1", "written w-3"}
				if !slices.Equal(got, want) || last != 1 || !slices.Equal(cursors, []uint64{4, 5, 6}) {
					t.Fatalf("changes %v at %v after %d, want %v at [4 5 6] after 1", got, cursors, last, want)
				}
			})

			t.Run("a refused watch yields the error; an ended context ends it", func(t *testing.T) {
				ctx := testCtx(t)
				for _, err := range c.WatchMemories(ctx, memory.Scope{AppName: ""}) {
					wantCode(t, err, connect.CodeInvalidArgument)
					if f, _ := memory.Field(err); f != "app_name" {
						t.Fatalf("field %q, want app_name", f)
					}
				}
				short, cancel := context.WithCancel(ctx)
				defer cancel()
				var last error
				for change, err := range c.WatchMemories(short, memory.Scope{AppName: app}) {
					if change.Kind == memory.ChangeStarted {
						cancel()
					}
					last = err
				}
				if !errors.Is(last, context.Canceled) {
					t.Fatalf("want the context's error last, got %v", last)
				}
			})

			t.Run("searches the events of a user's sessions and recalls with a session's context", func(t *testing.T) {
				ctx := testCtx(t)
				sid := fmt.Sprintf("recall-%s-%d", tc.name, time.Now().UnixNano())
				must[*memory.Session](t)(c.CreateSession(ctx, memory.CreateSessionParams{AppName: app, UserID: "rae", SessionID: sid}))
				must[[]memory.Event](t)(c.AddEvents(ctx, sid, []memory.EventInput{
					{EventType: "user_message", Content: "I am flying to Porto next week"},
					{EventType: "agent_response", Content: "Noted: Porto next week. Anything to book?"},
				}))
				hits := must[[]memory.EventHit](t)(c.SearchEvents(ctx, memory.SearchEventsParams{AppName: app, UserID: "rae", Query: "flying Porto"}))
				if len(hits) != 2 || hits[0].SessionID != sid || hits[0].Seq != 1 || hits[0].Snippet != "I am flying to Porto next week" || hits[0].Event.Content != "I am flying to Porto next week" {
					t.Fatalf("hits %+v", hits)
				}
				none := must[[]memory.EventHit](t)(c.SearchEvents(ctx, memory.SearchEventsParams{AppName: app, UserID: "rae", Query: "Porto", EventTypes: []string{"tool_call"}}))
				if len(none) != 0 {
					t.Fatalf("want no tool_call hits, got %+v", none)
				}
				must[*memory.MemoriesWritten](t)(c.WriteMemories(ctx, []memory.Memory{
					{MemoryID: "r-core", AppName: app, UserID: "rae", Text: "Rae is vegetarian", Pinned: true, Importance: 1},
					{MemoryID: "r-sister", AppName: app, UserID: "rae", Text: "Rae's sister lives in Porto"},
					{MemoryID: "r-other", AppName: app, UserID: "sol", Text: "Sol's sister lives in Porto too"},
				}))
				r := must[*memory.Recall](t)(c.Recall(ctx, sid, memory.RecallParams{Query: "sister in Porto", Tokenizer: "chars4"}))
				relevant := scoredIDs(r.Memories)
				if !slices.Equal(memoryIDs(r.Pinned), []string{"r-core"}) || len(relevant) == 0 || relevant[0] != "r-sister" || slices.Contains(relevant, "r-other") {
					t.Fatalf("pinned %v, relevant %v", memoryIDs(r.Pinned), relevant)
				}
				if r.Context == nil || len(r.Context.Messages) == 0 || r.Context.Messages[0].Content != "I am flying to Porto next week" {
					t.Fatalf("context %+v", r.Context)
				}
				if r.Tokenizer != "chars4" || int(r.TokensUsed) != (len(r.Text)+3)/4 || r.PinnedTokens == 0 || r.MemoryTokens == 0 || r.ContextTokens == 0 {
					t.Fatalf("token counts %+v for %d characters", r, len(r.Text))
				}
				must[*memory.MemoriesWritten](t)(c.WriteMemories(ctx, []memory.Memory{
					{MemoryID: "r-seat", AppName: app, UserID: "rae", Text: "Rae wants a window seat", Embedding: []float32{1, 0, 0}},
				}))
				seatOf := func(r *memory.Recall) []float32 {
					for _, m := range r.Memories {
						if m.Memory.MemoryID == "r-seat" {
							return m.Memory.Embedding
						}
					}
					t.Fatalf("r-seat not recalled: %v", scoredIDs(r.Memories))
					return nil
				}
				if got := seatOf(must[*memory.Recall](t)(c.Recall(ctx, sid, memory.RecallParams{Query: "window seat", QueryEmbedding: []float32{1, 0, 0}}))); len(got) != 0 {
					t.Fatalf("embedding %v without IncludeEmbeddings", got)
				}
				if got := seatOf(must[*memory.Recall](t)(c.Recall(ctx, sid, memory.RecallParams{Query: "window seat", QueryEmbedding: []float32{1, 0, 0}, IncludeEmbeddings: true}))); !slices.Equal(got, []float32{1, 0, 0}) {
					t.Fatalf("embedding %v with IncludeEmbeddings", got)
				}
				seatScope := memory.MemoryFilter{Scope: memory.Scope{AppName: app, UserID: "rae", Match: memory.ScopeExact}}
				for _, include := range []bool{false, true} {
					found := must[[]memory.ScoredMemory](t)(c.SearchMemories(ctx, memory.SearchMemoriesParams{
						MemoryFilter: seatScope, Query: "window seat", QueryEmbedding: []float32{1, 0, 0}, IncludeEmbeddings: include,
					}))
					listed := must[*memory.MemoryPage](t)(c.ListMemories(ctx, memory.ListMemoriesParams{MemoryFilter: seatScope, IncludeEmbeddings: include}))
					seats := 0
					for _, m := range listed.Memories {
						found = append(found, memory.ScoredMemory{Memory: m})
					}
					for _, r := range found {
						if r.Memory.MemoryID != "r-seat" {
							continue
						}
						seats++
						if include != (len(r.Memory.Embedding) == 3) {
							t.Fatalf("IncludeEmbeddings %v: r-seat came with embedding %v", include, r.Memory.Embedding)
						}
					}
					if seats != 2 {
						t.Fatalf("r-seat found %d times in the search and the listing, want 2", seats)
					}
				}
				tight := must[*memory.Recall](t)(c.Recall(ctx, sid, memory.RecallParams{Query: "sister in Porto", TokenBudget: 20}))
				if tight.TokensUsed > 20 || tight.Context != nil {
					t.Fatalf("budget 20: used %d, context %+v", tight.TokensUsed, tight.Context)
				}
				_, err := c.Recall(ctx, sid+"-absent", memory.RecallParams{})
				wantCode(t, err, connect.CodeNotFound)
			})
		})
	}
}

// memoryEqual compares two memories field by field (times with Equal).
func memoryEqual(a, b memory.Memory) bool {
	return a.MemoryID == b.MemoryID && a.AppName == b.AppName && a.UserID == b.UserID && a.AgentID == b.AgentID &&
		a.SessionID == b.SessionID && a.Text == b.Text && *a.Fact == *b.Fact && a.Key == b.Key &&
		slices.Equal(a.Topics, b.Topics) && a.Importance == b.Importance && a.Pinned == b.Pinned &&
		a.Metadata["origin"] == b.Metadata["origin"] && len(a.Metadata) == len(b.Metadata) && *a.Source == *b.Source &&
		a.CreatedAt.Equal(b.CreatedAt) && a.ValidFrom.Equal(b.ValidFrom) && a.InvalidAt.Equal(b.InvalidAt) &&
		a.SupersededBy == b.SupersededBy && slices.Equal(a.Embedding, b.Embedding)
}
