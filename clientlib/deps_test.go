package clientlib_test

import (
	"go/build"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/spillway/spillway"

// clientAllowed are the module's packages that the client library may link
// besides its own (clientlib/...): leaves shared with the server and the
// generated registry API. The registry store, the DNS and xDS servers,
// the migration controller and its API are server packages.
var clientAllowed = []string{
	module + "/registry/names",
	module + "/migration/rollout",
	module + "/registry/registryv1",
	module + "/security/tlsconfig", // a leaf: certificate files reloaded, shared with the server
}

// TestNoServerPackages: the packages of clientlib/ (tests aside) link none
// of the server's packages: `go list -deps ./clientlib/...` shows only
// clientlib's own packages and the shared leaves. It walks the imports
// with go/build, so it fails as soon as someone imports a server package
// again, directly or through another package of the module.
func TestNoServerPackages(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	roots := []string{"clientlib", "clientlib/dnsresolver", "clientlib/wrr", "clientlib/heartbeat", "clientlib/utilization", "clientlib/clientcreds"}
	via := map[string]string{} // package -> the package that imports it
	var queue []string
	for _, r := range roots {
		via[module+"/"+r] = ""
		queue = append(queue, module+"/"+r)
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		pkg, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(p, module)), 0)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, imp := range pkg.Imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			if _, seen := via[imp]; !seen {
				via[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	if _, ok := via[module+"/clientlib/internal/dnsquery"]; !ok {
		t.Fatalf("the walk did not reach clientlib/internal/dnsquery; does it follow imports? saw %v", via)
	}
	for p, from := range via {
		if strings.HasPrefix(p, module+"/clientlib") || slices.Contains(clientAllowed, p) {
			continue
		}
		chain := []string{p}
		for f := from; f != ""; f = via[f] {
			chain = append(chain, f)
		}
		slices.Reverse(chain)
		t.Errorf("clientlib links server package %s (%s)", p, strings.Join(chain, " -> "))
	}
}
