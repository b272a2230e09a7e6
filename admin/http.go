package admin

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	pb "github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/internal/httpjson"
	"github.com/spillway/spillway/registry"
)

// Paths of the HTTP API; mount Handler on each.
var Paths = []string{"/v1/load", "/v1/graph", "/v1/weights", "/v1/summary"}

// Handler returns the HTTP/JSON API. Its paths are Paths; mount it on
// each (other methods than GET get 405 in JSON).
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/load", func(w http.ResponseWriter, r *http.Request) {
		q, ok := query(w, r, "service")
		if !ok {
			return
		}
		resp, err := a.load(r.Context(), &pb.LoadRequest{Service: q.Get("service")})
		if err != nil {
			a.fail(w, err)
			return
		}
		httpjson.WriteProto(w, resp)
	})
	mux.HandleFunc("GET /v1/graph", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := query(w, r); !ok {
			return
		}
		if err := a.authorize(r.Context(), ""); err != nil {
			a.fail(w, err)
			return
		}
		httpjson.WriteProto(w, a.graph())
	})
	mux.HandleFunc("GET /v1/weights", func(w http.ResponseWriter, r *http.Request) {
		q, ok := query(w, r, "service", "client")
		if !ok {
			return
		}
		resp, err := a.weights(r.Context(), &pb.WeightsRequest{Service: q.Get("service"), Client: q.Get("client")})
		if err != nil {
			a.fail(w, err)
			return
		}
		httpjson.WriteProto(w, resp)
	})
	mux.HandleFunc("GET /v1/summary", a.serveSummary)
	for _, p := range Paths {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			httpjson.WriteError(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("method %s not allowed on %s, use GET", r.Method, p))
		})
	}
	return mux
}

// query parses r's query string: each parameter at most once, and only the
// allowed ones, so that a typo (?servce=) is an error rather than a
// silently different question.
func query(w http.ResponseWriter, r *http.Request, allowed ...string) (url.Values, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, "query", fmt.Sprintf("malformed query string: %v", err))
		return nil, false
	}
	for k, vs := range q {
		switch {
		case !slices.Contains(allowed, k):
			httpjson.WriteError(w, http.StatusBadRequest, k, fmt.Sprintf("%s: unknown query parameter (allowed: %v)", k, allowed))
			return nil, false
		case len(vs) > 1:
			httpjson.WriteError(w, http.StatusBadRequest, k, fmt.Sprintf("%s: given %d times, want once", k, len(vs)))
			return nil, false
		}
	}
	return q, true
}

// fail maps a domain error to an HTTP status at the edge.
func (a *API) fail(w http.ResponseWriter, err error) {
	var fe *registry.FieldError
	switch {
	case errors.Is(err, errDenied):
		httpjson.WriteError(w, http.StatusForbidden, "", err.Error())
	case errors.As(err, &fe):
		httpjson.WriteError(w, http.StatusBadRequest, fe.Field, fe.Error())
	case errors.Is(err, registry.ErrInvalid):
		httpjson.WriteError(w, http.StatusBadRequest, "", err.Error())
	case errors.Is(err, errNoPlan):
		httpjson.WriteError(w, http.StatusNotFound, "", err.Error())
	default:
		a.log.Error("admin request failed", "err", err)
		httpjson.WriteError(w, http.StatusInternalServerError, "", err.Error())
	}
}
