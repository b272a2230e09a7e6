package exchange

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/spillway/spillway/load"
	"github.com/spillway/spillway/registry/systemstore/etcdstore/etcdtest"
	"github.com/spillway/spillway/replica/exchange/meshv1"
)

// The scale of issue 13's benchmark: 10,000 services, each with clients in
// 3 zones sending to endpoints in 3 zones, seen by each of 3 replicas.
const (
	benchServices = 10_000
	benchReplicas = 3
	benchShards   = 16
)

var benchZones = []string{"zone-a", "zone-b", "zone-c"}

// benchSummary is one replica's summary of every service, taken at at.
func benchSummary(replica int, at time.Time) load.Summary {
	s := load.Summary{Replica: fmt.Sprintf("spillway-%d", replica), At: at, Interval: 10 * time.Second,
		Services: make([]load.ServiceSummary, benchServices)}
	for i := range s.Services {
		ss := load.ServiceSummary{Service: fmt.Sprintf("service-%05d", i)}
		for ci, cz := range benchZones {
			for zi, z := range benchZones {
				rps := float64((i*7+ci*3+zi+replica)%997) + 0.25
				ss.Flows = append(ss.Flows, load.Flow{
					ClientZone: cz, Zone: z, Issued: rps, Succeeded: rps * 0.99, Errored: rps * 0.01,
					InProgress: uint64(i % 17), Reporters: 1 + (i+ci)%5, Updated: at.Add(-time.Duration(i%3000) * time.Millisecond),
				})
			}
			ss.Clients = append(ss.Clients, load.ClientCount{Zone: cz, Count: 1 + (i+ci)%5})
		}
		s.Services[i] = ss
	}
	return s
}

// withEndpoints is s with n endpoint utilization reports per service.
func withEndpoints(s load.Summary, n int) load.Summary {
	out := s
	out.Services = make([]load.ServiceSummary, len(s.Services))
	for i, ss := range s.Services {
		ss.Endpoints = make([]load.EndpointUtilization, n)
		for j := range ss.Endpoints {
			cpu := float64((i*13+j*7)%100) / 100
			ss.Endpoints[j] = load.EndpointUtilization{
				ID: fmt.Sprintf("%s-%d", ss.Service, j), CPU: cpu, InFlight: uint32((i + j) % 64), Limit: 100,
				Utilization: load.UtilizationOf(cpu, uint32((i+j)%64), 100),
				Reported:    s.At.Add(-time.Duration((i+j)%10000) * time.Millisecond), Interval: 10 * time.Second,
			}
		}
		out.Services[i] = ss
	}
	return out
}

func shardOf(service string) int {
	h := fnv.New32a()
	h.Write([]byte(service))
	return int(h.Sum32() % benchShards)
}

// ownedBy splits s by owner replica (shard % replicas), as ownership
// would with 16 shards over 3 replicas.
func ownedBy(s load.Summary, owner int) load.Summary {
	out := s
	out.Services = nil
	for _, ss := range s.Services {
		if shardOf(ss.Service)%benchReplicas == owner {
			out.Services = append(out.Services, ss)
		}
	}
	return out
}

func encodedSize(msgs []*meshv1.Summary) int {
	n := 0
	for _, m := range msgs {
		n += proto.Size(m)
	}
	return n
}

// BenchmarkExchange measures the load exchange at issue 13's scale, over
// gRPC (encode, owner-side decode+validate+merge, a real stream on
// 127.0.0.1) and, for comparison, through etcd as per-shard values.
//
//	go test -run '^$' -bench BenchmarkExchange -benchtime 10x ./replica/exchange
func BenchmarkExchange(b *testing.B) {
	at := time.Now()
	sums := make([]load.Summary, benchReplicas)
	for r := range sums {
		sums[r] = benchSummary(r, at)
	}

	// Bytes per interval on the wire: each replica sends every other
	// owner its part (its own part is delivered in process).
	wire := 0
	for r := range benchReplicas {
		for o := range benchReplicas {
			if o != r {
				wire += encodedSize(chunk(ownedBy(sums[r], o)))
			}
		}
	}

	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n = 0
			for _, m := range chunk(sums[0]) {
				buf, err := proto.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				n += len(buf)
			}
		}
		b.ReportMetric(float64(n), "bytes/replica-summary")
		b.ReportMetric(float64(wire), "wire-bytes/interval")
		b.ReportMetric(float64(n)/benchServices, "bytes/service")
	})

	// The same with 6 endpoints per service sending utilization reports.
	b.Run("encode_6_endpoints", func(b *testing.B) {
		b.ReportAllocs()
		sum := withEndpoints(sums[0], 6)
		n := 0
		for b.Loop() {
			n = 0
			for _, m := range chunk(sum) {
				buf, err := proto.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				n += len(buf)
			}
		}
		b.ReportMetric(float64(n), "bytes/replica-summary")
		b.ReportMetric(float64(n)/benchServices, "bytes/service")
	})

	// The owner's CPU per summary: decode, validate, merge one replica's
	// part for the owner (a third of the services).
	b.Run("merge", func(b *testing.B) {
		b.ReportAllocs()
		part := ownedBy(sums[1], 0)
		var bufs [][]byte
		for _, m := range chunk(part) {
			buf, _ := proto.Marshal(m)
			bufs = append(bufs, buf)
		}
		m := NewMerged(MergedConfig{})
		for b.Loop() {
			now := time.Now()
			for _, buf := range bufs {
				var msg meshv1.Summary
				if err := proto.Unmarshal(buf, &msg); err != nil {
					b.Fatal(err)
				}
				s, err := FromProto(&msg)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := m.add(s, now, nil); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(part.Services)), "ns/service")
	})

	// A real stream: one replica's part for one owner per op, until the
	// owner acknowledged it.
	b.Run("grpc", func(b *testing.B) {
		m := NewMerged(MergedConfig{})
		addr := benchServer(b, m)
		client := dialB(b, addr)
		part := chunk(ownedBy(sums[1], 0))
		for b.Loop() {
			st, err := client.Report(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			for _, msg := range part {
				if err := st.Send(msg); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := st.CloseAndRecv(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(encodedSize(part)), "bytes/op")
	})

	b.Run("etcd", func(b *testing.B) { benchEtcd(b, sums) })
}

// benchEtcd writes each replica's summary as 16 per-shard values
// (load/<replica>/<shard>), the 3 replicas in parallel, while one watcher
// (the owners) reads them back, and reports bytes, put latency and etcd's
// own CPU and memory from its /metrics.
func benchEtcd(b *testing.B, sums []load.Summary) {
	srv := etcdtest.Start(b)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		MaxCallSendMsgSize: 8 << 20, MaxCallRecvMsgSize: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()

	// Per replica, per shard: the encoded values.
	values := make([][benchShards][]byte, len(sums))
	total := 0
	for r, s := range sums {
		var byShard [benchShards]load.Summary
		for sh := range byShard {
			byShard[sh] = load.Summary{Replica: s.Replica, At: s.At, Interval: s.Interval}
		}
		for _, ss := range s.Services {
			sh := shardOf(ss.Service)
			byShard[sh].Services = append(byShard[sh].Services, ss)
		}
		for sh := range byShard {
			buf, err := proto.Marshal(ToProto(byShard[sh]))
			if err != nil {
				b.Fatal(err)
			}
			values[r][sh] = buf
			total += len(buf)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var watched, watchedEvents int64
	var wmu sync.Mutex
	wch := cli.Watch(ctx, "load/", clientv3.WithPrefix())
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		for resp := range wch {
			wmu.Lock()
			for _, ev := range resp.Events {
				watched += int64(len(ev.Kv.Value))
				watchedEvents++
			}
			wmu.Unlock()
		}
	}()

	cpu0, rss0 := etcdProcess(b, srv.Endpoint)
	var lat []time.Duration
	var lmu sync.Mutex
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		for r := range values {
			wg.Go(func() {
				for sh := range benchShards {
					start := time.Now()
					_, err := cli.Put(ctx, fmt.Sprintf("load/%s/%02d", sums[r].Replica, sh), string(values[r][sh]))
					d := time.Since(start)
					if err != nil {
						b.Error(err)
						return
					}
					lmu.Lock()
					lat = append(lat, d)
					lmu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	b.StopTimer()
	// Let the watcher catch up (bounded), for the read-side bytes.
	want := int64(b.N * len(values) * benchShards)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		wmu.Lock()
		n := watchedEvents
		wmu.Unlock()
		if n >= want {
			break
		}
	}
	cpu1, rss1 := etcdProcess(b, srv.Endpoint)
	st, err := cli.Status(ctx, srv.Endpoint)
	if err != nil {
		b.Fatal(err)
	}
	cancel()
	<-wdone

	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(float64(total), "bytes/interval")
	b.ReportMetric(float64(len(values)*benchShards), "puts/interval")
	b.ReportMetric(pct(0.5), "put-p50-ms")
	b.ReportMetric(pct(0.99), "put-p99-ms")
	wmu.Lock()
	b.ReportMetric(float64(watched)/float64(b.N), "watch-bytes/interval")
	wmu.Unlock()
	b.ReportMetric((cpu1-cpu0)/float64(b.N), "etcd-cpu-s/interval")
	b.ReportMetric(rss1/(1<<20), "etcd-rss-MiB")
	b.ReportMetric((rss1-rss0)/(1<<20), "etcd-rss-growth-MiB")
	b.ReportMetric(float64(st.DbSize)/(1<<20), "etcd-db-MiB")
}

// etcdProcess reads etcd's own process_cpu_seconds_total and
// process_resident_memory_bytes from its /metrics.
func etcdProcess(b *testing.B, endpoint string) (cpu, rss float64) {
	b.Helper()
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "process_cpu_seconds_total":
			cpu, _ = strconv.ParseFloat(val, 64)
		case "process_resident_memory_bytes":
			rss, _ = strconv.ParseFloat(val, 64)
		}
	}
	return cpu, rss
}

func benchServer(b *testing.B, m *Merged) string {
	b.Helper()
	srv, err := NewServer(ServerConfig{Merged: m})
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); gs.Serve(lis) }()
	b.Cleanup(func() { gs.Stop(); <-done })
	return lis.Addr().String()
}

func dialB(b *testing.B, addr string) meshv1.LoadExchangeClient {
	b.Helper()
	conn, err := grpc.NewClient(addr, dialInsecure...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return meshv1.NewLoadExchangeClient(conn)
}
