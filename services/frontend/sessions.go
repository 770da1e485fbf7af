package frontend

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/switchyard-llm/switchyard/services/router/core"
)

// Session headers. A request that names a conversation is routed to the
// worker that served the conversation's earlier turns, where its prefix is
// cached (the router binds it: see core's sessions.go); Dynamo's header
// is taken as well, so that agents written for it work unchanged.
const (
	HeaderSessionID       = "X-Session-Id"
	HeaderDynamoSessionID = "X-Dynamo-Session-Id"
)

// sessionOf reads a request's session id: x-session-id or
// X-Dynamo-Session-ID (the same value when both are sent), one value,
// valid as core.ValidSessionID says; empty for none (an empty header is
// none). Anything else is ErrInvalidRequest, a 400 naming the header.
func sessionOf(h http.Header) (string, error) {
	id := ""
	from := ""
	for _, name := range []string{HeaderSessionID, HeaderDynamoSessionID} {
		v := h.Values(name)
		if len(v) == 0 || (len(v) == 1 && v[0] == "") {
			continue
		}
		if len(v) > 1 {
			return "", fmt.Errorf("%w: one %s header at most", ErrInvalidRequest, lowerHeader(name))
		}
		if err := core.ValidSessionID(v[0]); err != nil {
			return "", fmt.Errorf("%w: %s must be 1 to %d ASCII letters, digits or -_.:@/+=~", ErrInvalidRequest, lowerHeader(name), core.MaxSessionIDLen)
		}
		if id != "" && v[0] != id {
			return "", fmt.Errorf("%w: %s and %s name different sessions", ErrInvalidRequest, lowerHeader(from), lowerHeader(name))
		}
		id, from = v[0], name
	}
	return id, nil
}

func lowerHeader(name string) string {
	b := []byte(name)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// workerName is how a response names the worker that served it
// (X-Switchyard-Worker): the registry's hex instance id, with "/rank"
// appended for a data-parallel rank other than the first.
func workerName(instance uint64, rank uint32) string {
	s := strconv.FormatUint(instance, 16)
	if rank != 0 {
		s += "/" + strconv.FormatUint(uint64(rank), 10)
	}
	return s
}
