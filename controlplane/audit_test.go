package controlplane

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/yaml"
)

func TestAuditPolicy(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "logs", "nested", "audit.log")
	path, err := writeAuditPolicy(dir, logPath)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Dir(logPath)); err != nil || !st.IsDir() {
		t.Errorf("the audit log's directory was not made: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var policy auditv1.Policy
	if err := yaml.UnmarshalStrict(data, &policy); err != nil {
		t.Fatalf("policy does not parse as audit.k8s.io/v1 Policy: %v", err)
	}
	if policy.APIVersion != "audit.k8s.io/v1" || policy.Kind != "Policy" {
		t.Errorf("policy is %s %s", policy.APIVersion, policy.Kind)
	}
	if !slices.Equal(policy.OmitStages, []auditv1.Stage{auditv1.StageRequestReceived}) {
		t.Errorf("omitStages %v, want only RequestReceived", policy.OmitStages)
	}
	// One rule matching everything: no users, verbs, resources or
	// namespaces narrow it.
	if len(policy.Rules) != 1 {
		t.Fatalf("%d rules, want 1", len(policy.Rules))
	}
	r := policy.Rules[0]
	if r.Level != auditv1.LevelMetadata || len(r.Users)+len(r.UserGroups)+len(r.Verbs)+len(r.Resources)+len(r.Namespaces)+len(r.NonResourceURLs)+len(r.OmitStages) != 0 {
		t.Errorf("rule %+v, want Metadata for everything", r)
	}
}

func TestAPIServerAuditArgs(t *testing.T) {
	p := &pkiFiles{}
	without := (&ControlPlane{cfg: Config{ServiceCIDR: DefaultServiceCIDR}, pki: p}).apiserverComponent("http://127.0.0.1:2379", "")
	for _, a := range without.args([]int{6443}) {
		if strings.HasPrefix(a, "--audit-") {
			t.Errorf("audit flag %s without an audit log", a)
		}
	}
	cp := &ControlPlane{cfg: Config{ServiceCIDR: DefaultServiceCIDR, AuditLogPath: "/run/audit.log"}, pki: p}
	args := cp.apiserverComponent("http://127.0.0.1:2379", "/run/policy.yaml").args([]int{6443})
	for _, want := range []string{
		"--audit-log-path=/run/audit.log", "--audit-policy-file=/run/policy.yaml", "--audit-log-format=json",
		"--audit-log-mode=blocking", "--audit-log-truncate-enabled=false", "--audit-log-maxsize=0",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("apiserver args lack %s: %v", want, args)
		}
	}
}

func TestAuditLogPathMadeAbsolute(t *testing.T) {
	cfg, err := Config{BinDir: "/b", Dir: "/d", AuditLogPath: "audit.log"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if cfg.AuditLogPath != filepath.Join(wd, "audit.log") {
		t.Errorf("AuditLogPath %q, want it absolute from %s", cfg.AuditLogPath, wd)
	}
}
