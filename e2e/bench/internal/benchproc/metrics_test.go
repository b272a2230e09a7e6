package benchproc

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMetrics(t *testing.T) {
	tests := []struct {
		name  string
		input string
		names []string
		want  map[string]float64
		err   bool
	}{
		{
			name: "sums_label_sets",
			input: `# HELP etcd_mvcc_put_total Total number of puts seen by this member.
# TYPE etcd_mvcc_put_total counter
etcd_mvcc_put_total 100288
etcd_disk_wal_fsync_duration_seconds_count{le="x"} 3
etcd_disk_wal_fsync_duration_seconds_count{le="y"} 4
etcd_disk_wal_fsync_duration_seconds_sum 1.5e-01
`,
			names: []string{"etcd_mvcc_put_total", "etcd_disk_wal_fsync_duration_seconds_count", "etcd_disk_wal_fsync_duration_seconds_sum"},
			want: map[string]float64{
				"etcd_mvcc_put_total":                        100288,
				"etcd_disk_wal_fsync_duration_seconds_count": 7,
				"etcd_disk_wal_fsync_duration_seconds_sum":   0.15,
			},
		},
		{
			name:  "label_value_with_space_and_timestamp",
			input: "go_memstats_heap_inuse_bytes{a=\"x y\"} 9.1e+07 1700000000000\n",
			names: []string{"go_memstats_heap_inuse_bytes"},
			want:  map[string]float64{"go_memstats_heap_inuse_bytes": 9.1e7},
		},
		{
			name:  "absent_and_prefix_names_ignored",
			input: "etcd_mvcc_put_total_extra 5\nother 1\n",
			names: []string{"etcd_mvcc_put_total"},
			want:  map[string]float64{},
		},
		{
			name:  "bad_value",
			input: "etcd_mvcc_put_total abc\n",
			names: []string{"etcd_mvcc_put_total"},
			err:   true,
		},
		{
			name:  "no_value_after_labels",
			input: "etcd_mvcc_put_total{a=\"b\"}\n",
			names: []string{"etcd_mvcc_put_total"},
			err:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMetrics(strings.NewReader(tt.input), tt.names...)
			if (err != nil) != tt.err {
				t.Fatalf("ParseMetrics error = %v, want error %v", err, tt.err)
			}
			if tt.err {
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseMetrics (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseMetrics(f *testing.F) {
	f.Add("etcd_mvcc_put_total 1\n")
	f.Add("etcd_mvcc_put_total{a=\"}\"} 2 3\n# x\n")
	f.Add("etcd_mvcc_put_total{\n")
	f.Fuzz(func(t *testing.T, input string) {
		m, err := ParseMetrics(strings.NewReader(input), "etcd_mvcc_put_total")
		if err == nil && len(m) > 1 {
			t.Errorf("ParseMetrics returned %d names, asked for 1", len(m))
		}
	})
}
