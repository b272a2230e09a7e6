package procstat

import (
	"os"
	"testing"
)

func TestSelf(t *testing.T) {
	kib, err := RSSKiB(os.Getpid())
	if err != nil || kib <= 0 {
		t.Fatalf("RSSKiB(self) = %d, %v; want > 0", kib, err)
	}
	x := 0
	for i := 0; i < 2e8; i++ { // burn CPU (about 0.1 s) so both figures move off zero
		x += i * i
	}
	_ = x
	if _, err := CPUSeconds(os.Getpid()); err != nil {
		t.Fatalf("CPUSeconds(self): %v", err)
	}
	ticks, err := CPUSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	run, err := RunSeconds(os.Getpid())
	if err != nil {
		t.Fatalf("RunSeconds(self): %v", err)
	}
	// Both count the same threads' time: the tick figure is off the exact
	// one by about a tick per thread, and exited threads are missing from
	// RunSeconds.
	if run <= 0 || run > ticks+0.1 || run < ticks-0.1 {
		t.Errorf("RunSeconds(self) = %.3f s, CPUSeconds = %.2f s; want them close", run, ticks)
	}
	if _, err := RSSKiB(-1); err == nil {
		t.Error("RSSKiB(-1) = nil error, want one")
	}
}
