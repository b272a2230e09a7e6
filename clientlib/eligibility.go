package clientlib

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/spillway/spillway/migration/rollout"
)

// errNoRollout is Eligibility.Err when no rollout config is configured.
var errNoRollout = errors.New(`none configured (WithRolloutURL("") and no WithRolloutFile)`)

// rolloutFetchTimeout bounds the GET of the rollout config at Dial; at a
// poll, the GET is bounded by the poll interval too.
const rolloutFetchTimeout = 5 * time.Second

// maxRolloutBytes bounds the rollout config read.
const maxRolloutBytes = 4 << 20

// Eligibility is the rollout decision, made at Dial and again at every
// poll: may this caller use xDS at all? The panic flag decides whether it
// does.
type Eligibility struct {
	// Eligible is true when a rule matched and the caller's bucket is
	// under its percentage.
	Eligible bool
	// Source is where the rollout config was read: "file:<path>" or the
	// URL; "" when none was configured (Err then says so).
	Source string
	// Version is the config version the server gave (0 for a file).
	Version uint64
	// Rule is the index of the deciding rule, -1 when none matched (or no
	// config was read); RuleName and Percent are that rule's.
	Rule     int
	RuleName string
	Percent  float64
	// Bucket is the caller's place in [0, 10000), from a hash of its
	// service name (rollout.Bucket).
	Bucket int
	// Err says why no config could be read; Eligible is then false.
	Err error
}

// String says the decision and why, in one line, e.g. "eligible: rule 0
// (tier3): bucket 159 < 1000 (10%)". Buckets run from 0 to 9999.
func (e Eligibility) String() string {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("not eligible: no rollout config: %v", e.Err)
	case e.Rule < 0:
		return fmt.Sprintf("not eligible: no rule matches (bucket %d)", e.Bucket)
	}
	rule := "rule " + strconv.Itoa(e.Rule)
	if e.RuleName != "" {
		rule += " (" + e.RuleName + ")"
	}
	if e.Eligible {
		return fmt.Sprintf("eligible: %s: bucket %d < %g (%g%%)", rule, e.Bucket, e.Percent*100, e.Percent)
	}
	return fmt.Sprintf("not eligible: %s: bucket %d >= %g (%g%%)", rule, e.Bucket, e.Percent*100, e.Percent)
}

// Decide is the rollout decision for the calling service with metadata md
// (which may be nil; its "service" key is ignored) under cfg; a nil cfg
// makes nobody eligible. Source and Version are left empty. It is what
// Dial decides, without the network, e.g. for a dry run.
func Decide(cfg *rollout.Config, service string, md map[string]string) Eligibility {
	meta := make(map[string]string, len(md)+1)
	for k, v := range md {
		meta[k] = v
	}
	meta["service"] = service
	d := cfg.Eligible(meta)
	e := Eligibility{Eligible: d.Eligible, Rule: d.Rule, RuleName: d.RuleName, Bucket: d.Bucket}
	if d.Rule >= 0 {
		e.Percent = cfg.Rules[d.Rule].Percent
	}
	return e
}

// decide reads the rollout config (the file, else the URL) and decides;
// a config that cannot be read makes the caller not eligible.
func (o *options) decide(ctx context.Context, timeout time.Duration) Eligibility {
	var (
		cfg     *rollout.Config
		source  string
		version uint64
		err     error
	)
	switch {
	case o.rolloutFile != "":
		source = "file:" + o.rolloutFile
		cfg, err = readRolloutFile(o.rolloutFile)
	case o.rolloutURL != "":
		source = o.rolloutURL
		client := http.DefaultClient
		if o.rolloutHTTP != nil {
			client = o.rolloutHTTP.get()
		}
		cfg, version, err = fetchRollout(ctx, client, o.rolloutURL, timeout)
	default:
		err = errNoRollout
	}
	meta := o.subject()
	delete(meta, "service")
	e := Decide(cfg, o.service, meta)
	e.Source, e.Version, e.Err = source, version, err
	if err != nil {
		e.Eligible, e.Rule, e.RuleName, e.Percent = false, -1, "", 0
	}
	return e
}

func readRolloutFile(path string) (*rollout.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rollout file: %w", err)
	}
	cfg, err := rollout.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("rollout file %s: %w", path, err)
	}
	return cfg, nil
}

// rolloutDoc is the body of GET /v1/rollout.
type rolloutDoc struct {
	Rules   []rollout.Rule `json:"rules"`
	Version uint64         `json:"version"`
}

func fetchRollout(ctx context.Context, client *http.Client, u string, timeout time.Duration) (*rollout.Config, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("rollout url: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("rollout url: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRolloutBytes))
	if err != nil {
		return nil, 0, fmt.Errorf("rollout url %s: read: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("rollout url %s: %s", u, resp.Status)
	}
	var doc rolloutDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, 0, fmt.Errorf("rollout url %s: %w", u, err)
	}
	cfg := &rollout.Config{Rules: doc.Rules}
	if err := cfg.Validate(); err != nil {
		return nil, 0, fmt.Errorf("rollout url %s: %w", u, err)
	}
	return cfg, doc.Version, nil
}
