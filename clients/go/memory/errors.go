package memory

import (
	"errors"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// Trailer names the server attaches to some errors. The same facts travel in
// the errors' google.rpc details (see Details); the trailers are read as a
// fallback, for servers that predate the details.
const (
	// CurrentSeqKey carries the session's head seq on an expected-seq
	// mismatch (FAILED_PRECONDITION).
	CurrentSeqKey = "engram-current-seq"
	// CurrentVersionKey carries the session's version on an
	// expected-version mismatch of UpdateSession (FAILED_PRECONDITION).
	CurrentVersionKey = "engram-current-version"
	// LastSeqKey carries the last seq a stream delivered when the server
	// ended it (UNAVAILABLE while shutting down).
	LastSeqKey = "engram-last-seq"
)

// Every method returns errors from the server as *connect.Error; read the
// status code with connect.CodeOf(err) (connect.CodeNotFound,
// connect.CodeAlreadyExists, connect.CodeInvalidArgument,
// connect.CodeFailedPrecondition, connect.CodeOutOfRange, ...), and what the
// server says for machines with Details(err), Field(err), Reason(err) and
// RetryDelay(err).

// FieldViolation is one request field an error is about (a google.rpc.BadRequest
// field violation).
type FieldViolation struct {
	// Field is the field's path in the request: "session_id",
	// "events[1].event_id", or a part such as "body".
	Field string
	// Description says what is wrong with it.
	Description string
}

// ErrorDetails are the google.rpc details the server attached to an error.
type ErrorDetails struct {
	// FieldViolations are the request fields at fault (google.rpc.BadRequest).
	FieldViolations []FieldViolation
	// Reason says why the call failed, stable for machines
	// (google.rpc.ErrorInfo): "SEQ_CONFLICT", "SESSION_NOT_FOUND",
	// "RATE_LIMITED", "SHUTTING_DOWN", ...
	Reason string
	// Metadata holds the facts that go with Reason, e.g. "current_seq".
	Metadata map[string]string
	// RetryDelay is how long to wait before retrying (google.rpc.RetryInfo);
	// HasRetryDelay reports whether the server said.
	RetryDelay    time.Duration
	HasRetryDelay bool
}

// Details decodes the google.rpc details of err (the zero ErrorDetails when
// err is not a *connect.Error or carries none). connect-go reads them from
// grpc-status-details-bin (gRPC, gRPC-Web) or the Connect error's details.
func Details(err error) ErrorDetails {
	var out ErrorDetails
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return out
	}
	for _, detail := range ce.Details() {
		msg, derr := detail.Value()
		if derr != nil {
			continue // a detail type this client does not know
		}
		switch d := msg.(type) {
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				out.FieldViolations = append(out.FieldViolations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		case *errdetails.ErrorInfo:
			out.Reason = d.GetReason()
			out.Metadata = d.GetMetadata()
		case *errdetails.RetryInfo:
			out.RetryDelay = d.GetRetryDelay().AsDuration()
			out.HasRetryDelay = true
		}
	}
	return out
}

// Field returns the request field err is about (its first BadRequest
// violation's path), if it names one.
func Field(err error) (string, bool) {
	d := Details(err)
	if len(d.FieldViolations) == 0 {
		return "", false
	}
	return d.FieldViolations[0].Field, true
}

// Reason returns err's ErrorInfo reason ("" when it has none).
func Reason(err error) string { return Details(err).Reason }

// RetryDelay returns how long the server asks the client to wait before
// retrying (on a rate limit), if it said.
func RetryDelay(err error) (time.Duration, bool) {
	d := Details(err)
	return d.RetryDelay, d.HasRetryDelay
}

// CurrentSeq returns the session's current head seq carried by a
// FAILED_PRECONDITION error of an append with an expected seq.
func CurrentSeq(err error) (uint64, bool) { return seqOf(err, "current_seq", CurrentSeqKey) }

// CurrentVersion returns the session's current version carried by a
// FAILED_PRECONDITION error of UpdateSession with an expected version.
func CurrentVersion(err error) (uint64, bool) {
	return seqOf(err, "current_version", CurrentVersionKey)
}

// LastSeq returns the last seq a stream delivered, carried by the error the
// server ends a stream with when it shuts down.
func LastSeq(err error) (uint64, bool) { return seqOf(err, "last_seq", LastSeqKey) }

// seqOf reads a seq from ErrorInfo metadata, else from the older trailer.
func seqOf(err error, key, trailer string) (uint64, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0, false
	}
	raw := Details(err).Metadata[key]
	if raw == "" {
		raw = ce.Meta().Get(trailer)
	}
	if raw == "" {
		return 0, false
	}
	n, perr := strconv.ParseUint(raw, 10, 64)
	if perr != nil {
		return 0, false
	}
	return n, true
}

// IsNotFound reports whether err is a NOT_FOUND status.
func IsNotFound(err error) bool { return connect.CodeOf(err) == connect.CodeNotFound }

// IsConflict reports whether err is an expected-seq mismatch
// (FAILED_PRECONDITION).
func IsConflict(err error) bool { return connect.CodeOf(err) == connect.CodeFailedPrecondition }
