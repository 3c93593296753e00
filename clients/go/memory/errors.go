package memory

import (
	"errors"
	"strconv"

	"connectrpc.com/connect"
)

// Trailer names the server attaches to some errors.
const (
	// CurrentSeqKey carries the session's head seq on an expected-seq
	// mismatch (FAILED_PRECONDITION).
	CurrentSeqKey = "engram-current-seq"
	// LastSeqKey carries the last seq a stream delivered when the server
	// ended it (UNAVAILABLE while shutting down).
	LastSeqKey = "engram-last-seq"
)

// Every method returns errors from the server as *connect.Error; read the
// status code with connect.CodeOf(err) (connect.CodeNotFound,
// connect.CodeAlreadyExists, connect.CodeInvalidArgument,
// connect.CodeFailedPrecondition, connect.CodeOutOfRange, ...).

// CurrentSeq returns the session's current head seq carried by a
// FAILED_PRECONDITION error of an append with an expected seq.
func CurrentSeq(err error) (uint64, bool) { return seqMeta(err, CurrentSeqKey) }

// LastSeq returns the last seq a stream delivered, carried by the error the
// server ends a stream with when it shuts down.
func LastSeq(err error) (uint64, bool) { return seqMeta(err, LastSeqKey) }

func seqMeta(err error, key string) (uint64, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0, false
	}
	raw := ce.Meta().Get(key)
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
