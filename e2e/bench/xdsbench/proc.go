package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux architecture Go supports (sysconf(_SC_CLK_TCK) needs cgo).
const clockTicks = 100

// rssKiB returns VmRSS of process pid in KiB.
func rssKiB(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status VmRSS %q: %w", pid, rest, err)
		}
		return kib, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS line", pid)
}

// cpuSeconds returns utime+stime of process pid (all its threads) in seconds.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields are counted after the last ')'. utime and stime are fields 14
	// and 15, so 12 and 13 after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name, want at least 13", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return float64(utime+stime) / clockTicks, nil
}

// raiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit and returns
// the new soft limit.
func raiseFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
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
	return float64(sum) / clockTicks
}
