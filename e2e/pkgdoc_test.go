package e2e

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs: every package in the module has exactly one package
// comment, so a newcomer finds each package's purpose in one place.
func TestPackageDocs(t *testing.T) {
	docs := map[string][]string{} // dir -> files with a package comment
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != ".." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "spillway-data") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if _, ok := docs[dir]; !ok {
			docs[dir] = nil
		}
		if f.Doc != nil {
			docs[dir] = append(docs[dir], filepath.Base(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 5 {
		t.Fatalf("found only %d packages; is the walk rooted at the module?", len(docs))
	}
	for dir, files := range docs {
		if len(files) != 1 {
			t.Errorf("package %s: %d files with a package comment %v, want exactly 1", dir, len(files), files)
		}
	}
	if _, err := os.Stat("../go.mod"); err != nil {
		t.Errorf("module root not found: %v", err)
	}
}
