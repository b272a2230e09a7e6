package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spillway/spillway/admin/adminv1"
	"github.com/spillway/spillway/e2e/bench/xdsbench/internal/benchdata"
)

// subsetTarget is spillway with deterministic subsets of --subset-size
// for every service (--subset-size > 0).
const subsetTarget = "spillway+subset"

// writeSubsetConfig writes, into a new directory under dir, one
// SERVICE.yaml per service giving it deterministic subsets of size, and
// returns the directory: spillway's --service-config-dir.
func writeSubsetConfig(dir string, services []benchdata.Service, size int) (string, error) {
	cfgDir := filepath.Join(dir, "service-config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return "", err
	}
	body := fmt.Appendf(nil, "subset_mode: deterministic\nsubset_size: %d\n", size)
	for _, svc := range services {
		if err := os.WriteFile(filepath.Join(cfgDir, svc.Name+".yaml"), body, 0o644); err != nil {
			return "", err
		}
	}
	return cfgDir, nil
}

// syncSubsets runs after sync on the subset target, whose streams are
// synced once each holds a subset. It waits, within --sync-timeout, until
// the plan of every service gives a slot to each of the service's streams
// (spillway's admin API, Weights: subsets.slots) and for the streams to
// go quiet, so that no stream holds the subset of a slot it wrapped to;
// then it checks that every stream holds fewer than all its service's
// endpoints and that the first stream of every service holds exactly the
// subset the admin API names for its node. It records the fewest and most
// endpoints a stream holds.
func (m *meter) syncSubsets(ctx context.Context, fl *fleet, r *result) error {
	deadline := time.Now().Add(m.cfg.syncTimeout)
	waiting := map[int]bool{}
	for svc := range fl.services {
		if len(fl.streamsOf(svc)) > 0 {
			waiting[svc] = true
		}
	}
	var lastErr error
	for len(waiting) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v, %d services' plans do not give a subset to each of their streams (last error: %v)", m.cfg.syncTimeout, len(waiting), lastErr)
		}
		for svc := range waiting {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			resp, err := m.srv.admin.Weights(cctx, &adminv1.WeightsRequest{Service: fl.services[svc].Name})
			cancel()
			switch {
			case err != nil:
				lastErr = err // no plan yet
			case resp.GetSubsets().GetSlots() == uint32(len(fl.streamsOf(svc))) && resp.GetSubsets().GetSize() == uint32(m.cfg.subsetSize):
				delete(waiting, svc)
			}
		}
		if len(waiting) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-fl.errCh:
			return fl.err
		case <-time.After(200 * time.Millisecond):
		}
	}
	if !fl.waitQuiet(ctx, m.cfg.quiet, m.cfg.changeTimeout) {
		return errors.Join(errors.New("streams did not go quiet after every plan gave every stream a subset"), fl.err, ctx.Err())
	}
	r.subsetMin, r.subsetMax = -1, 0
	for i := range fl.k {
		n := fl.views[i].Load().size()
		full := len(fl.services[i%len(fl.services)].Endpoints)
		if n == 0 || n >= full {
			return fmt.Errorf("stream %d holds %d of its service's %d endpoints, want a subset", i, n, full)
		}
		if r.subsetMin < 0 || n < r.subsetMin {
			r.subsetMin = n
		}
		r.subsetMax = max(r.subsetMax, n)
	}
	var first []int
	for svc := range fl.services {
		if ids := fl.streamsOf(svc); len(ids) > 0 {
			first = append(first, ids[0])
		}
	}
	if err := m.checkSubsets(ctx, fl, first, nil); err != nil {
		return err
	}
	r.subsetChecked = len(first)
	m.say("every stream holds a subset of %d to %d endpoints (of %d); the first stream of each of %d services holds exactly the subset the admin API names",
		r.subsetMin, r.subsetMax, m.cfg.endpoints, r.subsetChecked)
	return nil
}

// checkSubsets checks that each stream of streams holds exactly the
// subset spillway's admin API names for its node (Weights with client
// xdsbench-<i>). The endpoints of the data set, and those of plan, are
// known by address.
func (m *meter) checkSubsets(ctx context.Context, fl *fleet, streams []int, plan []benchdata.Change) error {
	byAddr := map[string]string{}
	for _, s := range fl.services {
		for _, e := range s.Endpoints {
			byAddr[e.Address.String()] = e.ID
		}
	}
	for _, c := range plan {
		byAddr[c.Endpoint.Address.String()] = c.Endpoint.ID
	}
	for _, i := range streams {
		s := fl.services[i%len(fl.services)]
		node := fmt.Sprintf("xdsbench-%d", i)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := m.srv.admin.Weights(cctx, &adminv1.WeightsRequest{Service: s.Name, Client: node})
		cancel()
		if err != nil {
			return fmt.Errorf("weights of %s for %s: %w", s.Name, node, err)
		}
		want := slices.Clone(resp.GetSubsets().GetClient().GetEndpoints())
		slices.Sort(want)
		var got []string
		for _, a := range fl.views[i].Load().addrs {
			got = append(got, byAddr[a])
		}
		slices.Sort(got)
		if len(want) == 0 || !slices.Equal(got, want) {
			return fmt.Errorf("stream %d (%s) holds %v, the admin API gives %s the subset %v", i, s.Name, got, node, want)
		}
	}
	return nil
}

// changeSubset is change for the subset target, where the change reaches
// only the streams whose subset it changes, some of them only at the
// next weights cycle (--weights-interval): an added endpoint enters
// subsets when a plan gives it its share (none, when the service's slots
// per endpoint are fewer than one), a removed one leaves its holders'
// subsets at once and a plan then gives each a replacement. It makes the
// change, then waits, within --change-timeout, until it has settled: the
// streams show it (added: some stream holds the endpoint; removed: none
// does, and each that held it holds as many endpoints as before), or,
// two weights cycles on, the service's plan does (the admin API's
// healthy endpoints per zone count it, or no longer do; removed: and no
// stream holds it). Then it waits for the streams to go quiet and for
// --gap. The stream updates it counts are the streams whose endpoints
// differ from before the change, and their latency is the time to the
// EDS that gave them their final endpoints. A change that does not
// settle counts its service's streams as missed.
func (m *meter) changeSubset(ctx context.Context, fl *fleet, c benchdata.Change, r *result) error {
	ids := fl.streamsOf(c.Service)
	before := make([]*edsView, len(ids))
	for j, i := range ids {
		before[j] = fl.views[i].Load()
	}
	addr := c.Endpoint.Address.String()
	name := fl.services[c.Service].Name
	want := uint32(len(fl.services[c.Service].Endpoints) + 1)
	if !c.Add {
		want -= 2
	}
	planned := false
	var start time.Time
	settled := func() bool {
		// What the streams show first: an added endpoint in some
		// subset; a removed one in none, and each stream that held it
		// holding as many endpoints as before (its replacement came).
		seen, replaced := false, true
		for j, i := range ids {
			v := fl.views[i].Load()
			has := v.has(addr)
			seen = seen || has
			if !c.Add && before[j].has(addr) && v.size() != before[j].size() {
				replaced = false
			}
		}
		switch {
		case c.Add && seen, !c.Add && !seen && replaced:
			return true
		case !c.Add && seen:
			return false
		case time.Since(start) < 2*m.cfg.weightsInterval:
			return false
		}
		// Two weights cycles on and still not: ask the plan (an added
		// endpoint may get no share, a replacement may hold another
		// number of endpoints). Not before, as the admin API's answer
		// costs the server CPU in the change window.
		if !planned {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			resp, err := m.srv.admin.Weights(cctx, &adminv1.WeightsRequest{Service: name})
			cancel()
			if err != nil {
				return false
			}
			var n uint32
			for _, z := range resp.GetZones() {
				n += z.GetHealthy()
			}
			planned = n == want
		}
		return planned
	}
	start = time.Now()
	cctx, cancel := context.WithTimeout(ctx, m.cfg.changeTimeout)
	err := m.srv.change(cctx, c)
	cancel()
	r.calls = append(r.calls, time.Since(start))
	if err != nil {
		return fmt.Errorf("change %d: %w", c.Seq, err)
	}
	deadline := time.Now().Add(m.cfg.changeTimeout)
	ok := settled()
	for !ok && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-fl.errCh:
			return errors.Join(fl.err, m.srv.alive())
		case <-time.After(20 * time.Millisecond):
		}
		ok = settled()
	}
	if !fl.waitQuiet(ctx, m.cfg.quiet, m.cfg.changeTimeout) {
		m.say("change %d: streams still receiving after %v", c.Seq, m.cfg.changeTimeout)
	}
	if fl.err != nil || ctx.Err() != nil {
		return errors.Join(fl.err, ctx.Err(), m.srv.alive())
	}
	changed := 0
	for j, i := range ids {
		v := fl.views[i].Load()
		if !v.same(before[j]) {
			changed++
			r.lat = append(r.lat, v.at.Sub(start))
		}
	}
	r.updates += changed
	if !ok {
		r.missed += len(ids)
		m.say("change %d (%s %s): did not settle within %v", c.Seq, map[bool]string{true: "add", false: "remove"}[c.Add], addr, m.cfg.changeTimeout)
	}
	select {
	case <-ctx.Done():
	case <-time.After(m.cfg.gap):
	}
	return nil
}
