package httpjson_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/protobuf/types/known/typepb"

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

// TestWriteProto: a protobuf answer is 200 JSON with the .proto's field
// names and every field present, zero values too.
func TestWriteProto(t *testing.T) {
	rec := httptest.NewRecorder()
	httpjson.WriteProto(rec, &typepb.Field{Name: "weight", Number: 3})
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q; want 200 application/json", rec.Code, rec.Header().Get("Content-Type"))
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("body %q: %v", rec.Body.String(), err)
	}
	for _, tc := range []struct {
		key  string
		want any
	}{
		{"name", "weight"},
		{"number", float64(3)},
		{"json_name", ""}, // proto name, not jsonName; present though empty
		{"type_url", ""},
		{"packed", false},
	} {
		if v, ok := got[tc.key]; !ok || v != tc.want {
			t.Errorf("%s = %v (present %v), want %v", tc.key, v, ok, tc.want)
		}
	}
}
