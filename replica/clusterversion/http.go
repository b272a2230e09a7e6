package clusterversion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spillway/spillway/internal/httpjson"
	"github.com/spillway/spillway/registry/systemstore"
	"github.com/spillway/spillway/replica/ownership"
	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// Path is the HTTP API's path: GET shows the version, POST sets or
// clears the hold.
const Path = "/v1/cluster-version"

// HoldAction is the right a change of the hold takes: the panic flag's,
// the fleet-wide switch of the same operators. A new action would make a
// policy file that grants it unreadable to a770d6c, which refuses unknown
// actions, and so break the rollback the hold is there for.
const HoldAction = authz.Panic

// View is the JSON of GET and POST Path.
type View struct {
	// Version is the cluster version in force on the replica answering.
	Version int `json:"version"`
	// Supported is the highest version that replica's binary supports.
	Supported int `json:"supported"`
	// Shared is false on a single replica (bbolt, memory): Version is
	// Supported at once and nothing can be held.
	Shared bool `json:"shared"`
	Hold   bool `json:"hold"`
	// HoldBy and HoldAt: who changed the hold last, and when.
	HoldBy string    `json:"hold_by,omitempty"`
	HoldAt time.Time `json:"hold_at,omitzero"`
	// FinalisedBy and FinalisedAt: the replica that raised Version, and
	// when; empty for Baseline.
	FinalisedBy string    `json:"finalised_by,omitempty"`
	FinalisedAt time.Time `json:"finalised_at,omitzero"`
	// Revision is the record's store revision (the ETag); 0: none stored.
	Revision int64 `json:"revision"`
	// Members are the live members as the answering replica sees them.
	Members []MemberView `json:"members"`
	// Next is the version the replicas raise to now; 0 when none, and
	// Waiting says why (empty when there is nothing to raise).
	Next    int    `json:"next,omitempty"`
	Waiting string `json:"waiting,omitempty"`
}

// MemberView is one live member in View.
type MemberView struct {
	ID string `json:"id"`
	// MaxVersion is the highest version its binary supports (Baseline
	// for a record that names none).
	MaxVersion int    `json:"max_version"`
	Identity   string `json:"identity,omitempty"`
}

// Authorizer decides whether the caller (the identity in ctx, see
// package authn) may do action on resource; *authz.Policy implements
// it. A non-nil error is the denial. It is called from many goroutines
// at once.
type Authorizer interface {
	Authorize(ctx context.Context, a authz.Action, resource string) error
}

// Recorder receives an audit entry for every change of the hold that was
// allowed (made, or failed); *audit.Log implements it. Record must not
// block for long.
type Recorder interface {
	Record(ctx context.Context, e audit.Entry)
}

// HandlerConfig is what Handler needs besides Versions.
type HandlerConfig struct {
	// Members shows the live members and what they support; nil shows
	// none (a replica outside the mesh).
	Members Members
	// Authorizer decides every change of the hold (HoldAction, resource
	// ""); nil refuses every change.
	Authorizer Authorizer
	// Audit, or nil to record nothing.
	Audit Recorder
}

// Handler serves GET Path (View, with the record's revision as ETag)
// and POST Path with {"hold": true} or {"hold": false}: set or clear
// the hold, answering the View after. A POST may carry If-Match with the
// ETag a GET returned (or If-None-Match: * for "only while no record is
// stored"); a record changed since is 412 and changes nothing. Bad input
// is 400 naming the field and changes nothing; a refusal 403; a single
// replica, or a write that lost 3 races, 409; the store down 503.
func (v *Versions) Handler(hc HandlerConfig) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path, func(w http.ResponseWriter, _ *http.Request) {
		st := v.State()
		setETag(w, st)
		httpjson.Write(w, http.StatusOK, v.view(st, hc.Members))
	})
	mux.HandleFunc("POST "+Path, func(w http.ResponseWriter, r *http.Request) {
		if hc.Authorizer == nil {
			httpjson.WriteError(w, http.StatusForbidden, "", "cluster version hold: changes are disabled on this server")
			return
		}
		if err := hc.Authorizer.Authorize(r.Context(), HoldAction, ""); err != nil {
			httpjson.WriteError(w, http.StatusForbidden, "", fmt.Sprintf("cluster version hold: %v (the hold takes the %s right)", err, HoldAction))
			return
		}
		cond, ok := precondition(w, r)
		if !ok {
			return
		}
		hold, err := holdBody(w, r)
		if err != nil {
			httpjson.WriteError(w, http.StatusBadRequest, fieldOf(err), err.Error())
			return
		}
		before := v.State()
		st, err := v.SetHold(r.Context(), hold, authn.FromContext(r.Context()).String(), cond)
		v.record(r.Context(), hc.Audit, hold, before, st, err)
		if err != nil {
			fail(w, err, cond != nil)
			return
		}
		setETag(w, st)
		httpjson.Write(w, http.StatusOK, v.view(v.State(), hc.Members))
	})
	mux.HandleFunc(Path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "GET, HEAD, POST")
		httpjson.WriteError(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("method %s not allowed on %s, use GET, HEAD or POST", r.Method, Path))
	})
	return mux
}

// view is the API's answer for st.
func (v *Versions) view(st State, members Members) View {
	out := View{
		Version: st.Version, Supported: Current, Shared: v.Shared(), Hold: st.Hold,
		HoldBy: st.HoldBy, HoldAt: st.HoldAt, FinalisedBy: st.By, FinalisedAt: st.At, Revision: st.Rev,
		Members: []MemberView{},
	}
	if !out.Shared {
		return out
	}
	var live []ownership.Member
	if members != nil {
		live = members.Members()
	}
	for _, m := range live {
		out.Members = append(out.Members, MemberView{ID: m.ID, MaxVersion: Supported(m), Identity: m.Identity})
	}
	if members == nil {
		out.Waiting = v.Waiting()
		return out
	}
	out.Next, out.Waiting = Next(st.Record, live)
	if !members.Settled() {
		why := "this replica has not yet seen every live member (it started less than half a member TTL ago): the list may be short"
		if out.Waiting != "" {
			why += "; " + out.Waiting
		}
		out.Next, out.Waiting = 0, why
	}
	if out.Next != 0 {
		// The members say it may be raised: what the last round found.
		if w := v.Waiting(); w != "" {
			out.Next, out.Waiting = 0, w
		}
	}
	return out
}

func setETag(w http.ResponseWriter, st State) {
	if st.Rev > 0 {
		w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(st.Rev, 10)))
	}
}

// precondition reads If-Match (the ETag a GET returned) and
// If-None-Match: * ("none is stored"); nil when the request has
// neither. A malformed header is answered 400.
func precondition(w http.ResponseWriter, r *http.Request) (*int64, bool) {
	if h := strings.TrimSpace(r.Header.Get("If-None-Match")); h != "" {
		if h != "*" {
			httpjson.WriteError(w, http.StatusBadRequest, "If-None-Match", fmt.Sprintf("If-None-Match: %.40q: only * (no record stored) is supported", h))
			return nil, false
		}
		zero := int64(0)
		return &zero, true
	}
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" {
		return nil, true
	}
	unq := strings.TrimPrefix(h, "W/")
	if len(unq) >= 2 && unq[0] == '"' && unq[len(unq)-1] == '"' {
		unq = unq[1 : len(unq)-1]
	}
	n, err := strconv.ParseInt(unq, 10, 64)
	if err != nil || n < 1 {
		httpjson.WriteError(w, http.StatusBadRequest, "If-Match", fmt.Sprintf("If-Match: %.40q: want the ETag (a revision in quotes, e.g. \"57\") a GET returned", h))
		return nil, false
	}
	return &n, true
}

// fieldError is bad input naming its field.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.msg }

func fieldOf(err error) string {
	if fe, ok := errors.AsType[*fieldError](err); ok {
		return fe.field
	}
	return ""
}

// holdBody reads {"hold": true|false}: the member is required and
// nothing else is allowed, so that a typo does not release a hold.
func holdBody(w http.ResponseWriter, r *http.Request) (bool, error) {
	var body struct {
		Hold *bool `json:"hold"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return false, &fieldError{"body", fmt.Sprintf(`body: want {"hold": true} or {"hold": false}: %v`, err)}
	}
	if dec.More() {
		return false, &fieldError{"body", "body: more than one JSON value"}
	}
	if body.Hold == nil {
		return false, &fieldError{"hold", `hold: missing, want {"hold": true} or {"hold": false}`}
	}
	return *body.Hold, nil
}

// fail answers an error of SetHold.
func fail(w http.ResponseWriter, err error, conditional bool) {
	switch {
	case errors.Is(err, systemstore.ErrConflict) && conditional:
		httpjson.WriteError(w, http.StatusPreconditionFailed, "If-Match", err.Error())
	case errors.Is(err, systemstore.ErrConflict), errors.Is(err, ErrNotShared), errors.Is(err, ErrUnsupported):
		httpjson.WriteError(w, http.StatusConflict, "", err.Error())
	case errors.Is(err, systemstore.ErrUnavailable):
		httpjson.WriteError(w, http.StatusServiceUnavailable, "", err.Error())
	default:
		httpjson.WriteError(w, http.StatusInternalServerError, "", err.Error())
	}
}

// record audits a change of the hold that was allowed.
func (v *Versions) record(ctx context.Context, rec Recorder, hold bool, before, after State, err error) {
	if rec == nil {
		return
	}
	e := audit.Entry{Action: "cluster_version", Reason: "release", Old: render(before), New: render(after), Outcome: audit.OutcomeAllowed}
	if hold {
		e.Reason = "hold"
	}
	if err != nil {
		e.Outcome, e.Reason, e.New = audit.OutcomeFailed, e.Reason+": "+err.Error(), ""
	}
	rec.Record(ctx, e)
}

func render(st State) string {
	h := "off"
	if st.Hold {
		h = "on"
	}
	return fmt.Sprintf("version %d, hold %s", st.Version, h)
}
