package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	pb "github.com/spillway/spillway/registry/registryv1"
	"github.com/spillway/spillway/xds/xdstest"
)

// uiSubsetsJSON is the part of GET /v1/weights the subsets panel shows.
type uiSubsetsJSON struct {
	Subsets *struct {
		Mode      string  `json:"mode"`
		Size      int     `json:"size"`
		Slots     int     `json:"slots"`
		Min       int     `json:"clients_per_endpoint_min"`
		Max       int     `json:"clients_per_endpoint_max"`
		MaxOverAv float64 `json:"clients_per_endpoint_max_over_avg"`
		Client    *struct {
			NodeID    string   `json:"node_id"`
			Zone      string   `json:"zone"`
			Slot      int      `json:"slot"`
			Endpoints []string `json:"endpoints"`
		} `json:"client"`
	} `json:"subsets"`
}

// TestUISubsets is #29 item 6: a service whose config asks for
// deterministic subsets of 2 has 4 backends and 4 grpc-go xDS clients,
// one of them with a node id that is HTML. Once GET /v1/weights gives
// every client its subset, the service page's Subsets panel shows the
// mode, size, slots and clients per endpoint of that answer; typing a
// client's node id shows its zone, slot and endpoints, as GET
// /v1/weights?client= gives them; the HTML node id is shown as text (no
// element made of it, no script run). A service without subsets has no
// panel. No console error throughout.
func TestUISubsets(t *testing.T) {
	const (
		size, backends = 2, 4
		plain          = "ui-plain-svc"
		evil           = `<img src=x onerror=alert(1)>`
	)
	start := time.Now()
	s := newServer(t, "--xds-debounce", "20ms", "--weights-interval", "1s", "--lease-ttl", "1h", "--service-config-dir", subsetConfig(t, size))
	s.start()
	reg := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	register := func(service string, b *xdsBackend) {
		t.Helper()
		if _, err := reg.Register(ctx, &pb.RegisterRequest{Service: service, Endpoint: &pb.Endpoint{
			Id: b.id, Address: "127.0.0.1", Ports: []*pb.Port{{Name: "grpc", Number: b.port}},
			Locality: &pb.Locality{Region: "r1", Zone: "zone-a"},
		}}); err != nil {
			t.Fatalf("register %s/%s: %v", service, b.id, err)
		}
	}
	for i := range backends {
		register(subsetService, startXDSBackend(t, fmt.Sprintf("ui-b%d", i), "zone-a"))
	}
	register(plain, startXDSBackend(t, "ui-plain", "zone-a"))
	nodes := []string{"ui-subset-client-0", "ui-subset-client-1", "ui-subset-client-2", evil}
	for _, id := range nodes {
		xdstest.Dial(t, s.grpcAddr, subsetService, xdstest.Node{ID: id, Cluster: "caller", Region: "r1", Zone: "zone-a"}).Connect()
	}
	// A client of the plain service too, so that it is planned like the
	// other (weights: true) and its page reads GET /v1/weights.
	xdstest.Dial(t, s.grpcAddr, plain, xdstest.Node{ID: "ui-plain-client", Cluster: "caller", Region: "r1", Zone: "zone-a"}).Connect()

	// The API first: every client has its slot and a subset of size.
	weightsOf := func(client string) (uiSubsetsJSON, error) {
		q := url.Values{"service": {subsetService}}
		if client != "" {
			q.Set("client", client)
		}
		var w uiSubsetsJSON
		err := getJSONErr(s, "/v1/weights?"+q.Encode(), &w)
		return w, err
	}
	want := map[string][]string{} // node id -> its endpoints
	var plan uiSubsetsJSON
	var last string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		clear(want)
		var err error
		if plan, err = weightsOf(""); err == nil && plan.Subsets != nil && plan.Subsets.Slots == len(nodes) {
			for _, id := range nodes {
				w, err := weightsOf(id)
				if err != nil {
					last = err.Error()
					break
				}
				if c := w.Subsets.Client; c != nil && len(c.Endpoints) == size {
					want[id] = c.Endpoints
				}
			}
		} else if err != nil {
			last = err.Error()
		} else if plan.Subsets == nil {
			last = "no subsets"
		} else {
			last = fmt.Sprintf("%d slots", plan.Subsets.Slots)
		}
		if len(want) == len(nodes) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/weights?service=%s: not every one of %d clients with a subset of %d within 10s (%d so far; last: %s)", subsetService, len(nodes), size, len(want), last)
		}
	}
	ps := plan.Subsets
	t.Logf("plan after %v: %s, size %d, %d slots, %d to %d clients per endpoint (max/avg %.3f); subsets %v",
		time.Since(start).Round(time.Millisecond), ps.Mode, ps.Size, ps.Slots, ps.Min, ps.Max, ps.MaxOverAv, want)

	b := newBrowser(t)
	text := func(testid string) string {
		return fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? "")`, sel(testid))
	}
	b.do("open "+subsetService, chromedp.Navigate(s.url("/ui/#/service/"+subsetService)))
	b.waitFor("the subsets panel with the plan's size and slots", fmt.Sprintf(`%s === %q && %s === %q && %s === %q`,
		text("subsets-mode"), "deterministic",
		text("subsets-size"), fmt.Sprintf("%d endpoints per client", size),
		text("subsets-slots"), fmt.Sprintf("%d slots", len(nodes))), 10*time.Second)
	b.waitFor("the clients per endpoint", fmt.Sprintf(`%s === %q`, text("subsets-clients-per-endpoint"),
		fmt.Sprintf("%d to %d slots (max/avg %.3f)", ps.Min, ps.Max, ps.MaxOverAv)), 5*time.Second)

	// The page's endpoints of the client asked, and its node id.
	endpointsJS := fmt.Sprintf(`Array.from(document.querySelectorAll('%s [data-endpoint]')).map(e => e.dataset.endpoint)`, sel("subset-client-endpoints"))
	typeClient := func(node string) {
		t.Helper()
		b.do("type "+node, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).value = ""`, sel("subset-client-input"))),
			chromedp.SendKeys(chromedp.CSS(sel("subset-client-input")), node+"\r"))
	}
	ask := func(node string) {
		t.Helper()
		typeClient(node)
		ids, _ := json.Marshal(want[node])
		b.waitFor(node+"'s subset", fmt.Sprintf(`%s === %s && JSON.stringify(%s) === %s`, text("subset-client-node"), jsString(node),
			endpointsJS, jsString(string(ids))), 10*time.Second)
		got := eval[[]string](b, "the client's endpoints", endpointsJS)
		slot := eval[string](b, "the client's slot", text("subset-client-slot"))
		zone := eval[string](b, "the client's zone", text("subset-client-zone"))
		t.Logf("page: client %q, zone %s, slot %s, endpoints %v", node, zone, slot, got)
		if !slices.Equal(got, want[node]) || zone != "zone-a" {
			t.Errorf("client %q: page shows zone %q, endpoints %v; want zone-a, %v (GET /v1/weights?client=)", node, zone, got, want[node])
		}
	}
	ask(nodes[1])
	if got := eval[string](b, "the input", fmt.Sprintf(`document.querySelector(%q).value`, sel("subset-client-input"))); got != nodes[1] {
		t.Errorf("the client input after a poll holds %q, want %q (the panel must not be rebuilt by polls)", got, nodes[1])
	}

	// A node id that is HTML is text: a script it would run is caught
	// (alert is replaced; a dialog would be accepted by the harness
	// unseen), and no element is made of it.
	b.do("watch alert", chromedp.Evaluate[chromedp.Void](`window.alerted = 0; window.alert = () => { window.alerted++ }`))
	ask(evil)
	// Two polls more, each rendering the answer for the id again.
	polls := `performance.getEntriesByType("resource").filter(e => e.name.includes("/v1/weights?") && e.name.includes("client=")).length`
	n := eval[int](b, "polls so far", polls)
	b.waitFor("two more polls", fmt.Sprintf(`%s >= %d`, polls, n+2), 10*time.Second)
	ask(evil)
	if n := eval[int](b, "img elements", `document.querySelectorAll("main img").length`); n != 0 {
		t.Errorf("the page has %d img elements after showing node id %q, want 0 (the id must be text)", n, evil)
	}
	if n := eval[int](b, "alert calls", `window.alerted`); n != 0 {
		t.Errorf("alert called %d times after showing node id %q, want 0", n, evil)
	}

	// A node not connected: said so, and the id again as text.
	const unknown = "no-such-node"
	typeClient(unknown)
	b.waitFor("the not-connected note", fmt.Sprintf(`%s.includes(%q) && !document.querySelector(%q)`, text("subset-client-missing"), unknown, sel("subset-client-endpoints")), 10*time.Second)

	// A service without subsets: its weights are shown, no panel.
	b.do("open "+plain, b.hash("#/service/"+plain))
	b.waitFor(plain+"'s weights", fmt.Sprintf(`%s === %q && %s.startsWith("Fallback:")`, text("service-title"), plain, text("fallback")), 10*time.Second)
	if eval[bool](b, "subsets panel", fmt.Sprintf(`!!document.querySelector(%q)`, sel("subsets"))) {
		t.Errorf("%s has no subsets but its page shows a subsets panel", plain)
	}
	var pw uiSubsetsJSON
	getJSON(t, s.httpAddr, "/v1/weights?service="+plain, &pw)
	if pw.Subsets != nil {
		t.Errorf("GET /v1/weights?service=%s: subsets = %+v, want none", plain, *pw.Subsets)
	}
	if n := b.problemCount(); n > 0 {
		t.Errorf("%d console errors or exceptions (listed below)", n)
	}
	if strings.Contains(s.logs.String(), "panic:") {
		t.Errorf("server logs a panic:\n%s", s.logs)
	}
	b.do("leave the page", chromedp.Navigate("about:blank"))
	t.Logf("TestUISubsets: %v", time.Since(start).Round(time.Millisecond))
}
