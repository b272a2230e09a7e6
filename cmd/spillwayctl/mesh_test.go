package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/spillway/spillway/admin"
	adminv1 "github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/replica/exchange"
)

// fakeMesh is a hand-written fake of admin.MeshLoad: this replica owns
// "payments"; r0 and r1 sent it load.
type fakeMesh struct{}

func (fakeMesh) Owns(service string) bool { return service == "payments" }

func (fakeMesh) Loads(service string, now time.Time) []load.Load {
	if service != "payments" {
		return nil
	}
	flow := func(clientZone, zone string, rps float64, reporters int) load.Load {
		return load.Load{Key: load.Key{Service: service, ClientZone: clientZone, Locality: registry.Locality{Zone: zone}},
			Issued: rps, Succeeded: rps, InProgress: 3, Reporters: reporters, Updated: now.Add(-2 * time.Second)}
	}
	return []load.Load{flow("zone-a", "zone-a", 300, 4), flow("zone-b", "zone-b", 20, 2)}
}

func (fakeMesh) Contributors(service string, _ time.Time) []exchange.Contributor {
	if service != "payments" {
		return nil
	}
	return []exchange.Contributor{{Replica: "r0", Age: 400 * time.Millisecond}, {Replica: "r1", Age: 1200 * time.Millisecond}}
}

// localLoad is the load reported to this replica: checkout in zone-b
// calling search.
type localLoad struct{ fakePlans }

func (localLoad) Loads(service string, now time.Time) []load.Load {
	if service != "search" {
		return nil
	}
	return []load.Load{{Key: load.Key{Service: service, ClientService: "checkout", ClientZone: "zone-b", Locality: registry.Locality{Region: "r", Zone: "zone-b"}},
		Issued: 5, Succeeded: 5, TotalSucceeded: 50, Reporters: 1, Updated: now}}
}

// startMeshServer serves the admin API of a replica that shares load:
// the plans of weightsPlans (payments published by r2), fakeMesh and
// localLoad.
func startMeshServer(t *testing.T) string {
	t.Helper()
	p := weightsPlans()
	a, err := admin.New(admin.Config{Loads: localLoad{p}, Subscriptions: p, Plans: p, Mesh: fakeMesh{}, Now: func() time.Time { return wt0 }})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	a.RegisterGRPC(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

func TestCLILoadMesh(t *testing.T) {
	addr := startMeshServer(t)
	t.Run("owner", func(t *testing.T) {
		got := mustCtl(t, addr, "load", "payments")
		want := "" +
			"mesh-wide load, merged by this replica (the owner) from r0 (0.4s old), r1 (1.2s old)\n" +
			"CLIENT-SERVICE  CLIENT-ZONE  →  LOCALITY-ZONE  RPS(ISSUED/OK/ERR)  IN-FLIGHT  TOTAL-OK  REPORTERS  AGE\n" +
			"(all)           zone-a       →  zone-a         300/300/0           3          -         4          2s ago\n" +
			"(all)           zone-b       →  zone-b         20/20/0             3          -         2          2s ago\n"
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("load payments on its owner (-want +got):\n%s", diff)
		}
	})
	t.Run("owner_json", func(t *testing.T) {
		out := mustCtl(t, addr, "load", "payments", "-o", "json")
		var got adminv1.LoadResponse
		if err := protojson.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("load -o json is not a LoadResponse: %v\n%s", err, out)
		}
		want := []*adminv1.Contributor{{Replica: "r0", AgeSeconds: 0.4}, {Replica: "r1", AgeSeconds: 1.2}}
		if !got.GetMerged() || got.GetOwnerElsewhere() || got.GetOwner() != "r2" || len(got.GetRows()) != 2 {
			t.Errorf("merged %v, owner_elsewhere %v, owner %q, %d rows; want true, false, r2, 2:\n%s",
				got.GetMerged(), got.GetOwnerElsewhere(), got.GetOwner(), len(got.GetRows()), out)
		}
		if diff := cmp.Diff(want, got.GetMergedFrom(), protocmp.Transform()); diff != "" {
			t.Errorf("merged_from (-want +got):\n%s", diff)
		}
		if compact := strings.Join(strings.Fields(out), ""); !strings.Contains(compact, `"merged_from":[{"replica":"r0","age_seconds":0.4}`) {
			t.Errorf("load -o json lacks merged_from with proto names:\n%s", out)
		}
	})
	t.Run("owner_elsewhere", func(t *testing.T) {
		got := mustCtl(t, addr, "load", "search")
		want := "" +
			"load reported to this replica only; the service's owner merges every replica's\n" +
			"CLIENT-SERVICE  CLIENT-ZONE  →  LOCALITY-ZONE  RPS(ISSUED/OK/ERR)  IN-FLIGHT  TOTAL-OK  REPORTERS  AGE\n" +
			"checkout        zone-b       →  zone-b         5/5/0               0          50        1          0s ago\n"
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("load search off its owner (-want +got):\n%s", diff)
		}
	})
}
