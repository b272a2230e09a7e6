# The test command of the README and of CI: `make test`.
# It installs the OS packages the tests need (scripts/test-deps.sh: dig and
# kdig for the DNS tests, etcd for the storage tests, chromium for the browser
# tests of the web page), then checks formatting and vet while the packages'
# tests run, then the end-to-end tests; every test with the race detector.

GO ?= go

.PHONY: test deps check unit packages e2e stress bench run

# gofmt and vet run beside the packages' tests (vet is mostly one core,
# the tests' builds fill the other), then the end-to-end tests alone.
test: deps
	@$(MAKE) --no-print-directory -j2 check packages
	@$(MAKE) --no-print-directory e2e

deps:
	./scripts/timed.sh "OS packages (scripts/test-deps.sh)" ./scripts/test-deps.sh

check:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	./scripts/timed.sh "go vet" $(GO) vet ./...

# The end-to-end tests drive real load (grpc-go clients, backends, dig) and
# check that the machine sustained it, so they run after the other packages
# rather than beside them on a small machine. Each group prints its time.
unit: packages e2e

packages:
	./scripts/timed.sh "packages (all but e2e), -race" $(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/e2e')

e2e:
	./scripts/timed.sh "e2e, -race" $(GO) test -race -count=1 -timeout 20m ./e2e/...

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
