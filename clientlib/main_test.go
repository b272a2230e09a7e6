package clientlib_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// childEnv, when set, makes the test binary run as a child process of a
// test (see bootstrap_test.go) instead of running the tests: the xDS
// bootstrap is per process, so tests of it need processes of their own.
const childEnv = "CLIENTLIB_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	goleak.VerifyTestMain(m)
}
