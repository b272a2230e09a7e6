package main

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spillway/spillway/e2e/bench/internal/procstat"
)

// raiseFileLimit lifts the soft RLIMIT_NOFILE to want, raising the hard
// limit too where it is lower and the process may (root: CAP_SYS_RESOURCE),
// else to the hard limit, and returns the new soft limit. The servers the
// driver starts inherit it.
func raiseFileLimit(want uint64) (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur >= want {
		return l.Cur, nil
	}
	if l.Max < want {
		up := syscall.Rlimit{Cur: want, Max: want}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up); err == nil {
			return want, nil
		}
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, err
		}
	}
	return l.Cur, nil
}

// processTicks returns, for every process, utime+stime in clock ticks.
// Not cutime and cstime: a process reaping a long-lived child would add
// all of the child's CPU at once, most of it from before the window.
func processTicks() map[int]int64 {
	out := map[int]int64{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 15 {
			continue
		}
		var sum int64
		for _, j := range []int{11, 12} { // utime stime
			v, _ := strconv.ParseInt(f[j], 10, 64)
			sum += v
		}
		out[pid] = sum
	}
	return out
}

// otherCPUSeconds is the CPU every process except those in exclude used
// between the snapshots a and b of processTicks: a process new in b counts
// whole; one that ended in between is missed, so this is a floor. The machine-wide
// /proc/stat is no help on the benchmark VM: its busy ticks showed less CPU
// than the server alone used.
func otherCPUSeconds(a, b map[int]int64, exclude ...int) float64 {
	var sum int64
	for pid, v := range b {
		if slices.Contains(exclude, pid) {
			continue
		}
		sum += max(0, v-a[pid])
	}
	return float64(sum) / procstat.ClockTicks
}
