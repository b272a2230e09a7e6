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
	for i := 0; i < 1e7; i++ { // burn a little CPU so utime moves off zero
		_ = i * i
	}
	if _, err := CPUSeconds(os.Getpid()); err != nil {
		t.Fatalf("CPUSeconds(self): %v", err)
	}
	if _, err := RSSKiB(-1); err == nil {
		t.Error("RSSKiB(-1) = nil error, want one")
	}
}
