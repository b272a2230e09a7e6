package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/spillway/spillway/e2e/bench/internal/benchproc"
	"github.com/spillway/spillway/registry"
	"github.com/spillway/spillway/registry/systemstore"
)

// What the region's registrations look like in the store.
const (
	// regionTTL is every lease's TTL: the server's default (lease.DefaultTTL),
	// which an agent gets when it asks for none, and which its heartbeat
	// interval (a third of it) turns into the region's 10 s.
	regionTTL = 30 * time.Second
	// etcdPrefix is the store's etcd key prefix: --store etcd://HOST/scale.
	etcdPrefix = "/scale/"
	// etcdMaxTxnOps is etcd's --max-txn-ops default (128): a transaction
	// holds at most this many puts.
	etcdMaxTxnOps = 128
	// etcdLoadBytes bounds one load transaction's keys and values, well
	// under etcd's --max-request-bytes default of 1.5 MiB.
	etcdLoadBytes = 512 << 10
	// etcdLoaders is how many load transactions are in flight at once.
	etcdLoaders = 8
)

// etcdRegion is a fresh one-member etcd (default settings) holding every
// registration of a region as spillway stores them: the key
// "registrations/<service>/<endpoint id>" under etcdPrefix and the JSON
// record of systemstore.EncodeRecord, one spillway lease per endpoint
// (regionTTL, no owner), as lease.Manager.Register writes them.
type etcdRegion struct {
	Proc     *benchproc.Proc
	Client   string   // host:port
	LeaseIDs []string // in r.Walk order
	Loaded   time.Duration
	Bytes    int64 // keys and values written
	MaxTxn   int   // bytes of the largest load transaction's keys and values
	dir      string
}

// StoreURL is the --store flag of a replica on this etcd.
func (x *etcdRegion) StoreURL() string {
	return "etcd://" + x.Client + "/" + etcdPrefix[1:len(etcdPrefix)-1]
}

// MetricsURL is etcd's Prometheus endpoint.
func (x *etcdRegion) MetricsURL() string { return "http://" + x.Client + "/metrics" }

// Stop stops etcd and removes its data.
func (x *etcdRegion) Stop() {
	x.Proc.Stop()
	os.RemoveAll(x.dir)
}

// regionLeaseID is endpoint n's lease id: 16 hex digits like the ones
// lease.Manager makes, but the same in every run.
func regionLeaseID(n int) string {
	z := uint64(n) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return fmt.Sprintf("%016x", z^(z>>31))
}

// regionRecord is the stored registration of endpoint n (ep), registered
// at now.
func regionRecord(n int, ep Endpoint, now time.Time) (systemstore.Record, error) {
	// ep.ID ("10.0.0.1-8080") is not a DNS label: the id is the one
	// Register gives an endpoint registered without one.
	e := registry.Endpoint{
		ID:         registry.DefaultEndpointID(ep.Addr, uint16(ep.Port)),
		Address:    ep.Addr,
		Ports:      []registry.Port{{Name: "http", Number: uint16(ep.Port)}},
		Locality:   registry.Locality{Zone: ep.Zone},
		Source:     registry.SourceVM,
		Registered: now,
		LastSeen:   now,
	}
	e.Normalize()
	if err := e.Validate("endpoint"); err != nil {
		return systemstore.Record{}, fmt.Errorf("endpoint %d: %w", n, err)
	}
	return systemstore.Record{LeaseID: regionLeaseID(n), Service: ep.Service, TTL: regionTTL, Endpoint: e}, nil
}

// startEtcdRegion starts a fresh etcd under e.TmpDir/name and puts every
// registration of r into it, in transactions of at most etcdMaxTxnOps
// puts and etcdLoadBytes, etcdLoaders at a time.
func startEtcdRegion(ctx context.Context, e *env, r region, name string) (*etcdRegion, error) {
	dir := filepath.Join(e.TmpDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p, client, err := benchproc.StartEtcd(ctx, name, dir, dir, e.EtcdBin)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	x := &etcdRegion{Proc: p, Client: client, dir: dir}
	if err := x.load(ctx, e, r); err != nil {
		x.Stop()
		return nil, err
	}
	return x, nil
}

func (x *etcdRegion) load(ctx context.Context, e *env, r region) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{x.Client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd %s: %w", x.Client, err)
	}
	defer cli.Close()
	type batch struct {
		ops   []clientv3.Op
		bytes int
	}
	batches := make(chan batch, etcdLoaders)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		loadErr error
		maxTxn  atomic.Int64
		done    atomic.Int64
	)
	fail := func(err error) {
		errOnce.Do(func() { loadErr = err; cancel() })
	}
	for range etcdLoaders {
		wg.Go(func() {
			for b := range batches {
				if lctx.Err() != nil {
					continue
				}
				tctx, tcancel := context.WithTimeout(lctx, 30*time.Second)
				_, err := cli.Txn(tctx).Then(b.ops...).Commit()
				tcancel()
				if err != nil {
					fail(fmt.Errorf("etcd %s: load txn of %d puts, %d bytes: %w", x.Client, len(b.ops), b.bytes, err))
					continue
				}
				for {
					cur := maxTxn.Load()
					if int64(b.bytes) <= cur || maxTxn.CompareAndSwap(cur, int64(b.bytes)) {
						break
					}
				}
				if n := done.Add(int64(len(b.ops))); e.Verbose && n/100_000 != (n-int64(len(b.ops)))/100_000 {
					e.Logf("etcd load: %d of %d registrations", n, r.Endpoints)
				}
			}
		})
	}
	start := time.Now()
	now := start
	x.LeaseIDs = make([]string, 0, r.Endpoints)
	cur := batch{}
	n := 0
	var walkErr error
	r.Walk(func(ep Endpoint) bool {
		rec, err := regionRecord(n, ep, now)
		if err != nil {
			walkErr = err
			return false
		}
		key, value, err := systemstore.EncodeRecord(rec)
		if err != nil {
			walkErr = err
			return false
		}
		size := len(etcdPrefix) + len(key) + len(value)
		if len(cur.ops) == etcdMaxTxnOps || cur.bytes+size > etcdLoadBytes {
			select {
			case batches <- cur:
			case <-lctx.Done():
				return false
			}
			cur = batch{}
		}
		cur.ops = append(cur.ops, clientv3.OpPut(etcdPrefix+key, string(value)))
		cur.bytes += size
		x.Bytes += int64(size)
		x.LeaseIDs = append(x.LeaseIDs, rec.LeaseID)
		n++
		return true
	})
	if len(cur.ops) > 0 && walkErr == nil {
		select {
		case batches <- cur:
		case <-lctx.Done():
		}
	}
	close(batches)
	wg.Wait()
	if err := errors.Join(walkErr, loadErr); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// Count what etcd holds: the load is whole or it failed.
	gctx, gcancel := context.WithTimeout(ctx, 30*time.Second)
	defer gcancel()
	resp, err := cli.Get(gctx, etcdPrefix+systemstore.RegistrationsPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("etcd %s: count registrations: %w", x.Client, err)
	}
	if resp.Count != int64(r.Endpoints) {
		return fmt.Errorf("etcd %s holds %d registrations after the load, want %d", x.Client, resp.Count, r.Endpoints)
	}
	x.Loaded = time.Since(start)
	x.MaxTxn = int(maxTxn.Load())
	e.Logf("etcd %s: %d registrations (%.0f MB) loaded in %v, largest txn %d bytes", x.Client, r.Endpoints, float64(x.Bytes)/1e6, x.Loaded.Round(time.Millisecond), x.MaxTxn)
	return nil
}
