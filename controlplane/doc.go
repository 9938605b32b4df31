// Package controlplane starts, health-checks and stops a real Kubernetes
// control plane (etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager) as child processes on loopback, with every
// certificate and kubeconfig they need written into one run directory.
//
// The binaries are the upstream ones built by `make controlplane` from the
// module in controlplane/upstream; this package never builds them.
package controlplane
