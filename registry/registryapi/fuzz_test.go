package registryapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spillway/spillway/registry/systemstore"
)

// FuzzHTTPRegister posts arbitrary bodies to /v1/register: the server never
// panics or answers 5xx, and the store changes only on a 200.
func FuzzHTTPRegister(f *testing.F) {
	for _, seed := range []string{
		`{"service":"web","endpoint":{"address":"10.0.0.1","ports":[{"name":"grpc","number":8080}],"locality":{"zone":"a"}}}`,
		`{"service":"web","endpoint":{"address":"2001:db8::1","ports":[{"name":"http","number":80,"protocol":"udp"}],"metadata":{"k":"v"}},"ttl_seconds":10}`,
		`{"service":"web","endpoint":{"address":"10.0.0.1","ports":[{"name":"grpc","number":0}]}}`,
		`{"service":"web","endpoint":{`,
		`{"service":7}`,
		`[]`,
		``,
		`{"service":"a.b.c","endpoint":{"id":"x","address":"::ffff:10.0.0.1","ports":[{"name":"p","number":65535}],"health":"draining","weight":65535}}`,
	} {
		f.Add(seed)
	}
	h := newHarnessWith(f, systemstore.NewMemory())
	handler := h.http.Config.Handler
	f.Fuzz(func(t *testing.T, body string) {
		before := h.store.Snapshot()
		req := httptest.NewRequest("POST", "/v1/register", strings.NewReader(body))
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		switch {
		case rec.Code >= 500:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		case rec.Code != http.StatusOK && h.store.Snapshot() != before:
			t.Fatalf("rejected body %q (status %d) changed the store", body, rec.Code)
		}
	})
}
