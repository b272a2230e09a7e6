package audit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/spillway/spillway/internal/httpjson"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/authz"
)

// Path of the HTTP API; mount Handler on it.
const Path = "/v1/audit"

// DefaultLimit is the number of entries GET /v1/audit answers without
// ?limit.
const DefaultLimit = 100

// Authorizer decides whether the caller in ctx may perform an action; an
// error refuses it (HTTP 403 with its message). authz.Policy implements
// it. It is called from many goroutines at once.
type Authorizer interface {
	Authorize(ctx context.Context, a authz.Action, resource string) error
}

// AuthorizerFunc adapts a function to an Authorizer.
type AuthorizerFunc func(ctx context.Context, a authz.Action, resource string) error

// Authorize implements Authorizer.
func (f AuthorizerFunc) Authorize(ctx context.Context, a authz.Action, resource string) error {
	return f(ctx, a, resource)
}

var _ Authorizer = AuthorizerFunc(nil)

// Handler serves GET /v1/audit?since=RFC3339&limit=N: the entries
// recorded at or after since (default: any), newest first, at most limit
// (default DefaultLimit, at most MaxLimit), as a JSON list. The caller
// needs action read_audit; auth nil allows everyone.
func (l *Log) Handler(auth Authorizer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path, func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if auth != nil {
			if err := auth.Authorize(ctx, authz.ReadAudit, ""); err != nil {
				httpjson.WriteError(w, http.StatusForbidden, "", err.Error())
				return
			}
		}
		since, limit, field, err := parseQuery(r)
		if err != nil {
			httpjson.WriteError(w, http.StatusBadRequest, field, err.Error())
			return
		}
		entries, err := l.List(ctx, since, limit)
		switch {
		case errors.Is(err, systemstore.ErrUnavailable):
			httpjson.WriteError(w, http.StatusServiceUnavailable, "", err.Error())
			return
		case err != nil:
			httpjson.WriteError(w, http.StatusInternalServerError, "", err.Error())
			return
		}
		httpjson.Write(w, http.StatusOK, entries)
	})
	mux.HandleFunc(Path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "GET, HEAD")
		httpjson.WriteError(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("method %s not allowed on %s, use GET", r.Method, Path))
	})
	return mux
}

// parseQuery reads since and limit; a bad one is an error naming it.
func parseQuery(r *http.Request) (since time.Time, limit int, field string, err error) {
	q := r.URL.Query()
	for k, v := range q {
		switch {
		case k == "":
			return since, 0, "query", errors.New("query: a parameter without a name, want since or limit")
		case k != "since" && k != "limit":
			return since, 0, k, fmt.Errorf("%s: unknown parameter, want since or limit", k)
		case len(v) > 1:
			return since, 0, k, fmt.Errorf("%s: given %d times, want once", k, len(v))
		}
	}
	if s := q.Get("since"); s != "" {
		if since, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return since, 0, "since", fmt.Errorf("since: %q is not an RFC 3339 time (2006-01-02T15:04:05Z)", s)
		}
	}
	limit = DefaultLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			return since, 0, "limit", fmt.Errorf("limit: %q, want a number from 1 to %d", s, MaxLimit)
		}
		limit = n
	}
	return since, limit, "", nil
}
