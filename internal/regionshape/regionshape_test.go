package regionshape

import "testing"

func TestSizes(t *testing.T) {
	tests := []struct {
		endpoints, services int
		largest             int
	}{
		{1000, 50, 20},           // too small for the skew: even sizes
		{100_000, 5_000, 10_000}, // 10 %
		{1_000_000, 50_000, 10_000},
		{7, 3, 3}, // even sizes, the remainder spread
	}
	for _, tt := range tests {
		sizes := Sizes(tt.endpoints, tt.services)
		if len(sizes) != tt.services {
			t.Fatalf("Sizes(%d, %d): %d sizes", tt.endpoints, tt.services, len(sizes))
		}
		sum, largest := 0, 0
		for _, s := range sizes {
			sum += s
			largest = max(largest, s)
		}
		if sum != tt.endpoints {
			t.Errorf("Sizes(%d, %d) sum to %d", tt.endpoints, tt.services, sum)
		}
		if largest != tt.largest {
			t.Errorf("Sizes(%d, %d): largest %d, want %d", tt.endpoints, tt.services, largest, tt.largest)
		}
	}
}
