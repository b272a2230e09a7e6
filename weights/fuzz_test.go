package weights

import (
	"testing"
	"time"
)

// FuzzImportState: any bytes are refused with an error or imported; an
// imported state exports again and that export imports.
func FuzzImportState(f *testing.F) {
	p := pidPlanner(f, reportsAt(t0), webPID(true, nil))
	p.Cycle(t0)
	b, _ := p.ExportState("web")
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"zoneaware":{},"pid":null}`))
	f.Add([]byte(`{"zoneaware":{},"pid":{"endpoints":[{"id":"a-0","weight":1}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		q := pidPlanner(t, reportsAt(t0), webPID(true, nil))
		if err := q.ImportState("web", b); err != nil {
			return
		}
		q.Cycle(t0.Add(time.Second))
		out, ok := q.ExportState("web")
		if !ok {
			t.Fatal("imported state not exported")
		}
		if err := q.ImportState("web", out); err != nil {
			t.Fatalf("re-import of %s: %v", out, err)
		}
	})
}
