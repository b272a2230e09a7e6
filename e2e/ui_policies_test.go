package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	pb "github.com/spillway/spillway/registry/registryv1"
)

// TestUIPolicies is #30 item 3 (display): three services whose config
// files (--service-config-dir) set resilience policies, between them
// every policy and every form of the endpoint-picking one, and one
// without a config. The service page's Policies panel shows, for each,
// the lines `spillwayctl config get S` prints under "resilience:" (the
// page and the command describe the policies in the same words, the
// defaults the server filled in included); the service without a config
// shows that it has none and no policy line. No console error
// throughout.
func TestUIPolicies(t *testing.T) {
	const none = "ui-policies-none"
	configs := map[string]string{
		"ui-policies-full": `resilience:
  outlier_detection: {success_rate: {}, failure_percentage: {}}
  max_requests: 100
  timeout: 5s
  retry: {on: [unavailable, resource_exhausted], num_retries: 2}
  fault: {delay: {fixed: 100ms, percent: 20}, abort: {percent: 10}, header: x-chaos, max_active_faults: 100}
  lb: {ring_hash: {header: x-user}}
`,
		"ui-policies-defaults": `resilience:
  outlier_detection: {failure_percentage: {threshold: 60}, max_ejection_percent: 0}
  retry: {}
  fault: {abort: {grpc_status: resource_exhausted, percent: 5}}
  lb: {least_request: {}}
`,
		"ui-policies-wrr": `resilience:
  max_requests: 1
  timeout: 1500ms
  fault: {delay: {fixed: 2s, percent: 0.5}, max_active_faults: 1}
  lb: {client_wrr: {oob_reporting_period: 30s, error_utilization_penalty: 0.25}}
`,
	}
	dir := t.TempDir()
	for svc, cfg := range configs {
		if err := os.WriteFile(filepath.Join(dir, svc+".yaml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	s := newServer(t, "--lease-ttl", "1h", "--service-config-dir", dir)
	s.start()
	reg := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	services := []string{"ui-policies-full", "ui-policies-defaults", "ui-policies-wrr", none}
	for i, svc := range services {
		if _, err := reg.Register(ctx, &pb.RegisterRequest{Service: svc, Endpoint: &pb.Endpoint{
			Id: svc + "-0", Address: "127.0.0.1", Ports: []*pb.Port{{Name: "grpc", Number: uint32(19000 + i)}},
			Locality: &pb.Locality{Region: "r1", Zone: "zone-a"},
		}}); err != nil {
			t.Fatalf("register %s: %v", svc, err)
		}
	}

	// What spillwayctl config get prints under "resilience:", trimmed.
	ctlLines := func(svc string) []string {
		t.Helper()
		out := s.ctl(ctx, "config", "get", svc)
		var lines []string
		in := false
		for _, l := range strings.Split(out, "\n") {
			switch {
			case l == "resilience:":
				in = true
			case strings.HasPrefix(l, "resilience: none"):
				return nil
			case !in:
			case strings.HasPrefix(l, "{"):
				return lines
			default:
				lines = append(lines, strings.TrimSpace(l))
			}
		}
		t.Fatalf("spillwayctl config get %s: no resilience section before the JSON:\n%s", svc, out)
		return nil
	}

	b := newBrowser(t)
	const pageLines = `Array.from(document.querySelectorAll('[data-testid="policy"]')).map(e => e.textContent)`
	text := func(testid string) string {
		return fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? "")`, sel(testid))
	}
	b.do("open the first service", chromedp.Navigate(s.url("/ui/#/service/"+services[0])))
	for _, svc := range services {
		b.do("open "+svc, b.hash("#/service/"+svc))
		b.waitFor(svc+"'s policies panel", fmt.Sprintf(`%s === %q && !!document.querySelector(%q)`, text("service-title"), svc, sel("policies")), 10*time.Second)
		want := ctlLines(svc)
		got := eval[[]string](b, svc+"'s policy lines", pageLines)
		t.Logf("%s: page shows %d policy lines", svc, len(got))
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: the Policies panel differs from spillwayctl config get (-ctl +page):\n%s", svc, diff)
		}
		if svc == none {
			if note := eval[string](b, "the none note", text("policies-none")); !strings.HasPrefix(note, "None") {
				t.Errorf("%s has no config: the Policies panel says %q, want \"None: ...\"", svc, note)
			}
		} else if len(got) == 0 || eval[bool](b, "the none note", fmt.Sprintf(`!!document.querySelector(%q)`, sel("policies-none"))) {
			t.Errorf("%s sets policies: the page shows %d lines and the none note; want its policies only", svc, len(got))
		}
	}
	if got := eval[[]string](b, "the policy keys", `Array.from(document.querySelectorAll('[data-testid="policy"]')).map(e => e.dataset.policy)`); len(got) != 0 {
		t.Errorf("%s: policy items %v, want none", none, got)
	}
	if n := b.problemCount(); n > 0 {
		t.Errorf("%d console errors or exceptions (listed below)", n)
	}
	if strings.Contains(s.logs.String(), "panic:") {
		t.Errorf("server logs a panic:\n%s", s.logs)
	}
	b.do("leave the page", chromedp.Navigate("about:blank"))
	t.Logf("TestUIPolicies: %v", time.Since(start).Round(time.Millisecond))
}
