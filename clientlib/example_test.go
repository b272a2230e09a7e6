package clientlib_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway/spillway/clientlib"
	"github.com/spillway/spillway/migration/rollout"
)

// A service dials another through spillway and uses the Conn with any
// generated client. (Networked: compiled, not run.)
func Example() {
	ctx := context.Background()
	conn, err := clientlib.Dial(ctx, "payments",
		clientlib.WithService("checkout"), // who is calling: required
		clientlib.WithMetadata(map[string]string{"tier": "3", "team": "shop"}),
		clientlib.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))),
	)
	if err != nil {
		log.Fatal(err) // an invalid option; the error names it
	}
	defer conn.Close()

	client := healthpb.NewHealthClient(conn) // any generated client
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		log.Print(err) // a gRPC status, as from any grpc.ClientConn
	}
}

// Status says which channel new RPCs use and why. (Networked: compiled,
// not run.)
func ExampleConn_Status() {
	conn, err := clientlib.Dial(context.Background(), "payments", clientlib.WithService("checkout"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	s := conn.Status()
	fmt.Printf("%s -> %s over %v (%s: %s)\n", s.Service, s.Target, s.Channel, s.Reason, s.Detail)
	fmt.Println(s.Eligibility)
}

// Decide is the rollout decision Dial makes, without the network: here for
// three callers under a config that moves 10% of the tier-3 services of
// us-east1.
func ExampleDecide() {
	cfg, err := rollout.Parse([]byte(`
rules:
  - name: tier3-us-east1
    match: {tier: "3", region: us-east1}
    percent: 10
  - name: everyone-else
    match: {}
    percent: 0
`))
	if err != nil {
		log.Fatal(err)
	}
	east3 := map[string]string{"tier": "3", "region": "us-east1"}
	fmt.Println("svc-00:", clientlib.Decide(cfg, "svc-00", east3))
	fmt.Println("svc-01:", clientlib.Decide(cfg, "svc-01", east3))
	fmt.Println("svc-00 in tier 1:", clientlib.Decide(cfg, "svc-00", map[string]string{"tier": "1"}))
	// Output:
	// svc-00: eligible: rule 0 (tier3-us-east1): bucket 159 < 1000 (10%)
	// svc-01: not eligible: rule 0 (tier3-us-east1): bucket 1948 >= 1000 (10%)
	// svc-00 in tier 1: not eligible: rule 1 (everyone-else): bucket 159 >= 0 (0%)
}

// Growing a rollout keeps who was in: the services eligible at 10% are
// still eligible at 20%, because the decision is a hash of the name.
func ExampleDecide_grow() {
	at := func(percent float64) []string {
		cfg := &rollout.Config{Rules: []rollout.Rule{{Percent: percent}}}
		var in []string
		for i := range 40 {
			name := fmt.Sprintf("svc-%02d", i)
			if clientlib.Decide(cfg, name, nil).Eligible {
				in = append(in, name)
			}
		}
		return in
	}
	fmt.Println("10%:", at(10))
	fmt.Println("20%:", at(20))
	// Output:
	// 10%: [svc-00 svc-21]
	// 20%: [svc-00 svc-01 svc-11 svc-21 svc-27 svc-30]
}
