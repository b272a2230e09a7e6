package migrationapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/spillway/spillway/internal/httpjson"
	"github.com/spillway/spillway/migration"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/security/authz"
)

// Paths of the HTTP API; mount Handler on each.
var Paths = []string{"/v1/panic", "/v1/rollout", "/v1/rollout/validate"}

// RolloutJSON is the body of GET and PUT /v1/rollout, the shape the client
// library fetches: {"rules":[{"name":..,"match":{..},"percent":..}],"version":N}.
// Keep it stable.
type RolloutJSON struct {
	Rules   []migration.Rule `json:"rules"` // never null
	Version uint64           `json:"version"`
}

// Handler returns the HTTP/JSON API (see the package doc). Other methods
// than the ones served get 405 in JSON.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/panic", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.WriteProto(w, panicState(a.flag.Panic()))
	})
	mux.HandleFunc("POST /v1/panic", func(w http.ResponseWriter, r *http.Request) {
		err := a.allowed(r.Context(), authz.Panic, r.Header.Get("Authorization"))
		var on bool
		if err == nil {
			on, err = panicBody(w, r)
		}
		p, err := a.setPanic(r.Context(), r.RemoteAddr, err, on)
		if err != nil {
			a.fail(w, err)
			return
		}
		httpjson.WriteProto(w, panicState(p))
	})
	mux.HandleFunc("GET /v1/rollout", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, rolloutJSON(a.rollout.Rollout()))
	})
	mux.HandleFunc("PUT /v1/rollout", func(w http.ResponseWriter, r *http.Request) {
		err := a.allowed(r.Context(), authz.Rollout, r.Header.Get("Authorization"))
		var yaml []byte
		if err == nil {
			yaml, err = configBody(w, r)
		}
		ro, err := a.setRollout(r.Context(), r.RemoteAddr, err, yaml)
		if err != nil {
			a.fail(w, err)
			return
		}
		httpjson.Write(w, http.StatusOK, rolloutJSON(ro))
	})
	mux.HandleFunc("POST /v1/rollout/validate", func(w http.ResponseWriter, r *http.Request) {
		yaml, err := configBody(w, r)
		if err != nil {
			a.fail(w, err)
			return
		}
		resp, err := a.validate(yaml)
		if err != nil {
			a.fail(w, err)
			return
		}
		httpjson.WriteProto(w, resp)
	})
	for p, allow := range map[string]string{"/v1/panic": "GET, HEAD, POST", "/v1/rollout": "GET, HEAD, PUT", "/v1/rollout/validate": "POST"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			httpjson.WriteError(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("method %s not allowed on %s, use %s", r.Method, p, allow))
		})
	}
	return mux
}

// panicBody reads {"panic": true|false}: the member is required, and
// nothing else is allowed, so that a typo does not turn the flag off.
func panicBody(w http.ResponseWriter, r *http.Request) (bool, error) {
	var body struct {
		Panic *bool `json:"panic"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return false, fmt.Errorf(`%w: body: want {"panic": true} or {"panic": false}: %v`, errBadRequest, err)
	}
	if dec.More() {
		return false, fmt.Errorf("%w: body: more than one JSON value", errBadRequest)
	}
	if body.Panic == nil {
		return false, &fieldError{field: "panic", msg: `panic: missing, want {"panic": true} or {"panic": false}`}
	}
	return *body.Panic, nil
}

// configBody reads a YAML rollout config of at most MaxConfigBytes.
func configBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, migration.MaxConfigBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, fmt.Errorf("%w: yaml: body over %d bytes", migration.ErrInvalid, tooBig.Limit)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: reading the body: %v", errBadRequest, err)
	}
	return b, nil
}

func rolloutJSON(r migration.Rollout) RolloutJSON {
	out := RolloutJSON{Rules: []migration.Rule{}, Version: r.Version}
	if r.Config != nil && r.Config.Rules != nil {
		out.Rules = r.Config.Rules
	}
	return out
}

// fail maps a domain error to an HTTP status at the edge.
func (a *API) fail(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, systemstore.ErrUnavailable):
		httpjson.WriteError(w, http.StatusServiceUnavailable, "", err.Error())
	case errors.Is(err, errDenied), errors.Is(err, errNoToken):
		httpjson.WriteError(w, http.StatusForbidden, "", err.Error())
	case errors.Is(err, migration.ErrInvalid):
		httpjson.WriteError(w, http.StatusBadRequest, fieldOf(err), err.Error())
	case errors.Is(err, errBadRequest):
		var fe *fieldError
		errors.As(err, &fe)
		httpjson.WriteError(w, http.StatusBadRequest, fe.fieldName(), err.Error())
	default:
		httpjson.WriteError(w, http.StatusInternalServerError, "", err.Error())
	}
}

// fieldError is a bad request naming its field.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.msg }
func (e *fieldError) Unwrap() error { return errBadRequest }

func (e *fieldError) fieldName() string {
	if e == nil {
		return ""
	}
	return e.field
}
