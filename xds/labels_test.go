package xds

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway/spillway/registry"
)

func TestLabelSet(t *testing.T) {
	t0 := time.Unix(1000, 0)
	idle := time.Minute
	// Each step acquires (+), releases (-), touches (~) or sweeps (!) at
	// t0 plus an offset, and says what label it must get.
	type step struct {
		op    byte
		value string
		at    time.Duration
		want  string // label; for '!', how many slots freed
	}
	tests := []struct {
		name      string
		max       int
		steps     []step
		wantSlots []string
		wantFreed []string
	}{
		{name: "first_values_keep_their_name", max: 2, steps: []step{
			{'+', "a", 0, "a"}, {'+', "b", 0, "b"}, {'+', "c", 0, labelOther}, {'+', "a", 0, "a"},
		}, wantSlots: []string{"a", "b"}},
		{name: "fixed_labels_take_no_slot", max: 1, steps: []step{
			{'+', "", 0, labelNone}, {'+', "Bad_Zone", 0, labelInvalid}, {'+', strings.Repeat("x", 64), 0, labelInvalid},
			{'+', labelOther, 0, labelOther}, {'+', labelNone, 0, labelNone}, {'+', "a", 0, "a"},
		}, wantSlots: []string{"a"}},
		{name: "held_slot_is_never_freed", max: 1, steps: []step{
			{'+', "a", 0, "a"}, {'+', "b", time.Hour, labelOther}, {'!', "", time.Hour, "0"},
		}, wantSlots: []string{"a"}},
		{name: "released_slot_kept_while_recent", max: 1, steps: []step{
			{'+', "a", 0, "a"}, {'-', "a", 0, ""}, {'+', "b", idle - time.Second, labelOther},
		}, wantSlots: []string{"a"}},
		{name: "idle_slot_goes_to_a_new_value", max: 1, steps: []step{
			{'+', "a", 0, "a"}, {'-', "a", 0, ""}, {'+', "b", idle, "b"}, {'+', "a", idle, labelOther},
		}, wantSlots: []string{"b"}, wantFreed: []string{"a"}},
		{name: "evicts_the_longest_idle", max: 2, steps: []step{
			{'~', "a", 0, "a"}, {'~', "b", 10 * time.Second, "b"}, {'+', "c", 2 * idle, "c"},
		}, wantSlots: []string{"b", "c"}, wantFreed: []string{"a"}},
		{name: "touch_keeps_a_slot_alive", max: 1, steps: []step{
			{'~', "a", 0, "a"}, {'~', "a", idle - time.Second, "a"}, {'+', "b", idle + time.Second, labelOther},
		}, wantSlots: []string{"a"}},
		{name: "sweep_frees_idle_only", max: 3, steps: []step{
			{'~', "a", 0, "a"}, {'+', "b", 0, "b"}, {'~', "c", 2 * idle, "c"}, {'!', "", 2 * idle, "1"},
		}, wantSlots: []string{"b", "c"}, wantFreed: []string{"a"}},
		{name: "rolling_fleet_reuses_slots", max: 2, steps: []step{
			{'+', "a", 0, "a"}, {'+', "b", 0, "b"}, {'-', "a", time.Second, ""}, {'-', "b", time.Second, ""},
			{'!', "", 2 * idle, "2"}, {'+', "c", 2 * idle, "c"}, {'+', "d", 2 * idle, "d"}, {'+', "e", 2 * idle, labelOther},
		}, wantSlots: []string{"c", "d"}, wantFreed: []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var freed []string
			b := newLabelSet(tt.max, idle, func(v string) { freed = append(freed, v) })
			for i, st := range tt.steps {
				now := t0.Add(st.at)
				var got string
				switch st.op {
				case '+':
					got = b.acquire(st.value, now)
				case '~':
					got = b.touch(st.value, now)
				case '-':
					b.release(st.value, now)
					continue
				case '!':
					got = string(rune('0' + b.sweep(now)))
				}
				if got != st.want {
					t.Errorf("step %d %c%q = %q, want %q", i, st.op, st.value, got, st.want)
				}
			}
			var slots []string
			for v := range b.slots {
				slots = append(slots, v)
			}
			slices.Sort(slots)
			slices.Sort(freed)
			if !slices.Equal(slots, tt.wantSlots) {
				t.Errorf("slots = %q, want %q", slots, tt.wantSlots)
			}
			if !slices.Equal(freed, tt.wantFreed) {
				t.Errorf("freed = %q, want %q", freed, tt.wantFreed)
			}
			if b.len() > tt.max {
				t.Errorf("len = %d, over the cap %d", b.len(), tt.max)
			}
		})
	}
}

func TestConfigMaxZones(t *testing.T) {
	store := registry.NewStore()
	for _, tt := range []struct {
		name    string
		max     int
		want    int
		wantErr string
	}{
		{name: "zero_means_64", max: 0, want: 64},
		{name: "set", max: 5, want: 5},
		{name: "negative", max: -1, wantErr: "MaxZones"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{Store: store, MaxZones: tt.max})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New(MaxZones %d) = %v, want an error naming %s", tt.max, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.cfg.MaxZones != tt.want || s.zones.max != tt.want {
				t.Errorf("MaxZones = %d (set cap %d), want %d", s.cfg.MaxZones, s.zones.max, tt.want)
			}
		})
	}
}
