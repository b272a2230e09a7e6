package httpjson_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/spillway/spillway/internal/httpjson"
)

func TestWriteError(t *testing.T) {
	for _, tc := range []struct {
		name       string
		code       int
		field, msg string
		wantBody   string
	}{
		{"with field", http.StatusBadRequest, "body", "body:3: unknown field", `{"error":"body:3: unknown field","field":"body","code":400}` + "\n"},
		{"without field", http.StatusServiceUnavailable, "", "store unavailable", `{"error":"store unavailable","code":503}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			httpjson.WriteError(rec, tc.code, tc.field, tc.msg)
			if rec.Code != tc.code {
				t.Errorf("status %d, want %d", rec.Code, tc.code)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if got := rec.Body.String(); got != tc.wantBody {
				t.Errorf("body %q, want %q", got, tc.wantBody)
			}
		})
	}
}
