package e2e

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway/spillway/clientlib/clientcreds"
	"github.com/spillway/spillway/security/tlsconfig"
)

// TestSecurityDocSetup runs the openssl block of docs/security.md ("A
// worked setup") in an empty directory, starts spillway on mTLS with the
// files it made, and reads /readyz with the client certificate: the
// documented commands work as written.
func TestSecurityDocSetup(t *testing.T) {
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- tls-setup -->\n```sh\n")
	if !ok {
		t.Fatal("docs/security.md: no <!-- tls-setup --> sh block")
	}
	script, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("docs/security.md: the tls-setup block does not end")
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the tls-setup commands failed: %v\n%s", err, out)
	}
	for _, want := range []string{"server.crt: OK", "payments.crt: OK", "URI:spiffe://example.org/ns/prod/sa/payments"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("tls-setup output lacks %q:\n%s", want, out)
		}
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	r, err := tlsconfig.New(tlsconfig.Config{Files: tlsconfig.Files{Cert: p("payments.crt"), Key: p("payments.key")}})
	if err != nil {
		t.Fatal(err)
	}
	if uris := r.Certificate().Leaf.URIs; len(uris) != 1 || uris[0].String() != "spiffe://example.org/ns/prod/sa/payments" {
		t.Errorf("payments.crt URI SANs = %v", uris)
	}

	s := newServer(t, "--tls-cert", p("server.crt"), "--tls-key", p("server.key"), "--client-ca", p("ca.crt"))
	s.tls = &e2eTLS{client: tlsconfig.Files{CA: p("ca.crt"), Cert: p("payments.crt"), Key: p("payments.key")}}
	s.start() // waits for /readyz over mTLS with payments.crt
	if !strings.Contains(s.logs.String(), "client_auth=require") {
		t.Errorf("server logs lack client_auth=require:\n%s", s.logs)
	}
	noCert, err := clientcreds.Config{CA: p("ca.crt")}.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.CloseIdleConnections()
	if resp, err := noCert.Get(s.url("/readyz")); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Errorf("GET /readyz without a client certificate = %d %s, want a refused handshake", resp.StatusCode, b)
	}
}

// The tests below keep README.md and docs/ true to the code: every
// package path they name exists, and every flag they give spillway,
// spillwayctl or spillway-sim is one that binary defines. They read the
// files as text; a doc that names a thing the code no longer has fails
// here, not in a newcomer's terminal.

// topDirs are the top-level folders of Go packages: a token starting with
// one of them and a slash is a package (or file) path. deploy/, docs/ and
// scripts/ are not checked.
var topDirs = []string{"registry", "resolver", "xds", "load", "weights", "replica", "admin", "migration", "clientlib", "security", "internal", "cmd", "e2e"}

// pathRE finds a token that starts with one of topDirs and a slash, as
// in `registry/systemstore`, ./registry/systemstore/..., ../registry/static/doc.go
// (a link from docs/), registry/systemstore.KV, replica/{ownership,exchange}
// or github.com/spillway/spillway/replica/exchange. The character before
// the token must not be one a longer path or a URL would have there, so
// /v1/registry/... or https://host/xds/... are not taken for repo paths. A
// comma belongs to the token only inside braces.
var pathRE = regexp.MustCompile(`(?:^|[^\w./:-])((?:\.\.?/)*(?:github\.com/spillway/spillway/)?(?:` + strings.Join(topDirs, "|") + `)/(?:[\w./*-]|\{[\w./,*-]*\})*)`)

// docFiles are README.md and every Markdown file under docs/, as paths
// relative to the repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir("../docs", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel("..", path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %v; is the test run from e2e/?", files)
	}
	return files
}

// expandBraces turns registry/systemstore/{boltstore,etcdstore} into one
// path per alternative (the first brace group; nested groups recurse).
func expandBraces(p string) []string {
	open := strings.IndexByte(p, '{')
	if open < 0 {
		return []string{p}
	}
	end := strings.IndexByte(p[open:], '}')
	if end < 0 {
		return []string{p[:open]}
	}
	var out []string
	for alt := range strings.SplitSeq(p[open+1:open+end], ",") {
		out = append(out, expandBraces(p[:open]+alt+p[open+end+1:])...)
	}
	return out
}

// cleanPath strips what a sentence or a command puts around a path: a
// leading ./ or ../ (docs/ links are relative to docs/, which sits at the
// root, so either way the rest is repo-relative), the module prefix, a
// trailing /... (every package under) and trailing punctuation.
func cleanPath(p string) string {
	for {
		q := strings.TrimPrefix(strings.TrimPrefix(p, "../"), "./")
		if q == p {
			break
		}
		p = q
	}
	p = strings.TrimPrefix(p, "github.com/spillway/spillway/")
	for {
		q := strings.TrimRight(p, ".,:;")
		q = strings.TrimSuffix(q, "/...")
		q = strings.TrimSuffix(q, "/")
		if q == p {
			return p
		}
		p = q
	}
}

// repoHas reports whether the repo-relative path p names a directory or a
// file, or a package followed by one of its identifiers
// (registry/systemstore.KV, replica/meshweights.Selector). A path with a
// glob (cmd/spillway/*.go) must match something.
func repoHas(p string) bool {
	if strings.ContainsAny(p, "*") {
		m, _ := filepath.Glob(filepath.Join("..", p))
		return len(m) > 0
	}
	if _, err := os.Stat(filepath.Join("..", p)); err == nil {
		return true
	}
	dir, last := filepath.Split(p)
	if pkg, ident, ok := strings.Cut(last, "."); ok && pkg != "" && ident != "" {
		if st, err := os.Stat(filepath.Join("..", dir, pkg)); err == nil && st.IsDir() {
			return true
		}
	}
	return false
}

// TestDocsPackagePaths: every repo path README.md and docs/ name, in
// backticks, in code blocks, in links or in plain text, exists. A package
// that moved (registry/durable is registry/systemstore) fails here until
// the docs follow.
func TestDocsPackagePaths(t *testing.T) {
	checked := 0
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(filepath.Join("..", file))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(b), "\n") {
			for _, m := range pathRE.FindAllStringSubmatchIndex(line, -1) {
				if strings.HasPrefix(line[m[3]:], "<") {
					continue // a store key such as weights/plan/<service>, not a path
				}
				for _, p := range expandBraces(line[m[2]:m[3]]) {
					p = cleanPath(p)
					checked++
					if !repoHas(p) {
						t.Errorf("%s:%d: names %s, which is not a directory or file of the repo (moved or renamed? see go list ./...)", file, n+1, p)
					}
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d paths in the docs; is pathRE still finding them?", checked)
	}
}

// Flags.
//
// Which flags a binary defines comes from two sources, and a flag counts
// as defined when either has it:
//
//   - The source: every non-test .go file under cmd/<binary>/ is parsed
//     with go/parser, and the name argument of each flag definition call
//     (fs.String("name", def, usage), fs.StringVar(&v, "name", def,
//     usage), fs.Var, fs.Func, fs.BoolFunc, fs.TextVar and the other
//     typed forms, on any FlagSet) is taken when it is a string literal
//     or a string constant of the package. This sees every subcommand's
//     flags (spillway demo, spillway store copy, each spillwayctl
//     command) without a list of subcommands, and flags no help text
//     prints. It needs no build, so spillway-sim is covered too.
//   - The binaries: the spillway and spillwayctl that TestMain built are
//     run with --help (spillwayctl also with COMMAND -h for each command
//     its usage lists), and every flag they print is taken. This catches
//     a flag whose name the parse cannot see (computed, or defined by a
//     helper outside cmd/).
//
// A flag is checked when it follows one of the three commands on a
// command line: in a fenced code block, or in an inline code span, a
// command starts a line or follows $, $(, a pipe, ;, && or an assignment,
// as "spillwayctl", "./spillwayctl", "bin/spillway" or "go run
// ./cmd/spillway-sim", and its flags are the --name tokens up to the end
// of that command (a separator, a comment, a closing parenthesis).
// Flags of other commands on the same line (go test -run, dig, etcd,
// dnsperf, xdsbench) are not checked. In a table whose header has a
// "flag" column, the --name tokens of that column must be defined by one
// of the three binaries: a table rarely says which binary it documents,
// and a flag no binary defines is the mistake that matters.
//
// docs/benchmarks-history.md is the log of past runs and keeps their
// command lines as they were run, even once a flag is renamed or removed:
// its flags are not checked (its paths are).

// binaries are the commands whose flags the docs are checked against.
var binaries = []string{"spillway", "spillwayctl", "spillway-sim"}

// alsoAccepted are flags a binary accepts whatever the parse finds:
// -h and --help, which package flag handles, and spillwayctl's --http
// (the HTTP address of the commands on the HTTP API), which stays
// accepted now that --server alone reaches every API.
var alsoAccepted = map[string][]string{
	"spillway":     {"h", "help"},
	"spillwayctl":  {"h", "help", "http"},
	"spillway-sim": {"h", "help"},
}

// flagDefiners are the flag.FlagSet methods that define a flag, and the
// index of the name among their arguments.
var flagDefiners = map[string]int{
	"String": 0, "Bool": 0, "Int": 0, "Int64": 0, "Uint": 0, "Uint64": 0, "Float64": 0, "Duration": 0, "Func": 0, "BoolFunc": 0,
	"StringVar": 1, "BoolVar": 1, "IntVar": 1, "Int64Var": 1, "UintVar": 1, "Uint64Var": 1, "Float64Var": 1, "DurationVar": 1, "Var": 1, "TextVar": 1,
}

var flagNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// sourceFlags parses cmd/<name>/ (subdirectories included, tests not) and
// returns the names of the flags it defines.
func sourceFlags(t *testing.T, name string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(filepath.Join("../cmd", name), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// String constants, so fs.String(someFlag, ...) resolves too.
	consts := map[string]string{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if d, ok := n.(*ast.GenDecl); ok && d.Tok == token.CONST {
				for _, s := range d.Specs {
					vs := s.(*ast.ValueSpec)
					for i, id := range vs.Names {
						if i < len(vs.Values) {
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								if v, err := strconv.Unquote(lit.Value); err == nil {
									consts[id.Name] = v
								}
							}
						}
					}
				}
			}
			return true
		})
	}
	flags := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			i, ok := flagDefiners[sel.Sel.Name]
			// A definition has a name, a default or value and a usage
			// string after it (fs.Func: name, usage, fn).
			if !ok || len(call.Args) < i+2 {
				return true
			}
			var v string
			switch a := call.Args[i].(type) {
			case *ast.BasicLit:
				if a.Kind == token.STRING {
					v, _ = strconv.Unquote(a.Value)
				}
			case *ast.Ident:
				v = consts[a.Name]
			}
			if flagNameRE.MatchString(v) {
				flags[v] = true
			}
			return true
		})
	}
	return flags
}

// helpFlagRE matches a flag line of PrintDefaults ("  -name type") or of
// spillwayctl's help ("  --name type").
var helpFlagRE = regexp.MustCompile(`(?m)^  --?([a-z0-9][a-z0-9-]*)\b`)

// helpFlags runs a built binary with args (a help request) and returns the
// flags its output lists.
func helpFlags(t *testing.T, path string, args ...string) (map[string]bool, string) {
	t.Helper()
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Errorf("%s %s: %v\n%s", filepath.Base(path), strings.Join(args, " "), err, out)
	}
	flags := map[string]bool{}
	for _, m := range helpFlagRE.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	return flags, string(out)
}

// definedFlags returns, per binary, the flags it defines (see above).
func definedFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	// The parse must find a flag each binary is known for, or it has
	// stopped seeing their definitions.
	known := map[string]string{"spillway": "dns-addr", "spillwayctl": "server", "spillway-sim": "csv"}
	defined := map[string]map[string]bool{}
	for _, b := range binaries {
		defined[b] = sourceFlags(t, b)
		if !defined[b][known[b]] {
			t.Errorf("the parse of cmd/%s does not find --%s: has the way it defines flags changed?", b, known[b])
		}
		for _, f := range alsoAccepted[b] {
			defined[b][f] = true
		}
	}
	add := func(b string, flags map[string]bool) {
		for f := range flags {
			if !defined[b][f] {
				t.Logf("%s --%s: printed by its help but not found in cmd/%s by the parse", b, f, b)
			}
			defined[b][f] = true
		}
	}
	f, _ := helpFlags(t, bin.spillway, "--help")
	add("spillway", f)
	f, usage := helpFlags(t, bin.spillwayctl, "-h")
	add("spillwayctl", f)
	_, cmds, _ := strings.Cut(usage, "Commands:\n")
	cmds, _, _ = strings.Cut(cmds, "\n\n")
	// One process per command, a few at a time: each is a -race binary
	// that takes a moment to start, and one after another they took
	// most of this test's time.
	var names []string
	for line := range strings.SplitSeq(cmds, "\n") {
		if fields := strings.Fields(line); len(fields) > 0 {
			names = append(names, fields[0])
		}
	}
	helps := make([]map[string]bool, len(names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, name := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			helps[i], _ = helpFlags(t, bin.spillwayctl, name, "-h")
		})
	}
	wg.Wait()
	for _, f := range helps {
		add("spillwayctl", f)
	}
	return defined
}

// flagUse is one --flag a doc gives a binary.
type flagUse struct {
	line int
	bin  string // "" in a flag table: any of binaries
	flag string
}

var (
	longFlagRE = regexp.MustCompile(`^--([a-z0-9][a-z0-9-]*)`)
	envAssign  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
)

// commandFlags returns the flags given to one of binaries on the command
// line s (a code block line, continuations joined, or a code span).
func commandFlags(s string) (uses [][2]string) {
	fields := strings.Fields(s)
	start, cur := true, ""
	for i := 0; i < len(fields); i++ {
		tok := fields[i]
		if k := strings.LastIndex(tok, "$("); k >= 0 { // LEASE=$(./spillwayctl ...
			tok, start, cur = tok[k+2:], true, ""
		}
		switch {
		case tok == "" || tok == "$" || tok == "sudo" || tok == "exec" || tok == "time" || tok == "env" || tok == "nohup":
			continue
		case strings.HasPrefix(tok, "#"):
			return uses
		case tok == "|" || tok == "||" || tok == "&&" || tok == ";" || tok == "&" || tok == "|&":
			start, cur = true, ""
			continue
		}
		if start {
			if envAssign.MatchString(tok) { // GRPC_XDS_BOOTSTRAP=... ./client
				continue
			}
			start, cur = false, ""
			name := path.Base(strings.TrimLeft(tok, `("'`))
			if slices.Contains(binaries, name) {
				cur = name
			} else if name == "go" && i+1 < len(fields) && fields[i+1] == "run" {
				for i += 2; i < len(fields) && strings.HasPrefix(fields[i], "-"); i++ {
				}
				if i < len(fields) {
					pkg, _, _ := strings.Cut(fields[i], "@")
					if b := path.Base(pkg); strings.Contains(pkg, "cmd/") && slices.Contains(binaries, b) {
						cur = b
					}
				}
			}
		} else if cur != "" {
			if tok == "--" { // the end of the flags
				cur = ""
			} else if m := longFlagRE.FindStringSubmatch(strings.TrimLeft(tok, "[")); m != nil {
				uses = append(uses, [2]string{cur, m[1]})
			}
		}
		if strings.HasSuffix(tok, ";") {
			start, cur = true, ""
		} else if strings.HasSuffix(tok, ")") && cur != "" {
			cur = ""
		}
	}
	return uses
}

// tableRuleRE is the row under a table's header: |---|:--|.
var tableRuleRE = regexp.MustCompile(`^\|[-:| ]*-[-:| ]*$`)

// codeSpanRE is an inline code span; it may wrap onto the next line.
var codeSpanRE = regexp.MustCompile("`([^`]+)`")

// splitRow splits a table row into cells, leaving | inside code spans.
func splitRow(row string) []string {
	var cells []string
	var b strings.Builder
	inCode := false
	for _, r := range strings.TrimSpace(row) {
		switch {
		case r == '`':
			inCode = !inCode
		case r == '|' && !inCode:
			cells = append(cells, b.String())
			b.Reset()
			continue
		}
		b.WriteRune(r)
	}
	cells = append(cells, b.String())
	if len(cells) > 2 { // drop what is outside the leading and trailing |
		cells = cells[1 : len(cells)-1]
	}
	return cells
}

// docFlags returns the flags a Markdown text gives the binaries.
func docFlags(text string) []flagUse {
	var uses []flagUse
	lines := strings.Split(text, "\n")
	fence := ""
	flagCol := -1 // the "flag" column of the table being read
	prose := []string{}
	proseStart := 0
	flushProse := func() {
		joined := strings.Join(prose, "\n")
		for _, m := range codeSpanRE.FindAllStringSubmatchIndex(joined, -1) {
			span := joined[m[2]:m[3]]
			if strings.Contains(span, "\n\n") {
				continue
			}
			n := proseStart + strings.Count(joined[:m[2]], "\n")
			for _, u := range commandFlags(span) {
				uses = append(uses, flagUse{line: n + 1, bin: u[0], flag: u[1]})
			}
		}
		prose, proseStart = prose[:0], 0
	}
	for n := 0; n < len(lines); n++ {
		line := lines[n]
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
				continue
			}
			start := n
			for strings.HasSuffix(line, `\`) && n+1 < len(lines) {
				n++
				line = strings.TrimSuffix(line, `\`) + " " + lines[n]
			}
			for _, u := range commandFlags(line) {
				uses = append(uses, flagUse{line: start + 1, bin: u[0], flag: u[1]})
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			flushProse()
			fence = trimmed[:3]
			continue
		}
		if strings.HasPrefix(trimmed, "|") {
			cells := splitRow(trimmed)
			if n+1 < len(lines) && tableRuleRE.MatchString(strings.TrimSpace(lines[n+1])) {
				flagCol = -1 // a header row
				for i, c := range cells {
					if h := strings.ToLower(strings.TrimSpace(c)); h == "flag" || h == "flags" {
						flagCol = i
					}
				}
			} else if flagCol >= 0 && flagCol < len(cells) {
				for _, m := range codeSpanRE.FindAllStringSubmatch(cells[flagCol], -1) {
					if f := longFlagRE.FindStringSubmatch(strings.TrimSpace(m[1])); f != nil {
						uses = append(uses, flagUse{line: n + 1, flag: f[1]})
					}
				}
			}
		} else {
			flagCol = -1
		}
		if len(prose) == 0 {
			proseStart = n
		}
		prose = append(prose, line)
	}
	flushProse()
	return uses
}

// TestDocsFlags: every flag README.md and docs/ give spillway, spillwayctl
// or spillway-sim on a command line or in a flag table is one it defines.
func TestDocsFlags(t *testing.T) {
	defined := definedFlags(t)
	checked := 0
	for _, file := range docFiles(t) {
		if file == "docs/benchmarks-history.md" {
			continue // the log of runs, flags as they were then
		}
		b, err := os.ReadFile(filepath.Join("..", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range docFlags(string(b)) {
			checked++
			if u.bin != "" {
				if !defined[u.bin][u.flag] {
					t.Errorf("%s:%d: %s --%s: %s defines no such flag (run it with --help)", file, u.line, u.bin, u.flag, u.bin)
				}
				continue
			}
			if !slices.ContainsFunc(binaries, func(b string) bool { return defined[b][u.flag] }) {
				t.Errorf("%s:%d: flag table names --%s, which none of %v defines", file, u.line, u.flag, binaries)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d flags in the docs; is docFlags still finding them?", checked)
	}
}

// TestDocsCheckerCatches: the two checks above see what they are meant
// to see, on made-up text, so a change to their parsing that makes them
// blind fails here rather than passing quietly.
func TestDocsCheckerCatches(t *testing.T) {
	text := strings.Join([]string{
		"Run `spillwayctl agent --server a,b --no-such` or",
		"`go run ./cmd/spillway --pprof`; `dig --not-ours`.",
		"",
		"```",
		"LEASE=$(./spillwayctl register --service p \\",
		"    --zone a) && go run ./cmd/spillway-sim --csv out.csv x.yaml | grep --color x",
		"etcd --auto-compaction-retention 1   # not ours",
		"spillway store copy --from bbolt://d --to etcd://e  # --commented",
		"```",
		"",
		"| flag | YAML key |",
		"|---|---|",
		"| `--dns-addr`, `--gone` | `dns_addr` |",
		"",
		"Not a table: `--loose` on its own.",
	}, "\n")
	var got []string
	for _, u := range docFlags(text) {
		got = append(got, fmt.Sprintf("%d:%s:%s", u.line, u.bin, u.flag))
	}
	want := []string{
		"1:spillwayctl:server", "1:spillwayctl:no-such", "2:spillway:pprof",
		"5:spillwayctl:service", "5:spillwayctl:zone", "5:spillway-sim:csv",
		"8:spillway:from", "8:spillway:to",
		"13::dns-addr", "13::gone",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("docFlags (-want +got):\n%s", diff)
	}

	var paths []string
	for _, m := range pathRE.FindAllStringSubmatch("see `registry/durable`, ./registry/systemstore/..., [x](../registry/static/doc.go), "+
		"registry/systemstore.KV, replica/{ownership,exchange}. and /v1/registry/x, https://h/xds/y, github.com/spillway/spillway/admin/ui "+
		"load/x,weights/pid", -1) {
		for _, p := range expandBraces(m[1]) {
			p = cleanPath(p)
			paths = append(paths, fmt.Sprintf("%s=%v", p, repoHas(p)))
		}
	}
	wantPaths := []string{
		"registry/durable=false", "registry/systemstore=true", "registry/static/doc.go=true",
		"registry/systemstore.KV=true", "replica/ownership=true", "replica/exchange=true", "admin/ui=true",
		"load/x=false", "weights/pid=true",
	}
	if diff := cmp.Diff(wantPaths, paths); diff != "" {
		t.Errorf("paths found (-want +got):\n%s", diff)
	}
}
