package svcconfig

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func readAll(b *strings.Builder, resp *http.Response) (int64, error) { return io.Copy(b, resp.Body) }
