package svcconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

// fullResilience is the example, every field written out.
const fullResilience = `resilience:
  outlier_detection: {interval: 10s, base_ejection_time: 30s, max_ejection_time: 300s, max_ejection_percent: 10,
                      success_rate: {stdev_factor: 1.9, enforcement_percent: 100, minimum_hosts: 5, request_volume: 100},
                      failure_percentage: {threshold: 85, enforcement_percent: 100, minimum_hosts: 5, request_volume: 50}}
  max_requests: 100
  timeout: 5s
  retry: {on: [unavailable, resource-exhausted], num_retries: 2, base_interval: 25ms, max_interval: 250ms}
  fault: {delay: {fixed: 100ms, percent: 20}, abort: {grpc_status: unavailable, percent: 10}, header: x-chaos, max_active_faults: 100}
  lb: {ring_hash: {header: x-user, min_ring_size: 1024, max_ring_size: 4096}}
`

func dur(s string) Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return Duration(d)
}

// Defaults of each block, as resilience.go's comments give them.
var (
	defOD      = OutlierDetection{Interval: dur("10s"), BaseEjectionTime: dur("30s"), MaxEjectionTime: dur("300s"), MaxEjectionPercent: 10}
	defSR      = SuccessRateEjection{StdevFactor: 1.9, EnforcementPercent: 100, MinimumHosts: 5, RequestVolume: 100}
	defFP      = FailurePercentageEjection{Threshold: 85, EnforcementPercent: 100, MinimumHosts: 5, RequestVolume: 50}
	defRetry   = Retry{On: []string{"unavailable"}, NumRetries: 1, BaseInterval: dur("25ms"), MaxInterval: dur("250ms")}
	defRing    = RingHash{MinRingSize: 1024, MaxRingSize: 4096}
	defLeast   = LeastRequest{ChoiceCount: 2}
	defWRR     = ClientWRR{BlackoutPeriod: dur("10s"), WeightExpirationPeriod: dur("3m"), WeightUpdatePeriod: dur("1s"), ErrorUtilizationPenalty: 1}
	fullParsed = Resilience{
		OutlierDetection: &OutlierDetection{
			Interval: dur("10s"), BaseEjectionTime: dur("30s"), MaxEjectionTime: dur("300s"), MaxEjectionPercent: 10,
			SuccessRate:       &SuccessRateEjection{StdevFactor: 1.9, EnforcementPercent: 100, MinimumHosts: 5, RequestVolume: 100},
			FailurePercentage: &FailurePercentageEjection{Threshold: 85, EnforcementPercent: 100, MinimumHosts: 5, RequestVolume: 50},
		},
		MaxRequests: 100,
		Timeout:     dur("5s"),
		Retry:       &Retry{On: []string{"unavailable", "resource-exhausted"}, NumRetries: 2, BaseInterval: dur("25ms"), MaxInterval: dur("250ms")},
		Fault: &Fault{
			Delay:           &FaultDelay{Fixed: dur("100ms"), Percent: 20},
			Abort:           &FaultAbort{GRPCStatus: 14, Percent: 10},
			Header:          "x-chaos",
			MaxActiveFaults: 100,
		},
		LB: &LB{RingHash: &RingHash{Header: "x-user", MinRingSize: 1024, MaxRingSize: 4096}},
	}
)

// with returns a copy of v changed by f.
func with[T any](v T, f func(*T)) *T {
	f(&v)
	return &v
}

// TestParseResilience: every accepted form parses to the expected
// struct, the fields a set block leaves out taking their defaults, and
// what is shown (the config's JSON, which Parse also reads) parses back
// to the same config.
func TestParseResilience(t *testing.T) {
	tests := []struct {
		name, in string
		want     Resilience
	}{
		{name: "none", in: "strategy: pid\n"},
		{name: "empty", in: "resilience: {}\n"},
		{name: "full", in: fullResilience, want: fullParsed},
		{name: "json", in: `{"resilience": {"timeout": "1h", "max_requests": 1000000, "fault": {"abort": {"grpc_status": 8, "percent": 100}}}}`,
			want: Resilience{Timeout: dur("1h"), MaxRequests: 1_000_000, Fault: &Fault{Abort: &FaultAbort{GRPCStatus: 8, Percent: 100}}}},
		{name: "odSuccessRateDefaults", in: "resilience:\n  outlier_detection:\n    success_rate: {}\n",
			want: Resilience{OutlierDetection: with(defOD, func(o *OutlierDetection) { o.SuccessRate = &defSR })}},
		{name: "odFailurePercentageOnly", in: "resilience: {outlier_detection: {failure_percentage: {threshold: 50, request_volume: 10}, max_ejection_percent: 0}}\n",
			want: Resilience{OutlierDetection: with(defOD, func(o *OutlierDetection) {
				o.MaxEjectionPercent = 0
				o.FailurePercentage = with(defFP, func(f *FailurePercentageEjection) { f.Threshold, f.RequestVolume = 50, 10 })
			})}},
		{name: "odBounds", in: "resilience: {outlier_detection: {interval: 100ms, base_ejection_time: 1h, max_ejection_time: 24h, max_ejection_percent: 100,\n" +
			"  success_rate: {stdev_factor: 10, enforcement_percent: 1, minimum_hosts: 1000, request_volume: 1000000},\n" +
			"  failure_percentage: {threshold: 100, enforcement_percent: 1, minimum_hosts: 2, request_volume: 1}}}\n",
			want: Resilience{OutlierDetection: &OutlierDetection{Interval: dur("100ms"), BaseEjectionTime: dur("1h"), MaxEjectionTime: dur("24h"), MaxEjectionPercent: 100,
				SuccessRate:       &SuccessRateEjection{StdevFactor: 10, EnforcementPercent: 1, MinimumHosts: 1000, RequestVolume: 1_000_000},
				FailurePercentage: &FailurePercentageEjection{Threshold: 100, EnforcementPercent: 1, MinimumHosts: 2, RequestVolume: 1}}}},
		{name: "odMaxEqualsBase", in: "resilience: {outlier_detection: {base_ejection_time: 10m, max_ejection_time: 10m, success_rate: {stdev_factor: 0.5}}}\n",
			want: Resilience{OutlierDetection: with(defOD, func(o *OutlierDetection) {
				o.BaseEjectionTime, o.MaxEjectionTime = dur("10m"), dur("10m")
				o.SuccessRate = with(defSR, func(s *SuccessRateEjection) { s.StdevFactor = 0.5 })
			})}},
		{name: "maxRequestsOne", in: "resilience: {max_requests: 1}\n", want: Resilience{MaxRequests: 1}},
		{name: "timeoutShort", in: "resilience: {timeout: 1ms}\n", want: Resilience{Timeout: dur("1ms")}},
		{name: "retryDefaults", in: "resilience: {retry: {}}\n", want: Resilience{Retry: &defRetry}},
		{name: "retryMaxFromBase", in: "resilience: {retry: {base_interval: 100ms}}\n",
			want: Resilience{Retry: with(defRetry, func(r *Retry) { r.BaseInterval, r.MaxInterval = dur("100ms"), dur("1s") })}},
		{name: "retryMaxCapped", in: "resilience: {retry: {base_interval: 1m, num_retries: 4}}\n",
			want: Resilience{Retry: with(defRetry, func(r *Retry) { r.NumRetries, r.BaseInterval, r.MaxInterval = 4, dur("1m"), dur("5m") })}},
		{name: "retryMaxEqualsBase", in: "resilience: {retry: {base_interval: 1ms, max_interval: 1ms}}\n",
			want: Resilience{Retry: with(defRetry, func(r *Retry) { r.BaseInterval, r.MaxInterval = dur("1ms"), dur("1ms") })}},
		{name: "retryEveryCode", in: "resilience:\n  retry:\n    on: [cancelled, deadline_exceeded, internal, resource_exhausted, unavailable]\n",
			want: Resilience{Retry: with(defRetry, func(r *Retry) { r.On = slices.Clone(RetryCodes) })}},
		{name: "faultDelayOnly", in: "resilience: {fault: {delay: {fixed: 1m, percent: 0.5}}}\n",
			want: Resilience{Fault: &Fault{Delay: &FaultDelay{Fixed: dur("1m"), Percent: 0.5}}}},
		{name: "faultAbortDefaultStatus", in: "resilience: {fault: {abort: {percent: 100}, header: x.test_1}}\n",
			want: Resilience{Fault: &Fault{Abort: &FaultAbort{GRPCStatus: 14, Percent: 100}, Header: "x.test_1"}}},
		{name: "faultStatusUnderscore", in: "resilience: {fault: {abort: {grpc_status: resource_exhausted, percent: 1}}}\n",
			want: Resilience{Fault: &Fault{Abort: &FaultAbort{GRPCStatus: 8, Percent: 1}}}},
		{name: "faultStatusHyphen", in: "resilience: {fault: {abort: {grpc_status: deadline-exceeded, percent: 1}}}\n",
			want: Resilience{Fault: &Fault{Abort: &FaultAbort{GRPCStatus: 4, Percent: 1}}}},
		{name: "faultStatusFirst", in: "resilience: {fault: {abort: {grpc_status: cancelled, percent: 1}}}\n",
			want: Resilience{Fault: &Fault{Abort: &FaultAbort{GRPCStatus: 1, Percent: 1}}}},
		{name: "faultStatusLast", in: "resilience: {fault: {abort: {grpc_status: 16, percent: 1}, max_active_faults: 1000000}}\n",
			want: Resilience{Fault: &Fault{Abort: &FaultAbort{GRPCStatus: 16, Percent: 1}, MaxActiveFaults: 1_000_000}}},
		{name: "ringHashDefaults", in: "resilience: {lb: {ring_hash: {header: x-user}}}\n",
			want: Resilience{LB: &LB{RingHash: with(defRing, func(r *RingHash) { r.Header = "x-user" })}}},
		{name: "ringHashBounds", in: "resilience: {lb: {ring_hash: {header: session_id, min_ring_size: 8388608, max_ring_size: 8388608}}}\n",
			want: Resilience{LB: &LB{RingHash: &RingHash{Header: "session_id", MinRingSize: 8 << 20, MaxRingSize: 8 << 20}}}},
		{name: "ringHashSmall", in: "resilience: {lb: {ring_hash: {header: x, min_ring_size: 1, max_ring_size: 1}}}\n",
			want: Resilience{LB: &LB{RingHash: &RingHash{Header: "x", MinRingSize: 1, MaxRingSize: 1}}}},
		{name: "leastRequestDefaults", in: "resilience: {lb: {least_request: {}}}\n", want: Resilience{LB: &LB{LeastRequest: &defLeast}}},
		{name: "leastRequestTen", in: "resilience: {lb: {least_request: {choice_count: 10}}}\n", want: Resilience{LB: &LB{LeastRequest: &LeastRequest{ChoiceCount: 10}}}},
		{name: "clientWRRDefaults", in: "resilience: {lb: {client_wrr: {}}}\n", want: Resilience{LB: &LB{ClientWRR: &defWRR}}},
		{name: "clientWRRAll", in: "resilience:\n  lb:\n    client_wrr: {blackout_period: 10m, weight_expiration_period: 10m, weight_update_period: 100ms, error_utilization_penalty: 10, oob_reporting_period: 30s}\n",
			want: Resilience{LB: &LB{ClientWRR: &ClientWRR{BlackoutPeriod: dur("10m"), WeightExpirationPeriod: dur("10m"), WeightUpdatePeriod: dur("100ms"), ErrorUtilizationPenalty: 10, OOBReportingPeriod: dur("30s")}}}},
		{name: "clientWRRBounds", in: "resilience: {lb: {client_wrr: {blackout_period: 1s, weight_expiration_period: 1h, weight_update_period: 1m, error_utilization_penalty: 0.01, oob_reporting_period: 10m}}}\n",
			want: Resilience{LB: &LB{ClientWRR: &ClientWRR{BlackoutPeriod: dur("1s"), WeightExpirationPeriod: dur("1h"), WeightUpdatePeriod: dur("1m"), ErrorUtilizationPenalty: 0.01, OOBReportingPeriod: dur("10m")}}}},
		{name: "clientWRROOBZero", in: "resilience: {lb: {client_wrr: {oob_reporting_period: 0s}}}\n", want: Resilience{LB: &LB{ClientWRR: &defWRR}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("payments.yaml", []byte(tt.in))
			if err != nil {
				t.Fatalf("Parse = %v, want nil", err)
			}
			if diff := cmp.Diff(tt.want, c.Resilience); diff != "" {
				t.Errorf("Resilience (-want +got):\n%s", diff)
			}
			if c.Resilience.IsZero() != (tt.want.OutlierDetection == nil && tt.want.MaxRequests == 0 && tt.want.Timeout == 0 && tt.want.Retry == nil && tt.want.Fault == nil && tt.want.LB == nil) {
				t.Errorf("IsZero = %t for %+v", c.Resilience.IsZero(), c.Resilience)
			}
			if msg := checkResilience(c.Resilience); msg != "" {
				t.Errorf("the parsed config breaks the contract: %s", msg)
			}
			shown(t, c)
		})
	}
}

// shown checks that the resilience block as the API shows it (its JSON,
// defaults filled in) parses back to the same block: what is shown is
// what is sent. (Only the block: the rest of a config does not always
// round-trip, e.g. a blend without a strategy is shown with strategy
// zone-aware, which the blend may not name.)
func shown(t *testing.T, c Config) {
	t.Helper()
	text, err := json.Marshal(struct {
		R Resilience `json:"resilience"`
	}{c.Resilience})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse("shown.json", text)
	if err != nil {
		t.Fatalf("the resilience block as shown, %s, does not parse: %v", text, err)
	}
	if diff := cmp.Diff(c.Resilience, again.Resilience); diff != "" {
		t.Fatalf("the resilience block as shown, %s, parses to another block (-parsed +shown):\n%s", text, diff)
	}
}

// TestParseResilienceRefused: every refusal is an ErrInvalid *Error
// naming the file, the line and the whole field path.
func TestParseResilienceRefused(t *testing.T) {
	tests := []struct {
		name, in string
		line     int
		field    string
		msg      string // a part of the message
	}{
		{"notMapping", "resilience: [retry]\n", 1, "resilience", "want a mapping"},
		{"null", "resilience:\n", 1, "resilience", "want a mapping"},
		{"unknown", "resilience:\n  retries: {}\n", 2, "resilience.retries", "unknown field"},
		{"twice", "resilience:\n  timeout: 1s\n  timeout: 2s\n", 3, "resilience.timeout", "set twice"},

		{"odUnknown", "resilience:\n  outlier_detection:\n    success_rate: {}\n    consecutive_5xx: 5\n", 4, "resilience.outlier_detection.consecutive_5xx", "unknown field"},
		{"odNeither", "resilience:\n  outlier_detection:\n    interval: 10s\n", 3, "resilience.outlier_detection", "set success_rate or failure_percentage"},
		{"odEmpty", "resilience: {outlier_detection: {}}\n", 1, "resilience.outlier_detection", "set success_rate or failure_percentage"},
		{"odIntervalZero", "resilience:\n  outlier_detection:\n    interval: 0s\n", 3, "resilience.outlier_detection.interval", "out of range [100ms, 1h0m0s]"},
		{"odIntervalLong", "resilience:\n  outlier_detection:\n    interval: 61m\n", 3, "resilience.outlier_detection.interval", "out of range"},
		{"odIntervalType", "resilience:\n  outlier_detection:\n    interval: 10\n", 3, "resilience.outlier_detection.interval", "want a duration"},
		{"odBaseShort", "resilience:\n  outlier_detection:\n    base_ejection_time: 99ms\n", 3, "resilience.outlier_detection.base_ejection_time", "out of range"},
		{"odMaxLong", "resilience:\n  outlier_detection:\n    max_ejection_time: 25h\n", 3, "resilience.outlier_detection.max_ejection_time", "out of range"},
		{"odMaxBelowBase", "resilience:\n  outlier_detection:\n    base_ejection_time: 1m\n    max_ejection_time: 30s\n    success_rate: {}\n", 4,
			"resilience.outlier_detection.max_ejection_time", "30s is below base_ejection_time 1m0s"},
		{"odBaseAboveDefaultMax", "resilience:\n  outlier_detection:\n    success_rate: {}\n    base_ejection_time: 10m\n", 4,
			"resilience.outlier_detection.base_ejection_time", "10m0s is above max_ejection_time (default 5m0s): set max_ejection_time too"},
		{"odPercent", "resilience:\n  outlier_detection:\n    max_ejection_percent: 101\n", 3, "resilience.outlier_detection.max_ejection_percent", "101 is out of range [0, 100]"},
		{"odPercentNegative", "resilience:\n  outlier_detection:\n    max_ejection_percent: -1\n", 3, "resilience.outlier_detection.max_ejection_percent", "out of range"},
		{"srNull", "resilience:\n  outlier_detection:\n    success_rate:\n", 3, "resilience.outlier_detection.success_rate", "want a mapping"},
		{"srUnknown", "resilience:\n  outlier_detection:\n    success_rate: {stdev: 2}\n", 3, "resilience.outlier_detection.success_rate.stdev", "unknown field"},
		{"srStdevZero", "resilience:\n  outlier_detection:\n    success_rate: {stdev_factor: 0}\n", 3, "resilience.outlier_detection.success_rate.stdev_factor", "0 is out of range (0, 10]"},
		{"srStdevBig", "resilience:\n  outlier_detection:\n    success_rate: {stdev_factor: 10.5}\n", 3, "resilience.outlier_detection.success_rate.stdev_factor", "out of range"},
		{"srStdevType", "resilience:\n  outlier_detection:\n    success_rate: {stdev_factor: high}\n", 3, "resilience.outlier_detection.success_rate.stdev_factor", "want a number"},
		{"srEnforcementZero", "resilience:\n  outlier_detection:\n    success_rate: {enforcement_percent: 0}\n", 3, "resilience.outlier_detection.success_rate.enforcement_percent", "0 is out of range [1, 100]"},
		{"srEnforcementBig", "resilience:\n  outlier_detection:\n    success_rate: {enforcement_percent: 101}\n", 3, "resilience.outlier_detection.success_rate.enforcement_percent", "out of range"},
		{"srMinimumHostsOne", "resilience:\n  outlier_detection:\n    success_rate: {minimum_hosts: 1}\n", 3, "resilience.outlier_detection.success_rate.minimum_hosts", "1 is out of range [2, 1000]"},
		{"srMinimumHostsBig", "resilience:\n  outlier_detection:\n    success_rate: {minimum_hosts: 1001}\n", 3, "resilience.outlier_detection.success_rate.minimum_hosts", "out of range"},
		{"srVolumeZero", "resilience:\n  outlier_detection:\n    success_rate: {request_volume: 0}\n", 3, "resilience.outlier_detection.success_rate.request_volume", "0 is out of range [1, 1000000]"},
		{"srVolumeFloat", "resilience:\n  outlier_detection:\n    success_rate: {request_volume: 1.5}\n", 3, "resilience.outlier_detection.success_rate.request_volume", "want an integer"},
		{"fpThresholdZero", "resilience:\n  outlier_detection:\n    failure_percentage: {threshold: 0}\n", 3, "resilience.outlier_detection.failure_percentage.threshold", "0 is out of range [1, 100]"},
		{"fpThresholdBig", "resilience:\n  outlier_detection:\n    failure_percentage: {threshold: 101}\n", 3, "resilience.outlier_detection.failure_percentage.threshold", "out of range"},
		{"fpEnforcement", "resilience:\n  outlier_detection:\n    failure_percentage: {enforcement_percent: 0}\n", 3, "resilience.outlier_detection.failure_percentage.enforcement_percent", "out of range"},
		{"fpMinimumHosts", "resilience:\n  outlier_detection:\n    failure_percentage: {minimum_hosts: 0}\n", 3, "resilience.outlier_detection.failure_percentage.minimum_hosts", "out of range"},
		{"fpVolume", "resilience:\n  outlier_detection:\n    failure_percentage: {request_volume: 1000001}\n", 3, "resilience.outlier_detection.failure_percentage.request_volume", "out of range"},
		{"fpUnknown", "resilience:\n  outlier_detection:\n    failure_percentage: {stdev_factor: 2}\n", 3, "resilience.outlier_detection.failure_percentage.stdev_factor", "unknown field"},

		{"maxRequestsZero", "resilience:\n  max_requests: 0\n", 2, "resilience.max_requests", "0 is out of range [1, 1000000]"},
		{"maxRequestsBig", "resilience:\n  max_requests: 1000001\n", 2, "resilience.max_requests", "out of range"},
		{"maxRequestsType", "resilience:\n  max_requests: many\n", 2, "resilience.max_requests", "want an integer"},
		{"timeoutZero", "resilience:\n  timeout: 0s\n", 2, "resilience.timeout", "0s is out of range (0s, 1h0m0s]"},
		{"timeoutNegative", "resilience:\n  timeout: -1s\n", 2, "resilience.timeout", "out of range"},
		{"timeoutLong", "resilience:\n  timeout: 2h\n", 2, "resilience.timeout", "out of range"},
		{"timeoutNoUnit", "resilience:\n  timeout: 5\n", 2, "resilience.timeout", "want a duration such as 10s"},

		{"retryUnknown", "resilience:\n  retry:\n    retry_on: [unavailable]\n", 3, "resilience.retry.retry_on", "unknown field"},
		{"retryOnEmpty", "resilience:\n  retry:\n    on: []\n", 3, "resilience.retry.on", "empty"},
		{"retryOnScalar", "resilience:\n  retry:\n    on: unavailable\n", 3, "resilience.retry.on", "want a list"},
		{"retryOnHTTP", "resilience:\n  retry:\n    on:\n      - unavailable\n      - 5xx\n", 5, "resilience.retry.on[1]", "is not one of cancelled, deadline-exceeded, internal, resource-exhausted, unavailable"},
		{"retryOnNotRetried", "resilience:\n  retry:\n    on: [not_found]\n", 3, "resilience.retry.on[0]", "is not one of"},
		{"retryOnUpper", "resilience:\n  retry:\n    on: [UNAVAILABLE]\n", 3, "resilience.retry.on[0]", "is not one of"},
		{"retryOnNumber", "resilience:\n  retry:\n    on: [14]\n", 3, "resilience.retry.on[0]", "want a string"},
		{"retryOnTwice", "resilience:\n  retry:\n    on: [unavailable, internal, unavailable]\n", 3, "resilience.retry.on[2]", "is on[0] too"},
		{"retryOnTwiceSpelled", "resilience:\n  retry:\n    on: [resource-exhausted, resource_exhausted]\n", 3, "resilience.retry.on[1]", "is on[0] too"},
		{"retryNumZero", "resilience:\n  retry:\n    num_retries: 0\n", 3, "resilience.retry.num_retries", "0 is out of range [1, 4]"},
		{"retryNumFive", "resilience:\n  retry:\n    num_retries: 5\n", 3, "resilience.retry.num_retries", "5 is out of range [1, 4]"},
		{"retryBaseShort", "resilience:\n  retry:\n    base_interval: 999us\n", 3, "resilience.retry.base_interval", "out of range [1ms, 1m0s]"},
		{"retryBaseLong", "resilience:\n  retry:\n    base_interval: 61s\n", 3, "resilience.retry.base_interval", "out of range"},
		{"retryMaxLong", "resilience:\n  retry:\n    max_interval: 301s\n", 3, "resilience.retry.max_interval", "out of range"},
		{"retryMaxBelowBase", "resilience:\n  retry:\n    base_interval: 1s\n    max_interval: 100ms\n", 4, "resilience.retry.max_interval", "100ms is below base_interval 1s"},
		{"retryMaxBelowDefaultBase", "resilience:\n  retry:\n    max_interval: 10ms\n", 3, "resilience.retry.max_interval", "10ms is below base_interval 25ms"},

		{"faultEmpty", "resilience:\n  fault: {}\n", 2, "resilience.fault", "set delay or abort"},
		{"faultHeaderOnly", "resilience:\n  fault:\n    header: x-chaos\n", 3, "resilience.fault", "set delay or abort"},
		{"faultUnknown", "resilience:\n  fault:\n    headers: [x-chaos]\n", 3, "resilience.fault.headers", "unknown field"},
		{"delayNoFixed", "resilience:\n  fault:\n    delay: {percent: 5}\n", 3, "resilience.fault.delay.fixed", "missing"},
		{"delayNoPercent", "resilience:\n  fault:\n    delay: {fixed: 1s}\n", 3, "resilience.fault.delay.percent", "missing"},
		{"delayZero", "resilience:\n  fault:\n    delay: {fixed: 0s, percent: 5}\n", 3, "resilience.fault.delay.fixed", "out of range [1ms, 1m0s]"},
		{"delayLong", "resilience:\n  fault:\n    delay: {fixed: 2m, percent: 5}\n", 3, "resilience.fault.delay.fixed", "out of range"},
		{"delayPercentZero", "resilience:\n  fault:\n    delay: {fixed: 1s, percent: 0}\n", 3, "resilience.fault.delay.percent", "0 is out of range (0, 100]"},
		{"delayPercentBig", "resilience:\n  fault:\n    delay: {fixed: 1s, percent: 100.5}\n", 3, "resilience.fault.delay.percent", "out of range"},
		{"delayUnknown", "resilience:\n  fault:\n    delay: {fixed: 1s, percent: 1, header_delay: true}\n", 3, "resilience.fault.delay.header_delay", "unknown field"},
		{"abortNoPercent", "resilience:\n  fault:\n    abort: {grpc_status: internal}\n", 3, "resilience.fault.abort.percent", "missing"},
		{"abortPercentNegative", "resilience:\n  fault:\n    abort: {percent: -1}\n", 3, "resilience.fault.abort.percent", "out of range"},
		{"abortHTTP", "resilience:\n  fault:\n    abort: {http_status: 503, percent: 1}\n", 3, "resilience.fault.abort.http_status", "unknown field"},
		{"abortStatusZero", "resilience:\n  fault:\n    abort: {grpc_status: 0, percent: 1}\n", 3, "resilience.fault.abort.grpc_status", "0 is out of range [1, 16]"},
		{"abortStatusBig", "resilience:\n  fault:\n    abort: {grpc_status: 17, percent: 1}\n", 3, "resilience.fault.abort.grpc_status", "17 is out of range [1, 16]"},
		{"abortStatusOK", "resilience:\n  fault:\n    abort: {grpc_status: ok, percent: 1}\n", 3, "resilience.fault.abort.grpc_status", "is not a gRPC status code other than ok"},
		{"abortStatusUpper", "resilience:\n  fault:\n    abort: {grpc_status: UNAVAILABLE, percent: 1}\n", 3, "resilience.fault.abort.grpc_status", "want a lowercase name"},
		{"abortStatusTypo", "resilience:\n  fault:\n    abort: {grpc_status: unavailble, percent: 1}\n", 3, "resilience.fault.abort.grpc_status", "is not a gRPC status code"},
		{"abortStatusQuoted", "resilience:\n  fault:\n    abort: {grpc_status: \"14\", percent: 1}\n", 3, "resilience.fault.abort.grpc_status", "is not a gRPC status code"},
		{"abortStatusFloat", "resilience:\n  fault:\n    abort: {grpc_status: 14.0, percent: 1}\n", 3, "resilience.fault.abort.grpc_status", "is not a gRPC status code"},
		{"headerUpper", "resilience:\n  fault:\n    abort: {percent: 1}\n    header: X-Chaos\n", 4, "resilience.fault.header", "is not lowercase"},
		{"headerEmpty", "resilience:\n  fault:\n    abort: {percent: 1}\n    header: \"\"\n", 4, "resilience.fault.header", "empty"},
		{"headerPseudo", "resilience:\n  fault:\n    abort: {percent: 1}\n    header: \":authority\"\n", 4, "resilience.fault.header", "pseudo-header"},
		{"headerGRPC", "resilience:\n  fault:\n    abort: {percent: 1}\n    header: grpc-timeout\n", 4, "resilience.fault.header", "starts with grpc-"},
		{"headerBin", "resilience:\n  fault:\n    abort: {percent: 1}\n    header: x-trace-bin\n", 4, "resilience.fault.header", "binary header"},
		{"headerSpace", "resilience:\n  fault:\n    abort: {percent: 1}\n    header: x chaos\n", 4, "resilience.fault.header", "has a character other than"},
		{"headerColon", "resilience:\n  fault:\n    abort: {percent: 1}\n    header: \"x:y\"\n", 4, "resilience.fault.header", "has a character other than"},
		{"headerNumber", "resilience:\n  fault:\n    abort: {percent: 1}\n    header: 42\n", 4, "resilience.fault.header", "want a string"},
		{"maxActiveFaultsZero", "resilience:\n  fault:\n    abort: {percent: 1}\n    max_active_faults: 0\n", 4, "resilience.fault.max_active_faults", "0 is out of range [1, 1000000]"},

		{"lbEmpty", "resilience:\n  lb: {}\n", 2, "resilience.lb", "set one of ring_hash, least_request, client_wrr"},
		{"lbUnknown", "resilience:\n  lb:\n    round_robin: {}\n", 3, "resilience.lb.round_robin", "unknown field"},
		{"lbTwo", "resilience:\n  lb:\n    least_request: {}\n    client_wrr: {}\n", 4, "resilience.lb.client_wrr", "resilience.lb.least_request is set too"},
		{"lbThree", "resilience:\n  lb:\n    client_wrr: {}\n    ring_hash: {header: x}\n    least_request: {}\n", 4, "resilience.lb.ring_hash", "resilience.lb.client_wrr is set too"},
		{"lbScalar", "resilience:\n  lb: ring_hash\n", 2, "resilience.lb", "want a mapping"},
		{"ringNoHeader", "resilience:\n  lb:\n    ring_hash: {min_ring_size: 1024}\n", 3, "resilience.lb.ring_hash.header", "missing"},
		{"ringHeaderBin", "resilience:\n  lb:\n    ring_hash: {header: user-bin}\n", 3, "resilience.lb.ring_hash.header", "binary header"},
		{"ringHeaderUpper", "resilience:\n  lb:\n    ring_hash: {header: X-User}\n", 3, "resilience.lb.ring_hash.header", "is not lowercase"},
		{"ringHeaderGRPC", "resilience:\n  lb:\n    ring_hash: {header: grpc-encoding}\n", 3, "resilience.lb.ring_hash.header", "starts with grpc-"},
		{"ringMinZero", "resilience:\n  lb:\n    ring_hash: {header: x, min_ring_size: 0}\n", 3, "resilience.lb.ring_hash.min_ring_size", "0 is out of range [1, 8388608]"},
		{"ringMaxBig", "resilience:\n  lb:\n    ring_hash: {header: x, max_ring_size: 8388609}\n", 3, "resilience.lb.ring_hash.max_ring_size", "out of range"},
		{"ringMinAboveMax", "resilience:\n  lb:\n    ring_hash:\n      header: x\n      min_ring_size: 2048\n      max_ring_size: 1024\n", 6,
			"resilience.lb.ring_hash.max_ring_size", "1024 is below min_ring_size 2048"},
		{"ringMinAboveDefaultMax", "resilience:\n  lb:\n    ring_hash:\n      header: x\n      min_ring_size: 5000\n", 5,
			"resilience.lb.ring_hash.min_ring_size", "5000 is above max_ring_size (default 4096): set max_ring_size too"},
		{"ringUnknown", "resilience:\n  lb:\n    ring_hash: {header: x, hash_function: murmur}\n", 3, "resilience.lb.ring_hash.hash_function", "unknown field"},
		{"leastOne", "resilience:\n  lb:\n    least_request: {choice_count: 1}\n", 3, "resilience.lb.least_request.choice_count", "1 is out of range [2, 10]"},
		{"leastEleven", "resilience:\n  lb:\n    least_request: {choice_count: 11}\n", 3, "resilience.lb.least_request.choice_count", "11 is out of range [2, 10]"},
		{"leastUnknown", "resilience:\n  lb:\n    least_request: {active_request_bias: 1}\n", 3, "resilience.lb.least_request.active_request_bias", "unknown field"},
		{"wrrBlackoutZero", "resilience:\n  lb:\n    client_wrr: {blackout_period: 0s}\n", 3, "resilience.lb.client_wrr.blackout_period", "out of range [1s, 10m0s]"},
		{"wrrBlackoutLong", "resilience:\n  lb:\n    client_wrr: {blackout_period: 11m}\n", 3, "resilience.lb.client_wrr.blackout_period", "out of range"},
		{"wrrExpirationBelowBlackout", "resilience:\n  lb:\n    client_wrr: {blackout_period: 1m, weight_expiration_period: 30s}\n", 3,
			"resilience.lb.client_wrr.weight_expiration_period", "30s is below blackout_period 1m0s"},
		{"wrrBlackoutAboveDefaultExpiration", "resilience:\n  lb:\n    client_wrr:\n      blackout_period: 5m\n", 4,
			"resilience.lb.client_wrr.blackout_period", "5m0s is above weight_expiration_period (default 3m0s)"},
		{"wrrExpirationLong", "resilience:\n  lb:\n    client_wrr: {weight_expiration_period: 61m}\n", 3, "resilience.lb.client_wrr.weight_expiration_period", "out of range"},
		{"wrrUpdateShort", "resilience:\n  lb:\n    client_wrr: {weight_update_period: 99ms}\n", 3, "resilience.lb.client_wrr.weight_update_period", "out of range [100ms, 1m0s]"},
		{"wrrUpdateLong", "resilience:\n  lb:\n    client_wrr: {weight_update_period: 2m}\n", 3, "resilience.lb.client_wrr.weight_update_period", "out of range"},
		{"wrrPenaltyZero", "resilience:\n  lb:\n    client_wrr: {error_utilization_penalty: 0}\n", 3, "resilience.lb.client_wrr.error_utilization_penalty", "0 is out of range (0, 10]"},
		{"wrrPenaltyBig", "resilience:\n  lb:\n    client_wrr: {error_utilization_penalty: 11}\n", 3, "resilience.lb.client_wrr.error_utilization_penalty", "out of range"},
		{"wrrOOBShort", "resilience:\n  lb:\n    client_wrr: {oob_reporting_period: 10s}\n", 3, "resilience.lb.client_wrr.oob_reporting_period", "want 0 (weights from the RPCs' trailers) or [30s, 10m0s]"},
		{"wrrOOBLong", "resilience:\n  lb:\n    client_wrr: {oob_reporting_period: 11m}\n", 3, "resilience.lb.client_wrr.oob_reporting_period", "out of range [0s, 10m0s]"},
		{"wrrUnknown", "resilience:\n  lb:\n    client_wrr: {enable_oob_load_report: true}\n", 3, "resilience.lb.client_wrr.enable_oob_load_report", "unknown field"},
		{"aliasInside", "resilience:\n  retry: &r {}\n  fault: *r\n", 3, "resilience.fault", "aliases are not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("payments.yaml", []byte(tt.in))
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse = %v, want an *Error that is ErrInvalid", err)
			}
			if e.File != "payments.yaml" || e.Line != tt.line || e.Field != tt.field || !strings.Contains(e.Msg, tt.msg) {
				t.Errorf("Parse = %q, want payments.yaml:%d: %s: ...%s...", err, tt.line, tt.field, tt.msg)
			}
		})
	}
}

// TestStoreResilience: Resilience answers the policies of the config in
// force, tombstones included, and false without any; *Store is what
// package xds reads them through.
func TestStoreResilience(t *testing.T) {
	var _ interface {
		Resilience(string) (Resilience, bool)
		Changed() <-chan struct{}
		Services() []string
	} = (*Store)(nil)

	ctx := context.Background()
	s, err := NewStore(StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for svc, text := range map[string]string{"plain": "strategy: pid\n", "empty": "resilience: {}\n", "full": fullResilience, "gone": "resilience: {timeout: 2s}\n"} {
		if _, err := s.Set(ctx, svc, []byte(text), SourceAPI, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Delete(ctx, "gone", SourceAPI); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		service string
		want    Resilience
		ok      bool
	}{
		{"none", Resilience{}, false},
		{"plain", Resilience{}, false},
		{"empty", Resilience{}, false},
		{"full", fullParsed, true},
		{"gone", Resilience{Timeout: dur("2s")}, true}, // a tombstone still applies
	} {
		got, ok := s.Resilience(tc.service)
		if ok != tc.ok {
			t.Errorf("Resilience(%s) ok = %t, want %t", tc.service, ok, tc.ok)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Resilience(%s) (-want +got):\n%s", tc.service, diff)
		}
	}
}

// TestResilienceWarnings: an endpoint-picking policy that ignores
// endpoint weights (least_request, client_wrr) or hashes over them
// (ring_hash) is accepted with a warning when the strategy, or either
// side of a blend, computes PID weights; not otherwise.
func TestResilienceWarnings(t *testing.T) {
	const (
		least = "resilience: {lb: {least_request: {}}}\n"
		wrr   = "resilience: {lb: {client_wrr: {}}}\n"
		ring  = "resilience: {lb: {ring_hash: {header: x-user}}}\n"
	)
	tests := []struct {
		name, in string
		want     []string
	}{
		{"leastPID", "strategy: pid\n" + least,
			[]string{"resilience.lb.least_request: gRPC clients ignore endpoint weights under least_request/client_wrr: PID weights (strategy pid) will not apply; locality weights still do"}},
		{"wrrZoneAwarePID", "strategy: zone-aware+pid\n" + wrr,
			[]string{"resilience.lb.client_wrr: gRPC clients ignore endpoint weights under least_request/client_wrr: PID weights (strategy zone-aware+pid) will not apply; locality weights still do"}},
		{"ringPID", "strategy: pid\n" + ring,
			[]string{"resilience.lb.ring_hash: the ring is built from the endpoint weights: every PID weight change (strategy pid) rebuilds the ring and moves keys"}},
		{"ringBlendTo", "strategy: zone-aware\nblend: {from: zone-aware, to: zone-aware+pid, percent: 10}\n" + ring,
			[]string{"resilience.lb.ring_hash: the ring is built from the endpoint weights: every PID weight change (blend.to zone-aware+pid) rebuilds the ring and moves keys"}},
		{"leastBlendFrom", "blend: {from: pid, to: static, percent: 90}\n" + least,
			[]string{"resilience.lb.least_request: gRPC clients ignore endpoint weights under least_request/client_wrr: PID weights (blend.from pid) will not apply; locality weights still do"}},
		{"leastZoneAware", least, nil},
		{"wrrStatic", "strategy: static\n" + wrr, nil},
		{"ringZoneAware", "strategy: zone-aware\n" + ring, nil},
		{"pidNoLB", "strategy: pid\nresilience: {timeout: 1s, retry: {}}\n", nil},
		{"pidNoResilience", "strategy: pid\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("p.yaml", []byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, c.resilienceWarnings()); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// docSection is the "## Resilience policies" section of
// docs/service-config.md, up to the next section.
func docSection(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/service-config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "\n## Resilience policies\n")
	if !ok {
		t.Fatal(`docs/service-config.md has no "## Resilience policies" section`)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	return sec
}

// TestDocResilienceExamples: every ```yaml block of the resilience
// section of docs/service-config.md is a service config that parses and
// sets resilience policies, and between them they show every policy.
func TestDocResilienceExamples(t *testing.T) {
	sec := docSection(t)
	shownPolicies := map[string]bool{}
	blocks := 0
	for rest := sec; ; {
		var block string
		var ok bool
		if _, rest, ok = strings.Cut(rest, "```yaml\n"); !ok {
			break
		}
		if block, rest, ok = strings.Cut(rest, "```"); !ok {
			t.Fatalf("a ```yaml block does not end: %q", rest)
		}
		blocks++
		c, err := Parse("example.yaml", []byte(block))
		if err != nil {
			t.Errorf("the doc's example\n%s: %v", block, err)
			continue
		}
		r := c.Resilience
		if r.IsZero() {
			t.Errorf("the doc's example\n%s sets no resilience policy", block)
		}
		shown(t, c)
		for name, set := range map[string]bool{
			"outlier_detection": r.OutlierDetection != nil, "max_requests": r.MaxRequests != 0, "timeout": r.Timeout != 0,
			"retry": r.Retry != nil, "fault": r.Fault != nil,
			"ring_hash":     r.LB != nil && r.LB.RingHash != nil,
			"least_request": r.LB != nil && r.LB.LeastRequest != nil,
			"client_wrr":    r.LB != nil && r.LB.ClientWRR != nil,
		} {
			shownPolicies[name] = shownPolicies[name] || set
		}
	}
	if blocks == 0 {
		t.Fatal("the resilience section has no ```yaml block")
	}
	for name, ok := range shownPolicies {
		if !ok {
			t.Errorf("no example of the resilience section shows %s", name)
		}
	}
}

// docDefaultRow is a row of a field table in the resilience section:
// | `field` | range | `default` |. Only a default that is one code span
// is checked; a computed one ("10 × `base_interval`") or "required" is
// prose.
var docDefaultRow = regexp.MustCompile("^\\| `([a-z_.]+)` \\|[^|]+\\| `([^`]+)` \\|$")

// TestDocResilienceDefaults: the defaults the resilience section's tables
// give are the ones Parse fills in, field by field.
func TestDocResilienceDefaults(t *testing.T) {
	// Every block set with the least it needs; lb once per policy.
	var filled []map[string]any
	for _, in := range []string{
		"resilience: {outlier_detection: {success_rate: {}, failure_percentage: {}}, retry: {}, fault: {delay: {fixed: 1s, percent: 1}, abort: {percent: 1}}, lb: {ring_hash: {header: x}}}",
		"resilience: {lb: {least_request: {}}}",
		"resilience: {lb: {client_wrr: {}}}",
	} {
		c, err := Parse("min.yaml", []byte(in))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(c.Resilience)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		filled = append(filled, m)
	}
	lookup := func(path string) (any, bool) {
		for _, m := range filled {
			var v any = m
			for k := range strings.SplitSeq(path, ".") {
				mm, ok := v.(map[string]any)
				if !ok {
					v = nil
					break
				}
				v = mm[k]
			}
			if v != nil {
				return v, true
			}
		}
		return nil, false
	}
	checked := 0
	for line := range strings.SplitSeq(docSection(t), "\n") {
		m := docDefaultRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		field, def := m[1], m[2]
		got, ok := lookup(field)
		if !ok {
			t.Errorf("the doc's table names %s, which a filled-in config does not have", field)
			continue
		}
		var want any
		if err := yaml.Unmarshal([]byte(def), &want); err != nil {
			t.Fatalf("%s: the default %q: %v", field, def, err)
		}
		if !sameDefault(want, got) {
			t.Errorf("docs/service-config.md: %s defaults to %v, but Parse fills in %v", field, def, got)
		}
		checked++
	}
	if checked < 20 {
		t.Errorf("checked only %d defaults in the doc's tables; do the rows still read | `field` | range | `default` |?", checked)
	}
}

// sameDefault compares a default as the doc writes it (YAML) with the
// value in the config's JSON: numbers as numbers, durations as durations.
func sameDefault(doc, json any) bool {
	switch d := doc.(type) {
	case int:
		return json == float64(d)
	case float64:
		return json == d
	case string:
		s, ok := json.(string)
		if !ok {
			return false
		}
		dd, err1 := time.ParseDuration(d)
		sd, err2 := time.ParseDuration(s)
		if err1 == nil && err2 == nil {
			return dd == sd
		}
		return d == s
	case []any:
		j, ok := json.([]any)
		return ok && fmt.Sprint(d) == fmt.Sprint(j)
	}
	return false
}

// checkResilience says how r breaks the contract of resilience.go's
// comments (ranges, required fields, the rules between fields), or "".
// It is written apart from the parser, so that the fuzzer can hold one
// against the other.
func checkResilience(r Resilience) string {
	type rng struct {
		name   string
		v, lo  float64
		hi     float64
		loOpen bool
	}
	var rs []rng
	d := func(x Duration) float64 { return float64(x) }
	ms := func(s string) float64 { return float64(dur(s)) }
	if od := r.OutlierDetection; od != nil {
		rs = append(rs,
			rng{"interval", d(od.Interval), ms("100ms"), ms("1h"), false},
			rng{"base_ejection_time", d(od.BaseEjectionTime), ms("100ms"), ms("1h"), false},
			rng{"max_ejection_time", d(od.MaxEjectionTime), d(od.BaseEjectionTime), ms("24h"), false},
			rng{"max_ejection_percent", float64(od.MaxEjectionPercent), 0, 100, false})
		if od.SuccessRate == nil && od.FailurePercentage == nil {
			return "outlier_detection without success_rate or failure_percentage"
		}
		if s := od.SuccessRate; s != nil {
			rs = append(rs, rng{"stdev_factor", s.StdevFactor, 0, 10, true}, rng{"sr.enforcement_percent", float64(s.EnforcementPercent), 1, 100, false},
				rng{"sr.minimum_hosts", float64(s.MinimumHosts), 2, 1000, false}, rng{"sr.request_volume", float64(s.RequestVolume), 1, 1e6, false})
		}
		if f := od.FailurePercentage; f != nil {
			rs = append(rs, rng{"threshold", float64(f.Threshold), 1, 100, false}, rng{"fp.enforcement_percent", float64(f.EnforcementPercent), 1, 100, false},
				rng{"fp.minimum_hosts", float64(f.MinimumHosts), 2, 1000, false}, rng{"fp.request_volume", float64(f.RequestVolume), 1, 1e6, false})
		}
	}
	if r.MaxRequests != 0 {
		rs = append(rs, rng{"max_requests", float64(r.MaxRequests), 1, 1e6, false})
	}
	if r.Timeout != 0 {
		rs = append(rs, rng{"timeout", d(r.Timeout), 0, ms("1h"), true})
	}
	if rt := r.Retry; rt != nil {
		if len(rt.On) == 0 {
			return "retry.on empty"
		}
		for i, c := range rt.On {
			if !slices.Contains(RetryCodes, c) || slices.Index(rt.On, c) != i {
				return fmt.Sprintf("retry.on %v", rt.On)
			}
		}
		rs = append(rs, rng{"num_retries", float64(rt.NumRetries), 1, 4, false}, rng{"base_interval", d(rt.BaseInterval), ms("1ms"), ms("1m"), false},
			rng{"max_interval", d(rt.MaxInterval), d(rt.BaseInterval), ms("5m"), false})
	}
	if f := r.Fault; f != nil {
		if f.Delay == nil && f.Abort == nil {
			return "fault without delay or abort"
		}
		if f.Delay != nil {
			rs = append(rs, rng{"delay.fixed", d(f.Delay.Fixed), ms("1ms"), ms("1m"), false}, rng{"delay.percent", f.Delay.Percent, 0, 100, true})
		}
		if f.Abort != nil {
			rs = append(rs, rng{"grpc_status", float64(f.Abort.GRPCStatus), 1, 16, false}, rng{"abort.percent", f.Abort.Percent, 0, 100, true})
		}
		if f.Header != "" && !validHeader(f.Header) {
			return fmt.Sprintf("fault.header %q", f.Header)
		}
		if f.MaxActiveFaults != 0 {
			rs = append(rs, rng{"max_active_faults", float64(f.MaxActiveFaults), 1, 1e6, false})
		}
	}
	if lb := r.LB; lb != nil {
		set := 0
		if h := lb.RingHash; h != nil {
			set++
			if !validHeader(h.Header) {
				return fmt.Sprintf("ring_hash.header %q", h.Header)
			}
			rs = append(rs, rng{"min_ring_size", float64(h.MinRingSize), 1, 8 << 20, false}, rng{"max_ring_size", float64(h.MaxRingSize), float64(h.MinRingSize), 8 << 20, false})
		}
		if l := lb.LeastRequest; l != nil {
			set++
			rs = append(rs, rng{"choice_count", float64(l.ChoiceCount), 2, 10, false})
		}
		if w := lb.ClientWRR; w != nil {
			set++
			rs = append(rs, rng{"blackout_period", d(w.BlackoutPeriod), ms("1s"), ms("10m"), false},
				rng{"weight_expiration_period", d(w.WeightExpirationPeriod), d(w.BlackoutPeriod), ms("1h"), false},
				rng{"weight_update_period", d(w.WeightUpdatePeriod), ms("100ms"), ms("1m"), false},
				rng{"error_utilization_penalty", w.ErrorUtilizationPenalty, 0, 10, true})
			if w.OOBReportingPeriod != 0 {
				rs = append(rs, rng{"oob_reporting_period", d(w.OOBReportingPeriod), ms("30s"), ms("10m"), false})
			}
		}
		if set != 1 {
			return fmt.Sprintf("lb sets %d policies", set)
		}
	}
	for _, x := range rs {
		if x.v < x.lo || x.v > x.hi || (x.loOpen && x.v == x.lo) {
			return fmt.Sprintf("%s %v outside [%v, %v] (open %t)", x.name, x.v, x.lo, x.hi, x.loOpen)
		}
	}
	return ""
}

var metadataKey = regexp.MustCompile(`^[a-z0-9_.-]+$`)

func validHeader(h string) bool {
	return metadataKey.MatchString(h) && !strings.HasPrefix(h, "grpc-") && !strings.HasSuffix(h, "-bin")
}
