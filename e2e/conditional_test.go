package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillway/spillway/internal/testwait"
)

// TestConditionalConfigWrites (issue 27, point 4): three replicas on real
// etcd. Writers on every replica read one version of a service's config
// (its ETag) and race PUTs with If-Match; exactly one is 200, every other
// is 412 naming the current version, and every replica ends up serving
// the winner's config. Then the same race for DELETE.
func TestConditionalConfigWrites(t *testing.T) {
	c := newReplicaClusterWith(t, 3)
	path := "/v1/config/payments"
	do := func(s *server, method, body string, header ...string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, s.url(path), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e2eToken)
		req.Header.Set("Content-Type", "application/yaml")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	if code, body, _ := do(c.servers[0], "PUT", "probe_share: 0.01\n", "If-None-Match", "*"); code != 200 {
		t.Fatalf("create payments' config = %d %s", code, body)
	}
	// Every replica has the record before the race: each then reads the
	// same ETag.
	var etag string
	testwait.For(t, 30*time.Second, "every replica serves payments' config at one version", func() (bool, string) {
		var tags []string
		for _, s := range c.servers {
			_, _, h := do(s, "GET", "")
			tags = append(tags, h.Get("ETag"))
		}
		etag = tags[0]
		return etag != "" && tags[1] == etag && tags[2] == etag, fmt.Sprint(tags)
	})

	race := func(method string, body func(i int) string) (winners []int, codes map[int]int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		codes = map[int]int{}
		for i := range 12 {
			s := c.servers[i%3]
			wg.Go(func() {
				code, resp, _ := do(s, method, body(i), "If-Match", etag)
				mu.Lock()
				defer mu.Unlock()
				codes[code]++
				switch code {
				case 200:
					winners = append(winners, i)
				case 412:
					if !strings.Contains(resp, `"field":"If-Match"`) || !strings.Contains(resp, "changed since it was read") {
						t.Errorf("%s %d refused = %s, want a conflict naming If-Match", method, i, resp)
					}
				default:
					t.Errorf("%s %d = %d %s, want 200 or 412", method, i, code, resp)
				}
			})
		}
		wg.Wait()
		return winners, codes
	}

	shares := func(i int) string { return fmt.Sprintf("probe_share: 0.%02d\n", 10+i) }
	winners, codes := race("PUT", shares)
	if len(winners) != 1 {
		t.Fatalf("PUT winners = %v (codes %v), want exactly one", winners, codes)
	}
	want := strings.TrimSpace(shares(winners[0]))
	testwait.For(t, 30*time.Second, "every replica serves the winner's config", func() (bool, string) {
		var got []string
		for _, s := range c.servers {
			_, body, h := do(s, "GET", "")
			if !strings.Contains(body, want) {
				return false, fmt.Sprintf("%s: %s", s.grpcAddr, body)
			}
			got = append(got, h.Get("ETag"))
		}
		etag = got[0]
		return got[1] == etag && got[2] == etag, fmt.Sprint(got)
	})
	t.Logf("PUT race: winner %d of 12 (%v), config %q", winners[0], codes, want)

	winners, codes = race("DELETE", func(int) string { return "" })
	if len(winners) != 1 {
		t.Fatalf("DELETE winners = %v (codes %v), want exactly one", winners, codes)
	}
	t.Logf("DELETE race: winner %d of 12 (%v)", winners[0], codes)
}
