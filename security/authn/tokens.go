package authn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/spillway/spillway/security/internal/filepoll"
)

// AdminIdentity is the identity the legacy --admin-token-file token
// stands for.
const AdminIdentity = "admin"

// TokenSet maps SHA-256 digests of bearer tokens to identities. It never
// holds a plaintext token. The zero value (and nil) knows no token. A
// TokenSet is immutable and safe for concurrent use.
type TokenSet struct {
	entries []tokenEntry
}

type tokenEntry struct {
	identity string
	sum      [sha256.Size]byte
}

// Len is the number of tokens.
func (s *TokenSet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.entries)
}

// Lookup returns the identity of token. It hashes token and compares the
// digest with every entry in constant time, without stopping at a match,
// so neither the token's length nor its position in the file shows in
// the time taken.
func (s *TokenSet) Lookup(token string) (Identity, bool) {
	if s == nil || token == "" {
		return Identity{}, false
	}
	sum := sha256.Sum256([]byte(token))
	found, idx := 0, 0
	for i := range s.entries {
		eq := subtle.ConstantTimeCompare(sum[:], s.entries[i].sum[:])
		idx = subtle.ConstantTimeSelect(eq, i, idx)
		found |= eq
	}
	if found == 0 {
		return Identity{}, false
	}
	return Identity{Name: s.entries[idx].identity, Method: Token}, true
}

// WithAdmin returns a copy of s in which token (the --admin-token-file
// token, in plaintext) is identity "admin". It refuses an s that already
// has identity admin or token's digest.
func (s *TokenSet) WithAdmin(token string) (*TokenSet, error) {
	var out TokenSet
	if s != nil {
		out.entries = append(out.entries, s.entries...)
	}
	if token == "" {
		return &out, nil
	}
	sum := sha256.Sum256([]byte(token))
	for _, e := range out.entries {
		if e.identity == AdminIdentity {
			return nil, errors.New("identity admin: the tokens file names it and --admin-token-file gives it too; keep one")
		}
		if e.sum == sum {
			return nil, fmt.Errorf("--admin-token-file: the tokens file gives the same token to identity %s", e.identity)
		}
	}
	out.entries = append(out.entries, tokenEntry{identity: AdminIdentity, sum: sum})
	return &out, nil
}

// ParseTokens parses a tokens file: a YAML list of
//
//   - identity: NAME     # ValidateName; not "anonymous"
//     sha256: HEX        # 64 hex digits: the SHA-256 of the token
//
// (spillwayctl token new NAME prints a token and its line). name is the
// file's name for errors, which say "name:line: field: reason". An
// identity or a digest given twice is an error; so is any other key.
func ParseTokens(name string, b []byte) (*TokenSet, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &TokenSet{}, nil // an empty file: no tokens
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s:%d: one YAML document wanted", name, extra.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	at := func(n *yaml.Node, field, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s: %s", name, n.Line, field, fmt.Sprintf(format, args...))
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return &TokenSet{}, nil
	}
	if root.Kind != yaml.SequenceNode {
		return nil, at(root, "tokens", "want a list of {identity, sha256}")
	}
	set := &TokenSet{}
	byName := map[string]int{}
	bySum := map[[sha256.Size]byte]string{}
	for i, item := range root.Content {
		field := fmt.Sprintf("[%d]", i)
		if item.Kind != yaml.MappingNode {
			return nil, at(item, field, "want a mapping {identity, sha256}")
		}
		var e tokenEntry
		var haveID, haveSum bool
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, v := item.Content[j], item.Content[j+1]
			if v.Kind != yaml.ScalarNode {
				return nil, at(v, field+"."+k.Value, "want a string")
			}
			switch k.Value {
			case "identity":
				if haveID {
					return nil, at(k, field+".identity", "given twice")
				}
				if err := ValidateName(v.Value); err != nil {
					return nil, at(v, field+".identity", "%v", err)
				}
				if v.Value == "anonymous" {
					return nil, at(v, field+".identity", `"anonymous" is the name of callers without credentials`)
				}
				e.identity, haveID = v.Value, true
			case "sha256":
				if haveSum {
					return nil, at(k, field+".sha256", "given twice")
				}
				d, err := hex.DecodeString(v.Value)
				if err != nil || len(d) != sha256.Size {
					return nil, at(v, field+".sha256", "want 64 hex digits (the SHA-256 of the token), got %d characters", len(v.Value))
				}
				copy(e.sum[:], d)
				haveSum = true
			default:
				return nil, at(k, field+"."+clip(k.Value), "unknown key, want identity or sha256")
			}
		}
		if !haveID {
			return nil, at(item, field+".identity", "missing")
		}
		if !haveSum {
			return nil, at(item, field+".sha256", "missing")
		}
		if prev, dup := byName[e.identity]; dup {
			return nil, at(item, field+".identity", "%s is also entry [%d]", e.identity, prev)
		}
		if prev, dup := bySum[e.sum]; dup {
			return nil, at(item, field+".sha256", "the same token as identity %s", prev)
		}
		byName[e.identity], bySum[e.sum] = i, e.identity
		set.entries = append(set.entries, e)
	}
	return set, nil
}

// TokensConfig configures a TokenFile.
type TokensConfig struct {
	// Path is the --tokens-file; "" has no file (only AdminToken, if any).
	Path string
	// AdminToken is the --admin-token-file's token in plaintext; "" for
	// none. It joins every version of the file as identity admin.
	AdminToken string
	// Interval between reads of Path; 0 is 2s.
	Interval time.Duration
	// Logger, or nil for none.
	Logger *slog.Logger
	// Registerer gets spillway_authn_tokens_reload_failures_total; nil
	// registers nothing.
	Registerer prometheus.Registerer
}

// TokenFile is the token set of --tokens-file, reloaded when the file
// changes: a file that fails to parse keeps the previous set, is logged
// and counted. Safe for concurrent use.
type TokenFile struct {
	cfg      TokensConfig // read-only after OpenTokens
	poll     *filepoll.Poller
	failures prometheus.Counter

	set atomic.Pointer[TokenSet]
}

// OpenTokens reads the tokens file (a bad one is an error) and returns a
// TokenFile; Run keeps it fresh.
func OpenTokens(cfg TokensConfig) (*TokenFile, error) {
	t := &TokenFile{cfg: cfg, failures: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spillway_authn_tokens_reload_failures_total",
		Help: "Reloads of --tokens-file that failed (unreadable or invalid) and kept the previous tokens.",
	})}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(t.failures); err != nil {
			return nil, fmt.Errorf("tokens metrics: %w", err)
		}
	}
	if cfg.Path == "" {
		set, err := (*TokenSet)(nil).WithAdmin(cfg.AdminToken)
		if err != nil {
			return nil, err
		}
		t.set.Store(set)
		return t, nil
	}
	b, err := os.ReadFile(cfg.Path)
	if err != nil {
		return nil, err
	}
	if err := t.apply(b); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t.poll = filepoll.New(filepoll.Config{
		Path: cfg.Path, Interval: cfg.Interval, Apply: t.apply,
		Failed: func(error) { t.failures.Inc() },
		Logger: log.With("file", "tokens"),
	})
	t.poll.Seen(b)
	return t, nil
}

func (t *TokenFile) apply(b []byte) error {
	set, err := ParseTokens(t.cfg.Path, b)
	if err != nil {
		return err
	}
	if set, err = set.WithAdmin(t.cfg.AdminToken); err != nil {
		return fmt.Errorf("%s: %w", t.cfg.Path, err)
	}
	t.set.Store(set)
	return nil
}

// Lookup implements TokenLookup with the current set.
func (t *TokenFile) Lookup(token string) (Identity, bool) { return t.set.Load().Lookup(token) }

// Len is the number of tokens in the current set.
func (t *TokenFile) Len() int { return t.set.Load().Len() }

// Set is the current token set.
func (t *TokenFile) Set() *TokenSet { return t.set.Load() }

// Check reads the file once and swaps in its tokens if it changed and
// parses; it reports whether it did. Run calls it every interval.
func (t *TokenFile) Check() bool {
	if t.poll == nil {
		return false
	}
	return t.poll.Check()
}

// Run reloads the file every interval until ctx ends; without a file it
// returns at once.
func (t *TokenFile) Run(ctx context.Context) {
	if t.poll == nil {
		return
	}
	t.poll.Run(ctx)
}
