package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
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

// cpuTicks is the first line of /proc/stat: every CPU's busy ticks (user,
// nice, system, irq, softirq, steal) and all ticks (busy, idle, iowait).
type cpuTicks struct{ busy, total int64 }

// machineTicks reads cpuTicks from /proc/stat.
func machineTicks() (cpuTicks, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTicks{}, fmt.Errorf("/proc/stat: first line %q, want cpu and 8 counters", line)
	}
	var t cpuTicks
	for i := 1; i <= 8; i++ { // user nice system idle iowait irq softirq steal
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return cpuTicks{}, fmt.Errorf("/proc/stat: field %d %q: %w", i, f[i], err)
		}
		t.total += v
		if i != 4 && i != 5 {
			t.busy += v
		}
	}
	return t, nil
}

// busyCores is how many CPUs were busy on average between a and b: the
// busy share of the ticks, times the number of CPUs. It uses the share,
// not the busy ticks over the wall time, because a VM's /proc/stat can miss
// or gain ticks (on the benchmark machine a CPU second counted 78 to 126).
func busyCores(a, b cpuTicks, ncpu int) float64 {
	total := b.total - a.total
	if total <= 0 {
		return 0
	}
	return float64(ncpu) * float64(b.busy-a.busy) / float64(total)
}
