package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// browserTimeout bounds everything one test does in the browser.
const browserTimeout = 3 * time.Minute

// browser is one headless Chromium (Debian's chromium, installed by
// scripts/test-deps.sh) driven over the DevTools protocol. Every console
// error, uncaught exception and browser log entry of level error is kept;
// the test's cleanup fails the test if there was any.
type browser struct {
	t   *testing.T
	ctx context.Context // the tab; bounded by browserTimeout

	mu       sync.Mutex
	problems []string // console errors, exceptions, log errors
}

// newBrowser starts chromium (a fresh profile in a temp dir) with one tab.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not installed (scripts/test-deps.sh installs it): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("lang", "en-US"),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // chromium refuses to run as root with its sandbox
	}
	ctx, cancelTimeout := context.WithTimeout(context.Background(), browserTimeout)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tctx, cancelTab := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	b := &browser{t: t, ctx: tctx}
	if err := chromedp.Listen(tctx, b.onEvent); err != nil { // starts the browser
		cancelTab()
		cancelAlloc()
		cancelTimeout()
		t.Fatalf("starting chromium: %v", err)
	}
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser process to exit
		cancelTimeout()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, p := range b.problems {
			t.Errorf("browser: %s", p)
		}
	})
	return b
}

func (b *browser) onEvent(ev any) {
	var p string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError && ev.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		var args []string
		for _, a := range ev.Args {
			if a.Value != nil {
				args = append(args, string(a.Value))
			} else {
				args = append(args, a.Description)
			}
		}
		p = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " "))
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		p = fmt.Sprintf("uncaught exception: %s", d.Text)
		if d.Exception != nil {
			p += " " + d.Exception.Description
		}
		p += fmt.Sprintf(" (%s:%d)", d.URL, d.LineNumber)
	case *cdplog.EventEntryAdded:
		if ev.Entry.Level != cdplog.EntryLevelError {
			return
		}
		p = fmt.Sprintf("log %s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
	case *page.EventJavascriptDialogOpening:
		// A window.confirm/alert: accept it, as a user clicking OK would
		// (not from the listener: it must not run commands).
		go chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		return
	default:
		return
	}
	b.mu.Lock()
	b.problems = append(b.problems, p)
	b.mu.Unlock()
}

// takeProblems returns the problems seen so far and forgets them.
func (b *browser) takeProblems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.problems
	b.problems = nil
	return p
}

// problemCount is how many console errors etc. were seen so far.
func (b *browser) problemCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.problems)
}

// do runs actions in the tab, failing the test on error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// waitFor polls the page with the JavaScript expression js (which must
// evaluate to a boolean) until it is true, for at most d.
func (b *browser) waitFor(what, js string, d time.Duration) time.Duration {
	b.t.Helper()
	start := time.Now()
	for {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](js))
		if err != nil {
			b.t.Fatalf("browser: waiting for %s: %v", what, err)
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > d {
			html, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ""`))
			b.t.Fatalf("browser: %s not seen within %v; page text:\n%s", what, d, html)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// hash is an action that moves the page to another route of its own
// (location.hash), without a reload, as a click on a link does.
func (b *browser) hash(h string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[any]("location.hash = "+jsString(h))(ctx, t)
		return err
	})
}

// eval evaluates js in the page.
func eval[T any](b *browser, what, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// screenshot writes the viewport to docs/screenshots/name.png when
// SPILLWAY_UPDATE_SCREENSHOTS=1, so that an ordinary run leaves the tree
// clean.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	if !updateScreenshots() {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("browser: screenshot %s: %v", name, err)
	}
	path := filepath.Join("..", "docs", "screenshots", name+".png")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("wrote %s (%d bytes)", path, len(png))
}

// updateScreenshots is whether SPILLWAY_UPDATE_SCREENSHOTS=1 asks the
// browser tests to rewrite docs/screenshots/.
func updateScreenshots() bool { return os.Getenv("SPILLWAY_UPDATE_SCREENSHOTS") == "1" }

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return fmt.Sprintf("%q", s) // Go's quoting is valid JS for the names used here
}
