package authz

import (
	"os"
	"strings"
	"testing"
)

// TestDocsPolicy: the policies in docs/security.md's "Policy" section
// parse, and its default policy is DefaultYAML.
func TestDocsPolicy(t *testing.T) {
	b, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## Policy")
	if !ok {
		t.Fatal(`docs/security.md has no "## Policy" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks []string
	for rest := section; ; {
		_, after, ok := strings.Cut(rest, "```yaml\n")
		if !ok {
			break
		}
		block, tail, _ := strings.Cut(after, "```")
		blocks = append(blocks, block)
		rest = tail
	}
	if len(blocks) != 2 {
		t.Fatalf("found %d yaml blocks in the Policy section, want 2", len(blocks))
	}
	for i, blk := range blocks {
		if _, err := Parse("docs", []byte(blk)); err != nil {
			t.Errorf("block %d: %v", i, err)
		}
	}
	if blocks[1] != DefaultYAML {
		t.Errorf("the documented default policy:\n%s\nis not DefaultYAML:\n%s", blocks[1], DefaultYAML)
	}
}
