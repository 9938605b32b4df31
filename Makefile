# fleetlet: see README.md. `make run` and `make test` are the two commands a
# newcomer needs; both build what they need first.

GO        ?= go
BIN       := $(CURDIR)/bin
UPSTREAM  := controlplane/upstream
# The control plane binaries, built from the pinned upstream module.
CP_BINS   := $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kube-scheduler $(BIN)/kube-controller-manager $(BIN)/kubectl
PROFILE   ?= quickstart
# The pinned Kubernetes version, stamped into the binaries as the release
# build does (hack/lib/version.sh), so that /version, the hollow kubelets'
# nodeInfo and version-skew checks read v1.37.x rather than v0.0.0-master.
K8S_VERSION := $(shell awk '$$1 == "k8s.io/kubernetes" { print $$2; exit }' $(UPSTREAM)/go.mod)
K8S_MINOR   := $(word 2,$(subst ., ,$(K8S_VERSION)))
K8S_LDFLAGS := $(foreach pkg,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(pkg).gitVersion=$(K8S_VERSION) -X $(pkg).gitMajor=1 -X $(pkg).gitMinor=$(K8S_MINOR) \
	-X $(pkg).gitTreeState=clean -X $(pkg).buildDate=1970-01-01T00:00:00Z)

.PHONY: all build controlplane kubemark metrics-server image run test test-unit test-integration bench lint clean

all: build controlplane

build: $(BIN)/fleetlet

# Go decides what is stale, so the target always runs and is a no-op when
# nothing changed.
.PHONY: $(BIN)/fleetlet
$(BIN)/fleetlet:
	$(GO) build -o $@ ./cmd/fleetlet

# Built once: a cold build of Kubernetes takes many minutes on 2 cores. The
# binaries are rebuilt only when the pinned module changes.
controlplane: $(CP_BINS)

$(CP_BINS) &: $(UPSTREAM)/go.mod $(UPSTREAM)/go.sum $(UPSTREAM)/etcd/main.go
	@mkdir -p $(BIN)
	@echo "Building the control plane from k8s.io/kubernetes (the first build takes a while)..."
	cd $(UPSTREAM) && $(GO) build -ldflags '$(K8S_LDFLAGS)' -o $(BIN)/ \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-scheduler \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kubectl \
		./etcd
	@touch $(CP_BINS)

# kubemark runs the real kubelet and kube-proxy code on fake runtimes, one
# process per node: the integration tests hold fleetlet's agents against it.
# Built from the same pinned module as the control plane.
kubemark: $(BIN)/kubemark

$(BIN)/kubemark: $(UPSTREAM)/go.mod $(UPSTREAM)/go.sum
	@mkdir -p $(BIN)
	cd $(UPSTREAM) && $(GO) build -ldflags '$(K8S_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/kubemark

# metrics-server reads the kubelets' /metrics/resource and serves `kubectl
# top`; a test runs it against a fleet. Its own module: it pins older
# Kubernetes modules than the control plane.
metrics-server: $(BIN)/metrics-server

$(BIN)/metrics-server: controlplane/metrics-server/go.mod controlplane/metrics-server/go.sum
	@mkdir -p $(BIN)
	cd controlplane/metrics-server && $(GO) build -o $@ sigs.k8s.io/metrics-server/cmd/metrics-server

# The fleet shard's container image, for the StatefulSet in deploy/shards
# (deploy/README.md): built without Docker or a registry by deploy/image (its
# own module), written as `docker save` writes one (an OCI layout with a
# manifest.json) for `kind load image-archive`, `ctr images import` or
# `docker load`, tagged with the version and :latest.
# Reproducible: a static binary without build ID, every time in the image the
# commit's, so that one commit gives one digest. IMAGE_ARCH=arm64 for arm64.
IMAGE_REPO     ?= fleetlet.io/fleetlet
IMAGE_VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE_ARCH     ?= $(shell $(GO) env GOARCH)
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
IMAGE_EPOCH    ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

image:
	@mkdir -p $(BIN)/image
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags '-s -w -buildid=' -o $(BIN)/image/fleetlet ./cmd/fleetlet
	cd deploy/image && SOURCE_DATE_EPOCH=$(IMAGE_EPOCH) $(GO) run ./cmd/fleetlet-image \
		--binary $(BIN)/image/fleetlet --out $(BIN)/fleetlet-image.tar \
		--tag $(IMAGE_REPO):$(IMAGE_VERSION) --tag $(IMAGE_REPO):latest \
		--version '$(IMAGE_VERSION)' --revision '$(IMAGE_REVISION)'

run: build controlplane
	$(BIN)/fleetlet run --profile $(PROFILE)

# The whole suite: the unit tests, then the integration tests against the
# real control plane.
test: test-unit test-integration

# Seconds, with nothing built but the packages: no control plane, no binary.
test-unit:
	$(GO) test -race -timeout 20m ./...
	cd deploy/image && $(GO) test -race ./...

# The tests tagged `integration` start the real control plane from bin/
# (and the containerd test, as root, a real containerd); the unit tests of
# those packages run again with them. The image is built first, outside the
# tests' timeout: TestShardsAsStatefulSet runs it, and its first build (a
# static binary, another build configuration) takes minutes on 2 cores; the
# test's own `make image` is then a quick rebuild.
test-integration: build controlplane kubemark metrics-server image
	FLEETLET_BIN_DIR=$(BIN) $(GO) test -tags integration -timeout 45m ./cmd/... ./controlplane/... ./internal/...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./fakeruntime/... ./nodeagent/... ./reports/...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd deploy/image && $(GO) vet ./...

clean:
	rm -rf $(BIN) out
