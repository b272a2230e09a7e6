# The test command of the README and of CI: `make test`.
# It installs the OS packages the tests need (scripts/test-deps.sh: dig and
# kdig for the DNS tests, etcd for the storage tests, chromium for the browser
# tests of the web page), then checks formatting
# and vet, then runs every test with the race detector.

GO ?= go

.PHONY: test deps check unit bench run

test: deps check unit

deps:
	./scripts/test-deps.sh

check:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# The end-to-end tests drive real load (grpc-go clients, backends, dig) and
# check that the machine sustained it, so they run after the other packages
# rather than beside them on a small machine.
unit:
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/e2e')
	$(GO) test -race -count=1 -timeout 20m ./e2e/...

# Benchmarks behind docs/benchmarks.md (the dnsperf comparison is
# e2e/bench/dnsperf.sh).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./registry/... ./resolver/...

run:
	$(GO) run ./cmd/spillway
