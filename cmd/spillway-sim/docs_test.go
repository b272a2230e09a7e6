package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const docsPath = "../../docs/simulator.md"

// fencedBlocks returns the fenced code blocks of a Markdown file: info
// string and lines.
func fencedBlocks(t *testing.T, path string) (infos []string, blocks [][]string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var in bool
	for line := range strings.SplitSeq(string(data), "\n") {
		switch {
		case !in && strings.HasPrefix(line, "```"):
			in = true
			infos = append(infos, strings.TrimPrefix(line, "```"))
			blocks = append(blocks, nil)
		case in && line == "```":
			in = false
		case in:
			blocks[len(blocks)-1] = append(blocks[len(blocks)-1], line)
		}
	}
	return infos, blocks
}

// TestDocsFigures runs every "$ go run ./cmd/spillway-sim ..." block of
// docs/simulator.md and compares its output with the block: the figures
// the page reports are the simulator's. A "..." line stands for rows left
// out.
func TestDocsFigures(t *testing.T) {
	const prefix = "$ go run ./cmd/spillway-sim "
	_, blocks := fencedBlocks(t, docsPath)
	ran := 0
	for _, b := range blocks {
		if len(b) == 0 || !strings.HasPrefix(b[0], prefix) {
			continue
		}
		ran++
		args := strings.Fields(strings.TrimPrefix(b[0], prefix))
		for i, a := range args {
			args[i] = strings.TrimPrefix(a, "cmd/spillway-sim/")
			if (a == "--csv" || a == "--svg") && i+1 < len(args) {
				args[i+1] = filepath.Join(t.TempDir(), filepath.Base(args[i+1]))
			}
		}
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Errorf("%s: exit %d: %s", b[0], code, stderr.String())
			continue
		}
		got := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
		// Each run of lines between "..." must appear, in order.
		pos := 0
		for chunk := range strings.SplitSeq(strings.Join(b[1:], "\n"), "\n...") {
			want := strings.Split(strings.Trim(chunk, "\n"), "\n")
			found := -1
			for i := pos; i+len(want) <= len(got); i++ {
				if slices.Equal(got[i:i+len(want)], want) {
					found = i
					break
				}
			}
			if found < 0 {
				t.Errorf("docs/simulator.md: the output of %q no longer has:\n%s\n\nit is:\n%s", b[0], strings.Join(want, "\n"), stdout.String())
				break
			}
			pos = found + len(want)
		}
	}
	if ran < 7 {
		t.Errorf("ran %d commands from %s, want at least 7", ran, docsPath)
	}
}

// TestDocsScenarioFormat: the scenario example of docs/simulator.md
// parses.
func TestDocsScenarioFormat(t *testing.T) {
	infos, blocks := fencedBlocks(t, docsPath)
	n := 0
	for i, b := range blocks {
		if infos[i] != "yaml" {
			continue
		}
		n++
		if _, err := ParseScenario([]byte(strings.Join(b, "\n"))); err != nil {
			t.Errorf("docs/simulator.md yaml block %d: %v", n, err)
		}
	}
	if n == 0 {
		t.Errorf("no yaml block in %s", docsPath)
	}
}
