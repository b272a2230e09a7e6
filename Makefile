# The test command of the README and of CI: `make test`.
# It installs the OS packages the tests need (scripts/test-deps.sh: dig and
# kdig for the DNS tests, etcd for the storage tests, chromium for the browser
# tests of the web page), checks formatting and vet, then runs every
# package's tests but the end-to-end ones, then the end-to-end tests; every
# test with the race detector.

GO ?= go
E2E_SHARDS ?= 2

.PHONY: test deps check warm unit packages e2e stress bench run

# vet runs with -race first: it compiles every dependency as the tests
# need it, so the tests' builds reuse it (two go commands side by side
# would compile the same packages twice). The plain build that the demo
# test's `go run` needs compiles at the lowest priority beside the tests,
# on the cores their waits leave idle.
test: deps
	@$(MAKE) --no-print-directory check
	@$(MAKE) --no-print-directory warm
	@$(MAKE) --no-print-directory packages
	@$(MAKE) --no-print-directory e2e

deps:
	./scripts/timed.sh "OS packages (scripts/test-deps.sh)" ./scripts/test-deps.sh

check:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	./scripts/timed.sh "go vet -race" $(GO) vet -race ./...

# Starts `go build ./cmd/spillway` (no -race, as `go run` builds it) in the
# background at nice 19 and returns; its output goes to the go build cache
# only.
warm:
	@nice -n 19 $(GO) build -o /dev/null ./cmd/spillway >/dev/null 2>&1 &

# The end-to-end tests drive real load (grpc-go clients, backends, dig) and
# run after the other packages rather than beside them on a small machine,
# as E2E_SHARDS test processes side by side (scripts/e2e.sh) so that their
# waits overlap, then the tests that measure load or time (marked "alone" in
# scripts/e2e-times.txt) in a process of their own. Each group prints its
# time.
unit: packages e2e

packages:
	./scripts/timed.sh "packages (all but e2e), -race" $(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/e2e$$')

e2e:
	./scripts/timed.sh "e2e, -race, $(E2E_SHARDS) processes, then the alone tests" ./scripts/e2e.sh -n $(E2E_SHARDS)

# A flake hunt: the tests N times with -race while one core is kept busy
# (scripts/stress.sh -h). make stress PKGS=./xds/ N=20 RUN=TestFanout
N ?= 5
PKGS ?= ./...
RUN ?=
stress:
	./scripts/stress.sh -n $(N) $(if $(RUN),-run '$(RUN)') $(PKGS)

# Benchmarks behind docs/benchmarks.md (the dnsperf comparison is
# e2e/bench/dnsperf.sh).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./registry/... ./resolver/...

run:
	$(GO) run ./cmd/spillway
