# The two commands of the quick start: `make run` and `make test`.
GO ?= go
BIN := bin/allot
# The version allot --version prints: the nearest tag and commit, from git.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: run sim-demo test test-deps web build bench bench-kube fmt generate fuzz faults soak

# cgo builds NVIDIA's NVML bindings; their header marks calls Allot does not make as
# deprecated, which only clutters the output.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

build:
	@./hack/cc.sh
	$(GO) build -ldflags "-X github.com/allot-dev/allot/internal/cli.Version=$(VERSION)" -o $(BIN) ./cmd/allot

# The main job: a real control plane with simulated GPU nodes, the scheduler and the demo
# queues, until Ctrl-C. The kubeconfig path is printed.
run: build
	./$(BIN) up --demo

# The same four teams in the simulator: borrowing, reclaim, fractions, in a few steps.
sim-demo: build
	./$(BIN) sim --scenario examples/demo.yaml

# The slowest test packages, slowest first (seconds on 2 cores: .ci/run's output).
SLOW_TESTS := ./kube/stack ./internal/cli ./kube/faults ./kube/bench ./kube/scheduler ./deploy ./trace ./kube/realnode

test: test-deps
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	@[ "$$(id -u)" = 0 ] || echo "REAL-NODE TESTS (kube/realnode, deploy/nodeinstall: the kubelet, containerd, runc) DO NOT RUN HERE: they need root; run make test as root to include them" >&2
	# kube/stack alone runs about 9 minutes on 2 cores (go test's default limit). Four
	# packages side by side (-p 4) took .ci/run from 24 min 56 s to 16 min 19 s here, but
	# under that load timing-bound tests failed once in four runs (the reclaim scenario's
	# victims counted before they were gone): one package per core until they wait on
	# events rather than time. The slowest packages are named first: go test starts
	# packages in the order given (./... adds the rest, once each), and kube/stack, last
	# of the slow ones in ./...'s order, otherwise ran alone on one core at the end.
	$(GO) test -timeout 30m $(SLOW_TESTS) ./...
	./hack/fuzz.sh 3s light

# Every fuzz target for minutes each, also any in packages that link kube-scheduler (their
# instrumented build takes about ten minutes the first time; make test skips those).
fuzz:
	./hack/fuzz.sh $${FUZZTIME:-2m} all

# The fault-injection test (kube/faults) for ten minutes instead of make test's one:
# replicas killed and paused, nodes lost and the API server slowed under churn;
# FAULTS_TIME=30m for longer. Its last line is the FAULTS summary.
faults:
	FAULTS_TIME=$${FAULTS_TIME:-10m} $(GO) test ./kube/faults -run TestFaults -count=1 -timeout 0 -v 2>&1 | grep --line-buffered -v '^[IWE][0-9]\{4\} ' | tee /dev/stderr | grep 'FAULTS PASS' >/dev/null

# The long run (kube/soak, not in make test): the scheduler binary for 30 minutes on 250
# simulated nodes under churn; its heap, goroutines and the API server's watches each
# minute as a table, a plot (docs/soak.svg) and a verdict on the heap's trend.
# SOAK_TIME, SOAK_NODES, SOAK_EVERY and SOAK_PLOT change it.
soak:
	SOAK_PLOT=$${SOAK_PLOT:-$(CURDIR)/docs/soak.svg} $(GO) test -tags soak ./kube/soak -run TestSoak -count=1 -timeout 0 -v 2>&1 | grep --line-buffered -v '^[IWE][0-9]\{4\} ' | tee /dev/stderr | grep 'SOAK PASS' >/dev/null

# Chromium for the dashboard's browser tests, Node.js and npm for the check that web/dist is
# built from web/src (installed with apt-get when missing).
test-deps:
	./hack/cc.sh
	./hack/test-deps.sh

# Rebuild the dashboard's front end into web/dist (committed; the binary embeds it) from
# the npm registry.
web:
	cd web && npm ci --no-audit --no-fund && npm run build

bench:
	$(GO) test ./engine -run '^$$' -bench . -benchmem -benchtime 5x -cpu 1

# Throughput beside upstream kube-scheduler, built from the k8s.io/kubernetes module of
# go.mod: each on a fresh embedded API server of 250 simulated 8-GPU nodes, 2,000 one-GPU
# pods, in turn, the order alternating (ROUNDS=3 for three rounds each), beside the ceiling
# (the bench binding the pods itself, deciding nothing), with each one's part of it in a
# table. MODE=stream (default), backlog, or both (stream, then backlog, in one sitting).
bench-kube: build
	$(GO) build -o bin/kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
	./$(BIN) bench --against bin/kube-scheduler --mode $${MODE:-stream} --nodes $${NODES:-250} --pods $${PODS:-2000} --rounds $${ROUNDS:-2}

fmt:
	gofmt -w $$(git ls-files '*.go')

# Regenerate deepcopy functions and CRD manifests from api/ (controller-gen from the Go
# module proxy, pinned), and the typed clientset, listers and informers of Allot's own
# resources under kube/client (k8s.io/code-generator at the version of k8s.io/api).
CODEGEN := k8s.io/code-generator/cmd
CODEGEN_VERSION := v0.35.4
CLIENT_PKG := github.com/allot-dev/allot/kube/client
generate:
	$(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.20.0 object paths=./api/...
	$(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.20.0 crd paths=./api/... output:crd:dir=./deploy/crds
	cp deploy/crds/*.yaml deploy/helm/allot/crds/
	rm -rf kube/client/clientset kube/client/listers kube/client/informers
	$(GO) run $(CODEGEN)/client-gen@$(CODEGEN_VERSION) --go-header-file hack/boilerplate.go.txt \
		--input-base github.com/allot-dev/allot --input api/v1alpha1 --clientset-name versioned \
		--output-dir kube/client/clientset --output-pkg $(CLIENT_PKG)/clientset
	$(GO) run $(CODEGEN)/lister-gen@$(CODEGEN_VERSION) --go-header-file hack/boilerplate.go.txt \
		--output-dir kube/client/listers --output-pkg $(CLIENT_PKG)/listers ./api/v1alpha1
	$(GO) run $(CODEGEN)/informer-gen@$(CODEGEN_VERSION) --go-header-file hack/boilerplate.go.txt \
		--versioned-clientset-package $(CLIENT_PKG)/clientset/versioned --listers-package $(CLIENT_PKG)/listers \
		--output-dir kube/client/informers --output-pkg $(CLIENT_PKG)/informers ./api/v1alpha1
