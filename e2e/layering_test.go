package e2e

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/spillway/spillway/"

// layerRules are the one-way data flow of DESIGN.md and docs/architecture.md
// as import rules: a package under from imports nothing under any of not
// (directly; non-test files).
var layerRules = []struct {
	from string
	not  []string
}{
	// sources -> store -> (resolver, xds): the registry knows nothing of
	// what serves it or of load.
	{"registry", []string{"load", "weights", "xds", "resolver", "migration", "replica", "admin"}},
	// The migration library and API decide who uses xDS; they do not
	// reach into the xDS server.
	{"migration", []string{"xds", "weights", "load", "replica", "admin"}},
	// The weights are computed from load; they are served by xds, not the
	// other way round.
	{"load", []string{"xds", "weights", "replica", "admin"}},
	{"weights", []string{"xds", "replica", "admin"}},
	// The replica flow (sync, ownership, load exchange, mesh weights)
	// feeds the store and the weights; it does not reach into what
	// serves them.
	{"replica", []string{"xds", "resolver", "admin"}},
	// xds serves what it is given; the Admin API and page read xds.
	{"xds", []string{"admin", "replica"}},
	// The DNS server reads the store and the weights it is given.
	{"resolver", []string{"xds", "load"}},
}

// layerExceptions are imports that break a rule today, each named with
// the issue that removes it. The test fails when one disappears, so the
// list only shrinks.
var layerExceptions = map[string]string{
	// A test harness that assembles the registry API with a real load
	// table, as cmd/spillway does.
	"registry/registrytest -> load": "test harness: assembles registryapi with load.UtilizationTable",
}

// TestLayering: no package imports against the data flow, but for the
// listed exceptions. A newcomer can then follow data one way through the
// folders.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	under := func(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }
	seen := map[string]bool{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok {
			continue
		}
		for _, imp := range fields[1:] {
			imp, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			for _, r := range layerRules {
				if !under(pkg, r.from) || !slices.ContainsFunc(r.not, func(d string) bool { return under(imp, d) }) {
					continue
				}
				top, _, _ := strings.Cut(imp, "/")
				key := pkg + " -> " + top
				if why, ok := layerExceptions[key]; ok {
					seen[key] = true
					t.Logf("known exception %s (%s): imports %s", key, why, imp)
					continue
				}
				t.Errorf("%s imports %s: against the data flow (%s/... imports nothing of %v; docs/architecture.md)", pkg, imp, r.from, r.not)
			}
		}
	}
	for key, why := range layerExceptions {
		if !seen[key] {
			t.Errorf("layer exception %q (%s) no longer happens: remove it from layerExceptions", key, why)
		}
	}
}

// TestCtlLinksNoStoreDriver: spillwayctl talks to servers over their APIs;
// it links none of the system store's drivers (bbolt, etcd, Spanner).
func TestCtlLinksNoStoreDriver(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../cmd/spillwayctl").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for dep := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		for _, driver := range []string{"go.etcd.io/bbolt", "go.etcd.io/etcd/client", "cloud.google.com/go/spanner", module + "registry/systemstore/boltstore", module + "registry/systemstore/etcdstore", module + "registry/systemstore/spannerstore"} {
			if dep == driver || strings.HasPrefix(dep, driver+"/") {
				t.Errorf("spillwayctl links %s", dep)
			}
		}
	}
}
