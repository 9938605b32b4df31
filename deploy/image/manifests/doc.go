// Package manifests holds the test that renders the kustomize bases of
// deploy/shards and deploy/target and checks what they say. It lives in the
// deploy/image module so that kustomize's packages stay out of the root
// module's dependencies.
package manifests
