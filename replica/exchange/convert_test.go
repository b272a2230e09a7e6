package exchange

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/replica/exchange/meshv1"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// goodSummary is a valid summary from replica with two services.
func goodSummary(replica string, at time.Time) load.Summary {
	return load.Summary{
		Replica: replica, At: at, Interval: time.Second,
		Services: []load.ServiceSummary{
			{
				Service: "payments",
				Flows: []load.Flow{
					{ClientZone: "zone-a", Zone: "zone-a", Issued: 100, Succeeded: 99, Errored: 1, InProgress: 3, Reporters: 2, Updated: at.Add(-500 * time.Millisecond)},
					{ClientZone: "zone-a", Zone: "zone-b", Issued: 10, Succeeded: 10, Reporters: 2, Updated: at.Add(-time.Second)},
				},
				Clients: []load.ClientCount{{Zone: "zone-a", Count: 2}},
				Endpoints: []load.EndpointUtilization{
					withRates(report("pay-1", 0.4, 30, 100, at.Add(-200*time.Millisecond), time.Second), 120.5, 3.25, 12.75),
					report("pay-2", 0.9, 0, 0, at.Add(-3*time.Second), 2*time.Second), // an agent's: no requests
				},
			},
			{Service: "search.prod", Clients: []load.ClientCount{{Zone: "", Count: 1}, {Zone: "zone-b", Count: 4}}},
		},
		Shards: []load.ShardEpoch{{Shard: 0, Epoch: 1}, {Shard: 7, Epoch: 3}, {Shard: MaxShards - 1, Epoch: 1 << 40}},
	}
}

// report is an endpoint's utilization report as the table holds it.
func report(id string, cpu float64, inFlight, limit uint32, reported time.Time, interval time.Duration) load.EndpointUtilization {
	return load.EndpointUtilization{ID: id, CPU: cpu, InFlight: inFlight, Limit: limit,
		Utilization: load.UtilizationOf(cpu, inFlight, limit), Reported: reported, Interval: interval}
}

// withRates sets a report's optional requests, errors per second and
// mean latency.
func withRates(u load.EndpointUtilization, rps, eps, latencyMs float64) load.EndpointUtilization {
	u.RPS, u.EPS, u.LatencyMs = rps, eps, latencyMs
	return u
}

func TestRoundTrip(t *testing.T) {
	want := goodSummary("replica-1", t0)
	b, err := proto.Marshal(ToProto(want))
	if err != nil {
		t.Fatal(err)
	}
	var m meshv1.Summary
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	got, err := FromProto(&m)
	if err != nil {
		t.Fatalf("FromProto: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

// badCases each break one field of a valid message; want names the field.
var badCases = []struct {
	name   string
	mutate func(m *meshv1.Summary)
	want   string
}{
	{"empty_replica", func(m *meshv1.Summary) { m.Replica = "" }, "summary.replica"},
	{"replica_slash", func(m *meshv1.Summary) { m.Replica = "a/b" }, "summary.replica"},
	{"replica_long", func(m *meshv1.Summary) { m.Replica = strings.Repeat("r", MaxReplicaLen+1) }, "summary.replica"},
	{"zero_interval", func(m *meshv1.Summary) { m.IntervalMs = 0 }, "summary.interval_ms"},
	{"huge_interval", func(m *meshv1.Summary) { m.IntervalMs = int64(time.Hour / time.Millisecond) }, "summary.interval_ms"},
	{"no_time", func(m *meshv1.Summary) { m.AtUnixNano = 0 }, "summary.at_unix_nano"},
	{"too_many_services", func(m *meshv1.Summary) {
		for i := 0; i <= MaxServices; i++ {
			m.Services = append(m.Services, &meshv1.ServiceSummary{Service: "s"})
		}
	}, "summary.services"},
	{"nil_service", func(m *meshv1.Summary) { m.Services[1] = nil }, "summary.services[1]"},
	{"bad_service_name", func(m *meshv1.Summary) { m.Services[1].Service = "Search_Prod" }, "summary.services[1].service"},
	{"empty_service_name", func(m *meshv1.Summary) { m.Services[0].Service = "" }, "summary.services[0].service"},
	{"duplicate_service", func(m *meshv1.Summary) { m.Services[1].Service = "payments" }, "summary.services[1].service"},
	{"too_many_flows", func(m *meshv1.Summary) {
		for i := 0; i <= MaxFlows; i++ {
			m.Services[0].Flows = append(m.Services[0].Flows, &meshv1.Flow{})
		}
	}, "summary.services[0].flows"},
	{"nil_flow", func(m *meshv1.Summary) { m.Services[0].Flows[1] = nil }, "summary.services[0].flows[1]"},
	{"bad_client_zone", func(m *meshv1.Summary) { m.Services[0].Flows[0].ClientZone = "zone a" }, "summary.services[0].flows[0].client_zone"},
	{"bad_zone", func(m *meshv1.Summary) { m.Services[0].Flows[1].Zone = "-b" }, "summary.services[0].flows[1].zone"},
	{"duplicate_flow", func(m *meshv1.Summary) { m.Services[0].Flows[1].Zone = "zone-a" }, "summary.services[0].flows[1]"},
	{"nan_issued", func(m *meshv1.Summary) { m.Services[0].Flows[0].Issued = math.NaN() }, "summary.services[0].flows[0].issued"},
	{"inf_succeeded", func(m *meshv1.Summary) { m.Services[0].Flows[0].Succeeded = math.Inf(1) }, "summary.services[0].flows[0].succeeded"},
	{"negative_errored", func(m *meshv1.Summary) { m.Services[0].Flows[1].Errored = -1 }, "summary.services[0].flows[1].errored"},
	{"huge_reporters", func(m *meshv1.Summary) { m.Services[0].Flows[0].Reporters = MaxCount + 1 }, "summary.services[0].flows[0].reporters"},
	{"negative_age", func(m *meshv1.Summary) { m.Services[0].Flows[0].AgeMs = -1 }, "summary.services[0].flows[0].age_ms"},
	{"old_age", func(m *meshv1.Summary) { m.Services[0].Flows[0].AgeMs = int64(2 * time.Hour / time.Millisecond) }, "summary.services[0].flows[0].age_ms"},
	{"too_many_client_zones", func(m *meshv1.Summary) {
		for i := 0; i <= MaxClientZones; i++ {
			m.Services[1].Clients = append(m.Services[1].Clients, &meshv1.ClientCount{})
		}
	}, "summary.services[1].clients"},
	{"nil_client", func(m *meshv1.Summary) { m.Services[1].Clients[0] = nil }, "summary.services[1].clients[0]"},
	{"bad_client_count_zone", func(m *meshv1.Summary) { m.Services[1].Clients[1].Zone = "ZONE-B" }, "summary.services[1].clients[1].zone"},
	{"duplicate_client_zone", func(m *meshv1.Summary) { m.Services[1].Clients[1].Zone = "" }, "summary.services[1].clients[1].zone"},
	{"too_many_endpoints", func(m *meshv1.Summary) {
		for i := 0; i <= MaxEndpoints; i++ {
			m.Services[1].Endpoints = append(m.Services[1].Endpoints, &meshv1.EndpointReport{})
		}
	}, "summary.services[1].endpoints"},
	{"nil_endpoint", func(m *meshv1.Summary) { m.Services[0].Endpoints[1] = nil }, "summary.services[0].endpoints[1]"},
	{"endpoint_no_id", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].Id = "" }, "summary.services[0].endpoints[0].id"},
	{"endpoint_bad_id", func(m *meshv1.Summary) { m.Services[0].Endpoints[1].Id = "pay_2/x" }, "summary.services[0].endpoints[1].id"},
	{"endpoint_duplicate_id", func(m *meshv1.Summary) { m.Services[0].Endpoints[1].Id = "pay-1" }, "summary.services[0].endpoints[1].id"},
	{"endpoint_nan_cpu", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].Cpu = math.NaN() }, "summary.services[0].endpoints[0].cpu"},
	{"endpoint_inf_cpu", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].Cpu = math.Inf(1) }, "summary.services[0].endpoints[0].cpu"},
	{"endpoint_negative_cpu", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].Cpu = -0.1 }, "summary.services[0].endpoints[0].cpu"},
	{"endpoint_high_cpu", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].Cpu = load.MaxCPU + 0.01 }, "summary.services[0].endpoints[0].cpu"},
	{"endpoint_huge_in_flight", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].InFlight = load.MaxLimit + 1 }, "summary.services[0].endpoints[0].in_flight"},
	{"endpoint_huge_limit", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].Limit = load.MaxLimit + 1 }, "summary.services[0].endpoints[0].limit"},
	{"endpoint_in_flight_without_limit", func(m *meshv1.Summary) { m.Services[0].Endpoints[1].InFlight = 3 }, "summary.services[0].endpoints[1].limit"},
	{"endpoint_short_interval", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].IntervalMs = 99 }, "summary.services[0].endpoints[0].interval_ms"},
	{"endpoint_long_interval", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].IntervalMs = 300_001 }, "summary.services[0].endpoints[0].interval_ms"},
	{"endpoint_negative_age", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].AgeMs = -1 }, "summary.services[0].endpoints[0].age_ms"},
	{"endpoint_old_age", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].AgeMs = int64(2 * time.Hour / time.Millisecond) }, "summary.services[0].endpoints[0].age_ms"},
	{"endpoint_negative_rps", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].Rps = -1 }, "summary.services[0].endpoints[0].rps"},
	{"endpoint_nan_rps", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].Rps = math.NaN() }, "summary.services[0].endpoints[0].rps"},
	{"endpoint_huge_rps", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].Rps = 2 * load.MaxRPS }, "summary.services[0].endpoints[0].rps"},
	{"endpoint_eps_above_rps", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].Eps = 121 }, "summary.services[0].endpoints[0].eps"},
	{"endpoint_eps_without_rps", func(m *meshv1.Summary) { m.Services[0].Endpoints[1].Eps = 1 }, "summary.services[0].endpoints[1].eps"},
	{"endpoint_negative_eps", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].Eps = -0.5 }, "summary.services[0].endpoints[0].eps"},
	{"endpoint_nan_eps", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].Eps = math.NaN() }, "summary.services[0].endpoints[0].eps"},
	{"endpoint_negative_latency", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].LatencyMs = -1 }, "summary.services[0].endpoints[0].latency_ms"},
	{"endpoint_inf_latency", func(m *meshv1.Summary) { m.Services[0].Endpoints[1].LatencyMs = math.Inf(1) }, "summary.services[0].endpoints[1].latency_ms"},
	{"endpoint_huge_latency", func(m *meshv1.Summary) { m.Services[0].Endpoints[0].LatencyMs = load.MaxLatencyMs + 1 }, "summary.services[0].endpoints[0].latency_ms"},
	{"too_many_shards", func(m *meshv1.Summary) {
		for i := 0; i <= MaxShards; i++ {
			m.Shards = append(m.Shards, &meshv1.ShardEpoch{Shard: uint32(i), Epoch: 1})
		}
	}, "summary.shards"},
	{"nil_shard", func(m *meshv1.Summary) { m.Shards[1] = nil }, "summary.shards[1]"},
	{"shard_out_of_range", func(m *meshv1.Summary) { m.Shards[1].Shard = MaxShards }, "summary.shards[1].shard"},
	{"shard_huge", func(m *meshv1.Summary) { m.Shards[0].Shard = math.MaxUint32 }, "summary.shards[0].shard"},
	{"shard_zero_epoch", func(m *meshv1.Summary) { m.Shards[1].Epoch = 0 }, "summary.shards[1].epoch"},
	{"shard_negative_epoch", func(m *meshv1.Summary) { m.Shards[2].Epoch = -5 }, "summary.shards[2].epoch"},
	{"shard_duplicate", func(m *meshv1.Summary) { m.Shards[2].Shard = 7 }, "summary.shards[2].shard"},
	{"huge_count", func(m *meshv1.Summary) { m.Services[1].Clients[1].Count = MaxCount + 1 }, "summary.services[1].clients[1].count"},
}

func TestFromProtoRejects(t *testing.T) {
	for _, tc := range badCases {
		t.Run(tc.name, func(t *testing.T) {
			m := ToProto(goodSummary("replica-1", t0))
			tc.mutate(m)
			_, err := FromProto(m)
			if err == nil {
				t.Fatalf("FromProto = nil error, want one naming %s", tc.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("FromProto error %v does not wrap ErrInvalid", err)
			}
			if !strings.HasPrefix(err.Error(), tc.want+":") {
				t.Errorf("FromProto error = %q, want it to name %s", err, tc.want)
			}
		})
	}
}
