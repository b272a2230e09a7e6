package registryapi

import (
	"fmt"
	"io"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/internal/httpjson"
	pb "github.com/spillway/spillway/registry/registryv1"
)

// maxBody bounds a JSON request; an endpoint with full metadata is ~5 KiB.
const maxBody = 64 << 10

var (
	unmarshal = protojson.UnmarshalOptions{DiscardUnknown: false}
)

// Handler returns the HTTP/JSON API, to be mounted at the root of the HTTP
// server (its paths start with /v1/).
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/register", func(w http.ResponseWriter, r *http.Request) {
		req := &pb.RegisterRequest{}
		if !decode(w, r, req) {
			return
		}
		resp, err := a.Register(r.Context(), req)
		reply(w, resp, err)
	})
	mux.HandleFunc("POST /v1/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		req := &pb.HeartbeatRequest{}
		if !decode(w, r, req) {
			return
		}
		resp, err := a.Heartbeat(r.Context(), req)
		reply(w, resp, err)
	})
	mux.HandleFunc("POST /v1/deregister", func(w http.ResponseWriter, r *http.Request) {
		req := &pb.DeregisterRequest{}
		if !decode(w, r, req) {
			return
		}
		resp, err := a.Deregister(r.Context(), req)
		reply(w, resp, err)
	})
	mux.HandleFunc("POST /v1/utilization", func(w http.ResponseWriter, r *http.Request) {
		req := &pb.UtilizationReport{}
		if !decode(w, r, req) {
			return
		}
		resp, err := a.reportUtilizationJSON(r.Context(), req)
		reply(w, resp, err)
	})
	mux.HandleFunc("GET /v1/services", func(w http.ResponseWriter, r *http.Request) {
		resp, err := a.ListServices(r.Context(), &pb.ListServicesRequest{})
		reply(w, resp, err)
	})
	mux.HandleFunc("GET /v1/services/{service}/endpoints", func(w http.ResponseWriter, r *http.Request) {
		resp, err := a.ListEndpoints(r.Context(), &pb.ListEndpointsRequest{Service: r.PathValue("service")})
		reply(w, resp, err)
	})
	return mux
}

func decode(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, "body", fmt.Sprintf("reading request body: %v", err))
		return false
	}
	if err := unmarshal.Unmarshal(body, m); err != nil {
		httpjson.WriteError(w, http.StatusBadRequest, "body", fmt.Sprintf("malformed JSON: %v", err))
		return false
	}
	return true
}

var httpCodes = map[codes.Code]int{
	codes.InvalidArgument:  http.StatusBadRequest,
	codes.Unauthenticated:  http.StatusUnauthorized,
	codes.PermissionDenied: http.StatusForbidden,
	codes.NotFound:         http.StatusNotFound,
	codes.AlreadyExists:    http.StatusConflict,
	codes.Aborted:          http.StatusConflict,
	codes.Canceled:         499,
	codes.DeadlineExceeded: http.StatusGatewayTimeout,
	codes.Unavailable:      http.StatusServiceUnavailable,
	codes.Unimplemented:    http.StatusNotImplemented,
}

func reply(w http.ResponseWriter, resp proto.Message, err error) {
	if err != nil {
		st := status.Convert(err)
		code, ok := httpCodes[st.Code()]
		if !ok {
			code = http.StatusInternalServerError
		}
		field := ""
		if st.Code() == codes.InvalidArgument {
			field = fieldOf(st.Message())
		}
		httpjson.WriteError(w, code, field, st.Message())
		return
	}
	httpjson.WriteProto(w, resp)
}

// fieldOf extracts the field name from a FieldError message ("field: reason").
func fieldOf(msg string) string {
	for i := 0; i < len(msg); i++ {
		if msg[i] == ':' {
			return msg[:i]
		}
		if msg[i] == ' ' {
			return ""
		}
	}
	return ""
}
