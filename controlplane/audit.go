package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
)

// auditPolicy logs every request at Metadata level: user, user agent,
// source IPs, verb, request URI (so a watch's selectors), object reference
// and response code, without request or response bodies, which would
// multiply the log's size by the objects' and say nothing about who costs
// what. RequestReceived is omitted: every request also has a
// ResponseComplete event (and a watch a ResponseStarted one), so it would
// only double the log.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
  - RequestReceived
rules:
  - level: Metadata
`

// auditPolicyFile is the policy's name in the run directory.
const auditPolicyFile = "audit-policy.yaml"

// writeAuditPolicy writes the policy into dir and makes the log's
// directory, returning the policy's path.
func writeAuditPolicy(dir, logPath string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return "", fmt.Errorf("controlplane: create the audit log's directory: %w", err)
	}
	path := filepath.Join(dir, auditPolicyFile)
	if err := os.WriteFile(path, []byte(auditPolicy), 0o644); err != nil {
		return "", fmt.Errorf("controlplane: write audit policy %s: %w", path, err)
	}
	return path, nil
}

// auditArgs are the API server's flags for an audit log at logPath under
// policyPath, chosen so that no event is lost or cut.
func auditArgs(logPath, policyPath string) []string {
	return []string{
		"--audit-log-path=" + logPath,
		"--audit-policy-file=" + policyPath,
		"--audit-log-format=json",
		"--audit-log-version=audit.k8s.io/v1",
		// Blocking (the log backend's default, stated here): each event is
		// written before the response goes out. The batch mode buffers
		// events and drops them when its buffer is full, which a burst of
		// thousands of agents can fill.
		"--audit-log-mode=blocking",
		// Truncation would cut large events; at Metadata level none is
		// large, but a truncated event loses its annotations silently.
		"--audit-log-truncate-enabled=false",
		// No rotation: one file holds the whole run, so a reader need not
		// find and order the rotated ones. 0 is the default, stated here.
		"--audit-log-maxsize=0",
	}
}
