package memory

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	engramv1 "github.com/engram-memory-server/engram/clients/go/gen/engram/v1"
)

// Session is one conversation of one user with one app.
type Session struct {
	SessionID  string
	AppName    string
	UserID     string
	Metadata   map[string]any
	CreatedAt  time.Time
	UpdatedAt  time.Time
	HeadSeq    uint64 // seq of the newest event (0 when none was ever appended)
	FirstSeq   uint64 // seq of the oldest retained event (HeadSeq+1 when none is)
	EventCount uint64 // events currently retained
	// State is the merged session state (ADK's model): the session's keys,
	// the app's as "app:<key>" and the user's as "user:<key>".
	State map[string]any
	// Version increases with each UpdateSession and each append carrying a
	// state delta; see UpdateSessionParams.ExpectedVersion.
	Version uint64
}

// Event is one stored entry of a session's log.
type Event struct {
	Seq       uint64         `json:"seq"`
	EventID   string         `json:"event_id"`
	EventType string         `json:"event_type"`
	Content   any            `json:"content"`  // any JSON value (numbers are float64)
	Metadata  map[string]any `json:"metadata"` // never nil for events read from the server
	Timestamp time.Time      `json:"timestamp"`
	SessionID string         `json:"session_id"`
	// StateDelta is the state change the event carried (without "temp:"
	// keys); nil when none.
	StateDelta map[string]any `json:"state_delta,omitempty"`
	// StateRemovals are the state keys the event deleted before its delta
	// applied; nil when none.
	StateRemovals []string `json:"state_removals,omitempty"`
	// StateNullsAreValues is true when the delta's nils were stored as
	// values rather than deleting their keys.
	StateNullsAreValues bool `json:"state_nulls_are_values,omitempty"`
}

// EventInput is an event as a client submits it.
type EventInput struct {
	// EventID is the idempotency key: re-sending an event with the same id
	// returns the stored original instead of appending it again. Optional;
	// the client assigns a UUID when empty, before the first try, so its
	// retries are idempotent.
	EventID string
	// EventType is required: user_message, agent_response, tool_call, ...
	EventType string
	// Content is any JSON-encodable value (json.RawMessage is decoded first).
	Content any
	// Metadata is optional free-form metadata (JSON-encodable values).
	Metadata map[string]any
	// Timestamp is optional; the server's clock when zero.
	Timestamp time.Time
	// StateDelta is optional: state changes applied atomically with the
	// append. "app:<key>" goes to the app-wide state, "user:<key>" to the
	// user's, "temp:<key>" is never stored, other keys to the session's; a
	// nil value deletes the key, unless StateNullsAreValues.
	StateDelta map[string]any
	// StateRemovals is optional: state keys deleted with the append, before
	// StateDelta applies.
	StateRemovals []string
	// StateNullsAreValues stores StateDelta's nil values as values (ADK's
	// meaning) instead of deleting their keys.
	StateNullsAreValues bool
}

// toValue converts any JSON-encodable Go value to a protobuf Value.
func toValue(v any) (*structpb.Value, error) {
	switch x := v.(type) {
	case nil:
		return structpb.NewNullValue(), nil
	case *structpb.Value:
		return x, nil
	case json.RawMessage:
		var decoded any
		if err := json.Unmarshal(x, &decoded); err != nil {
			return nil, fmt.Errorf("content: %w", err)
		}
		return structpb.NewValue(decoded)
	}
	if pv, err := structpb.NewValue(v); err == nil {
		return pv, nil
	}
	// Structs, typed maps and slices: go through encoding/json.
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var decoded any
	if err := json.Unmarshal(raw, &decoded); err != nil {
		return nil, err
	}
	return structpb.NewValue(decoded)
}

// toStruct converts a metadata map to a protobuf Struct (nil for nil).
func toStruct(m map[string]any) (*structpb.Struct, error) {
	if m == nil {
		return nil, nil
	}
	v, err := toValue(m)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	return v.GetStructValue(), nil
}

func fromStruct(s *structpb.Struct) map[string]any {
	if s == nil {
		return map[string]any{}
	}
	return s.AsMap()
}

func fromValue(v *structpb.Value) any {
	if v == nil {
		return nil
	}
	return v.AsInterface()
}

func fromTimestamp(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func toEventInput(in EventInput) (*engramv1.EventInput, error) {
	content, err := toValue(in.Content)
	if err != nil {
		return nil, fmt.Errorf("content: %w", err)
	}
	md, err := toStruct(in.Metadata)
	if err != nil {
		return nil, err
	}
	id := in.EventID
	if id == "" {
		// Assigned once, before the first try: every retry of the append
		// then carries the same idempotency key.
		id = uuid.NewString()
	}
	out := &engramv1.EventInput{
		EventId:             id,
		EventType:           in.EventType,
		Content:             content,
		Metadata:            md,
		StateRemovals:       in.StateRemovals,
		StateNullsAreValues: in.StateNullsAreValues,
	}
	if !in.Timestamp.IsZero() {
		out.Timestamp = timestamppb.New(in.Timestamp)
	}
	if in.StateDelta != nil {
		if out.StateDelta, err = toStateDelta(in.StateDelta); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func fromEvent(e *engramv1.Event) Event {
	return Event{
		Seq:                 e.GetSeq(),
		EventID:             e.GetEventId(),
		EventType:           e.GetEventType(),
		Content:             fromValue(e.GetContent()),
		Metadata:            fromStruct(e.GetMetadata()),
		Timestamp:           fromTimestamp(e.GetTimestamp()),
		SessionID:           e.GetSessionId(),
		StateDelta:          stateDeltaOf(e.GetStateDelta()),
		StateRemovals:       e.GetStateRemovals(),
		StateNullsAreValues: e.GetStateNullsAreValues(),
	}
}

// toStateDelta converts a state delta (nil values delete keys) to a Struct.
func toStateDelta(m map[string]any) (*structpb.Struct, error) {
	v, err := toValue(m)
	if err != nil {
		return nil, fmt.Errorf("state_delta: %w", err)
	}
	return v.GetStructValue(), nil
}

// stateDeltaOf is nil for an event that carried no delta.
func stateDeltaOf(s *structpb.Struct) map[string]any {
	if s == nil {
		return nil
	}
	return s.AsMap()
}

func fromEvents(in []*engramv1.Event) []Event {
	out := make([]Event, len(in))
	for i, e := range in {
		out[i] = fromEvent(e)
	}
	return out
}

func fromSession(s *engramv1.Session) *Session {
	if s == nil {
		return nil
	}
	return &Session{
		SessionID:  s.GetSessionId(),
		AppName:    s.GetAppName(),
		UserID:     s.GetUserId(),
		Metadata:   fromStruct(s.GetMetadata()),
		CreatedAt:  fromTimestamp(s.GetCreatedAt()),
		UpdatedAt:  fromTimestamp(s.GetUpdatedAt()),
		HeadSeq:    s.GetHeadSeq(),
		FirstSeq:   s.GetFirstSeq(),
		EventCount: s.GetEventCount(),
		State:      fromStruct(s.GetState()),
		Version:    s.GetVersion(),
	}
}
