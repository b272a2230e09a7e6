package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// passing is the result of a 10-minute run of 3 replicas where nothing
// went wrong: r0 killed at 2:00 (back at 2:03) and at 8:00, r1 at 4:00,
// r2 at 6:00, flat memory and goroutines.
func passing(t *testing.T) *result {
	t.Helper()
	c, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := time.Second
	r := &result{
		c: c, date: time.Date(2026, 12, 4, 4, 0, 0, 0, time.UTC), machine: "2 CPUs", cpus: 2,
		etcdVersion: "3.4.23", spillway: "test", loadBefore: "1.00 1.00 1.00", loadAfter: "2.00 2.00 2.00",
		elapsed: 600 * s, hbAtEnd: 1_200_000, initialWall: 12 * s,
		pids: []int{100, 101, 102},
		kills: []kill{
			{replica: 0, at: 120 * s, restarted: 123 * s, ready: 2 * s, oldPID: 100, newPID: 200},
			{replica: 1, at: 240 * s, restarted: 243 * s, ready: 2 * s, oldPID: 101, newPID: 201},
			{replica: 2, at: 360 * s, restarted: 363 * s, ready: 2 * s, oldPID: 102, newPID: 202},
			{replica: 0, at: 480 * s, restarted: 483 * s, ready: 2 * s, oldPID: 200, newPID: 300},
		},
		served:  servedCheck{expected: 20000, deregistered: 30000, lost: make([]int, 3), stale: make([]int, 3), foreign: make([]int, 3), examples: make([][]string, 3), listErrors: make([]int, 3)},
		deletes: [numDeleteKinds]int{delDeregistered: 30000},
	}
	r.samples = make([][]sample, 3)
	for i := range 3 {
		for k := 0; k <= 60; k++ {
			at := time.Duration(k) * 10 * s
			pid := r.pids[i]
			for _, kl := range r.kills {
				if kl.replica == i && at >= kl.restarted {
					pid = kl.newPID
				}
			}
			up := true
			for _, kl := range r.kills {
				if kl.replica == i && at >= kl.at && at < kl.restarted+5*s {
					up = false
				}
			}
			r.samples[i] = append(r.samples[i], sample{At: at, PID: pid, Up: up, RSSKiB: 150 * 1024, Goroutines: 800,
				CPUSec: float64(k), HBPerSec: 667, XDSOpen: 667, RegOK: 166})
		}
	}
	return r
}

func TestReportVerdict(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*result)
		ok     bool
		want   []string // substrings of the report
	}{
		{
			name: "all_pass", ok: true,
			want: []string{"**Verdict: PASS**", "| acknowledged registrations lost | pass |",
				"| r0 | 200 | 4:03–8:00 | 150.0 | 150.0 | 150.0 | +0.0% | 800 | 800 | 800 | +0.0% | ok |",
				"| r2 | 202 | 6:03–10:00 | | | | | | | | | not judged: counted window 1m57s shorter than 2 × 1m0s |",
				"| 4 | 8:00 | r0 | 200 | 8:03 | 300 | 2.0 s |",
				"| r0 | 100 | 0:00–2:00 | | | | | | | | | not judged: ended 2m0s after its start, within the 2m0s warmup |"},
		},
		{
			name: "registration_lost",
			mutate: func(r *result) {
				r.served.lost[1] = 2
				r.served.examples[1] = []string{"svc-3/ep-3", "svc-4/ep-4"}
			},
			want: []string{"| acknowledged registrations lost | **FAIL** |", "r1 misses 2 (e.g. svc-3/ep-3, svc-4/ep-4)", "**Verdict: FAIL** (acknowledged registrations lost)"},
		},
		{
			name:   "list_errors_fail_the_check",
			mutate: func(r *result) { r.served.listErrors[2] = 1 },
			want:   []string{"| acknowledged registrations lost | **FAIL** |", "0 missing, 1 list errors"},
		},
		{
			name: "heartbeat_found_false",
			mutate: func(r *result) {
				r.expired = []expiry{{at: 250 * time.Second, key: "svc-1/ep-1", replica: 2, ackedBy: 0, age: 4100 * time.Millisecond}}
			},
			want: []string{"| live endpoints expired (heartbeats) | **FAIL** |", "svc-1/ep-1 at 4:10 on r2 (acknowledged by r0 4.1 s before)"},
		},
		{
			name: "store_delete_of_a_live_endpoint",
			mutate: func(r *result) {
				r.deletes[delLive] = 1
				r.oddDeletes = []storeDelete{{at: 130 * time.Second, key: "svc-2/ep-2", rev: 77, kind: delLive}}
			},
			want: []string{"| live endpoints expired (etcd deletes) | **FAIL** |", "svc-2/ep-2 (live) at 2:10, revision 77"},
		},
		{
			name:   "unacknowledged_expiry_passes",
			mutate: func(r *result) { r.deletes[delUnacked] = 3 },
			ok:     true,
			want:   []string{"| live endpoints expired (etcd deletes) | pass |", "3 of unacknowledged registrations"},
		},
		{
			name:   "watch_failed",
			mutate: func(r *result) { r.watchErr = errors.New("compacted") },
			want:   []string{"| live endpoints expired (etcd deletes) | **FAIL** |", "the watch failed: compacted"},
		},
		{
			name:   "stale_endpoint",
			mutate: func(r *result) { r.served.stale[0] = 1 },
			want:   []string{"| deregistered endpoints still served | **FAIL** |"},
		},
		{
			name:   "restart_failed",
			mutate: func(r *result) { r.kills[1].err = errors.New("r1 exited before ready") },
			want:   []string{"| replicas restarted after SIGKILL | **FAIL** |", "r1 at 4:00: r1 exited before ready"},
		},
		{
			name: "rss_leak_on_r1",
			mutate: func(r *result) {
				for k := range r.samples[1] {
					if r.samples[1][k].PID == 201 {
						r.samples[1][k].RSSKiB = int64(150*1024) + int64(k)*2048 // +2 MiB a sample
					}
				}
			},
			want: []string{"| r1 growth within 10% | **FAIL** |", "**grew**", "pid 201: RSS +"},
		},
		{
			name: "goroutine_leak_on_r2",
			mutate: func(r *result) {
				for k := range r.samples[2] {
					r.samples[2][k].Goroutines = 800 + 10*k
				}
			},
			want: []string{"| r2 growth within 10% | **FAIL** |", "pid 102: RSS +0.0%, goroutines +"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := passing(t)
			if tt.mutate != nil {
				tt.mutate(r)
			}
			md, ok := r.report()
			if ok != tt.ok {
				t.Errorf("report ok = %v, want %v", ok, tt.ok)
			}
			for _, w := range tt.want {
				if !strings.Contains(md, w) {
					t.Errorf("report lacks %q:\n%s", w, md)
				}
			}
		})
	}
}

// TestReportNeverJudged: a replica whose processes all ran too briefly
// fails, with the reason.
func TestReportNeverJudged(t *testing.T) {
	r := passing(t)
	r.c.warmup = 9 * time.Minute
	md, ok := r.report()
	if ok {
		t.Fatal("report ok = true, want false when no process ran past the warmup")
	}
	if !strings.Contains(md, "| r0 growth within 10% | **FAIL** | no process of it ran long enough to be judged |") {
		t.Errorf("report lacks the reason:\n%s", md)
	}
}

func TestReportTable(t *testing.T) {
	r := passing(t)
	md, _ := r.report()
	// Rows every minute: r0 at 2:00 is down (killed at 2:00), 3:00 is the
	// new process; CPU is 1 s per 10 s sample = 10%.
	for _, w := range []string{
		"### r0\n",
		"| 1:00 | 100 | 150.0 | 800 | 10 | 667 | 667 | 996 | 0 |  |",
		"| 2:00 | 100 | – | – | 10 | 667 | 667 | 996 | 0 | killed at 2:00, restarted at 2:03 |",
		"| 3:00 | 200 | 150.0 | 800 | 10 | 667 | 667 | 996 | 0 |  |",
		"| 10:00 | 300 | 150.0 | 800 | 10 | 667 | 667 | 996 | 0 |  |",
		"| heartbeats/s | 2,000 | 2,000 acknowledged over the load |",
	} {
		if !strings.Contains(md, w) {
			t.Errorf("report lacks %q:\n%s", w, md)
		}
	}
	if n := strings.Count(md, "\n| 5:00 |"); n != 3 {
		t.Errorf("%d rows at 5:00, want one per replica", n)
	}
}

func TestFailCodes(t *testing.T) {
	for _, tt := range []struct {
		in   map[codes.Code]int
		want string
	}{
		{nil, "none"},
		{map[codes.Code]int{codes.DeadlineExceeded: 2, codes.Unavailable: 29}, "Unavailable 29, DeadlineExceeded 2"},
		{map[codes.Code]int{codes.Unavailable: 1, codes.Canceled: 1}, "Canceled 1, Unavailable 1"},
	} {
		if got := (totals{hbFailCodes: tt.in}).failCodes(); got != tt.want {
			t.Errorf("failCodes(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestReplicaCPU(t *testing.T) {
	r := &result{pids: []int{1}, samples: [][]sample{{
		{PID: 1, Up: true, CPUSec: 50}, // before the load: not counted
		{PID: 1, Up: true, CPUSec: 52},
		{PID: 1, Up: false},
		{PID: 2, Up: true, CPUSec: 3}, // restarted: its whole life
		{PID: 2, Up: true, CPUSec: 7},
	}}}
	if got := r.replicaCPU(0); got != 2+3+4 {
		t.Errorf("replicaCPU = %v, want 9", got)
	}
}

func TestFormat(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{clock(0), "0:00"}, {clock(123 * time.Second), "2:03"}, {clock(-5 * time.Second), "-0:05"}, {clock(600 * time.Second), "10:00"},
		{num(0), "0"}, {num(999), "999"}, {num(1000), "1,000"}, {num(1234567), "1,234,567"}, {num(-20000), "-20,000"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		check func(config) bool
		err   string
	}{
		{name: "defaults", check: func(c config) bool {
			return c.duration == 10*time.Minute && c.killEvery == 2*time.Minute && c.leases == 20000 && c.xdsStreams == 2000 && c.churn == 50 && c.replicas == 3
		}},
		{name: "short", args: []string{"--short"}, check: func(c config) bool {
			return c.duration == 90*time.Second && c.killEvery == 30*time.Second && c.sampleEvery == 5*time.Second && c.warmup == 20*time.Second && c.leases == 20000
		}},
		{name: "short_keeps_given_flags", args: []string{"--short", "--duration", "2m"}, check: func(c config) bool {
			return c.duration == 2*time.Minute && c.killEvery == 30*time.Second
		}},
		{name: "duration_bounded", args: []string{"--duration", "31m"}, err: "--duration"},
		{name: "heartbeat_within_ttl", args: []string{"--heartbeat-interval", "20s"}, err: "--heartbeat-interval"},
		{name: "table_multiple_of_samples", args: []string{"--table-every", "15s"}, err: "--table-every"},
		{name: "ttl_whole_seconds", args: []string{"--ttl", "2500ms"}, err: "--ttl"},
		{name: "no_arguments", args: []string{"extra"}, err: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(tt.args)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parseFlags(%q) error = %v, want one naming %s", tt.args, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseFlags(%q): %v", tt.args, err)
			}
			if !tt.check(c) {
				t.Errorf("parseFlags(%q) = %+v", tt.args, c)
			}
		})
	}
}
