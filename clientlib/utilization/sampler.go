package utilization

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// A Sampler reads a cumulative CPU counter. Sample is called with the
// Utilization's lock held, never concurrently.
type Sampler interface {
	// Sample returns the CPU time used so far and the CPU time available
	// per second of wall time (the quota, in cores).
	Sample() (used time.Duration, cores float64, err error)
}

// SamplerFunc adapts a function to a Sampler.
type SamplerFunc func() (time.Duration, float64, error)

// Sample implements Sampler.
func (f SamplerFunc) Sample() (time.Duration, float64, error) { return f() }

var _ Sampler = SamplerFunc(nil)

// ProcessCPU samples this process's CPU time (getrusage: user + system,
// the counters /proc/self/stat shows, in microseconds) against GOMAXPROCS
// cores.
func ProcessCPU() Sampler {
	return SamplerFunc(func() (time.Duration, float64, error) {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0, 0, fmt.Errorf("getrusage: %w", err)
		}
		used := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		return used, float64(runtime.GOMAXPROCS(0)), nil
	})
}

// CgroupCPU samples the process's cgroup v2 (its usage_usec in
// /sys/fs/cgroup/cpu.stat) against the quota in cpu.max, or GOMAXPROCS
// cores when cpu.max says "max". Without cgroup v2 it falls back to
// ProcessCPU.
func CgroupCPU() Sampler { return CgroupCPUAt("/sys/fs/cgroup") }

// CgroupCPUAt is CgroupCPU for the cgroup v2 directory dir.
func CgroupCPUAt(dir string) Sampler {
	process := ProcessCPU()
	return SamplerFunc(func() (time.Duration, float64, error) {
		stat, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
		if errors.Is(err, os.ErrNotExist) {
			return process.Sample()
		}
		if err != nil {
			return 0, 0, fmt.Errorf("cgroup cpu.stat: %w", err)
		}
		used, err := parseCPUStat(stat)
		if err != nil {
			return 0, 0, fmt.Errorf("cgroup cpu.stat: %w", err)
		}
		cores := float64(runtime.GOMAXPROCS(0))
		if max, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
			q, ok, err := parseCPUMax(max)
			if err != nil {
				return 0, 0, fmt.Errorf("cgroup cpu.max: %w", err)
			}
			if ok {
				cores = q
			}
		}
		return used, cores, nil
	})
}

// parseCPUStat returns usage_usec of a cgroup v2 cpu.stat file.
func parseCPUStat(b []byte) (time.Duration, error) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
		if !ok || string(k) != "usage_usec" {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 63)
		if err != nil || n > uint64(1<<63-1)/1000 {
			return 0, fmt.Errorf("usage_usec: %q is not a count of microseconds", v)
		}
		return time.Duration(n) * time.Microsecond, nil
	}
	return 0, errors.New("usage_usec: missing")
}

// parseCPUMax reads a cgroup v2 cpu.max file ("$QUOTA $PERIOD", QUOTA may
// be "max"): the quota in cores, and ok false when there is none.
func parseCPUMax(b []byte) (cores float64, ok bool, err error) {
	f := bytes.Fields(b)
	if len(f) != 2 {
		return 0, false, fmt.Errorf("%q: want \"$QUOTA $PERIOD\"", b)
	}
	period, err := strconv.ParseUint(string(f[1]), 10, 63)
	if err != nil || period == 0 {
		return 0, false, fmt.Errorf("period: %q is not a positive count of microseconds", f[1])
	}
	if string(f[0]) == "max" {
		return 0, false, nil
	}
	quota, err := strconv.ParseUint(string(f[0]), 10, 63)
	if err != nil || quota == 0 {
		return 0, false, fmt.Errorf("quota: %q is neither \"max\" nor a positive count of microseconds", f[0])
	}
	return float64(quota) / float64(period), true, nil
}

// userHZ is the unit of /proc/stat (USER_HZ, 100 on every Linux ABI Go
// supports).
const userHZ = 100

// HostCPU samples the whole host's CPU from /proc/stat: busy time (all but
// idle and iowait) against the number of CPUs. For VM agents that run no
// Go code of their own.
func HostCPU() Sampler { return HostCPUAt("/proc/stat") }

// HostCPUAt is HostCPU reading the file at path.
func HostCPUAt(path string) Sampler {
	return SamplerFunc(func() (time.Duration, float64, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, 0, fmt.Errorf("host cpu: %w", err)
		}
		busy, cpus, err := parseProcStat(b)
		if err != nil {
			return 0, 0, fmt.Errorf("host cpu %s: %w", path, err)
		}
		return time.Duration(busy) * (time.Second / userHZ), float64(cpus), nil
	})
}

// parseProcStat returns the busy ticks of /proc/stat's "cpu" line and the
// number of "cpuN" lines.
func parseProcStat(b []byte) (busy uint64, cpus int, err error) {
	found := false
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) == 0 || !bytes.HasPrefix(f[0], []byte("cpu")) {
			continue
		}
		if len(f[0]) > 3 {
			cpus++
			continue
		}
		if len(f) < 5 {
			return 0, 0, fmt.Errorf("cpu line: %d fields, want at least 5", len(f))
		}
		for i, v := range f[1:] {
			n, err := strconv.ParseUint(string(v), 10, 63)
			if err != nil {
				return 0, 0, fmt.Errorf("cpu line field %d: %q is not a tick count", i+1, v)
			}
			if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest and guest_nice are inside user and nice
				continue
			}
			if busy+n < busy {
				return 0, 0, errors.New("cpu line: ticks overflow")
			}
			busy += n
		}
		found = true
	}
	if !found {
		return 0, 0, errors.New("no cpu line")
	}
	if cpus == 0 {
		cpus = 1
	}
	return busy, cpus, nil
}
