package audit

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

const testLog = "testdata/audit.log"

// The testdata log holds one hollow node's requests from a real run (its
// kubelet as system:node:hollow-0, its kube-proxy as system:kube-proxy with
// user agent hollow-proxy), then hand-made ones: a kubelet's ConfigMap watch,
// an agent's (fleetlet-pool-0) watches and a refused watch, an agent's
// kube-proxy, an anonymous health check, and a last line cut short as when
// the API server is still writing it. Two watches of the real run have no
// ResponseComplete: still open when the log was read.
func readTestLog(t *testing.T) []Request {
	t.Helper()
	events, err := ReadFile(testLog)
	if err != nil {
		t.Fatal(err)
	}
	return Requests(events)
}

func TestRead(t *testing.T) {
	events, err := ReadFile(testLog)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 36 {
		t.Errorf("%d events, want 36 (the cut last line left out)", len(events))
	}
	for name, tt := range map[string]struct {
		in      string
		n       int
		wantErr string
	}{
		"empty":                  {"", 0, ""},
		"blank lines":            {"\n\n", 0, ""},
		"cut last line":          {`{"auditID":"a","stage":"ResponseComplete"}` + "\n" + `{"auditID":"b","sta`, 1, ""},
		"malformed line between": {`{"auditID":"a"}` + "\nnot json\n" + `{"auditID":"b"}` + "\n", 0, "line 2"},
	} {
		t.Run(name, func(t *testing.T) {
			events, err := Read(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(events) != tt.n {
				t.Errorf("%d events, %v; want %d", len(events), err, tt.n)
			}
		})
	}
	if _, err := ReadFile("testdata/missing.log"); err == nil {
		t.Error("no error for a missing file")
	}
}

func TestRequestsCountEachOnce(t *testing.T) {
	reqs := readTestLog(t)
	ids := map[string]int{}
	for _, r := range reqs {
		ids[r.AuditID]++
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("request %s counted %d times", id, n)
		}
	}
	// 36 events: 1 RequestReceived, and 7 watches with both ResponseStarted
	// and ResponseComplete, so 36-1-7 = 28 requests.
	if len(reqs) != 28 {
		t.Errorf("%d requests, want 28", len(reqs))
	}
	if !slices.IsSortedFunc(reqs, func(a, b Request) int { return a.Received.Compare(b.Received) }) {
		t.Error("requests not in the order received")
	}
	find := func(user, verb, resource string) Request {
		t.Helper()
		for _, r := range reqs {
			if r.User == user && r.Verb == verb && r.Resource == resource {
				return r
			}
		}
		t.Fatalf("no %s %s by %s", verb, resource, user)
		return Request{}
	}
	for _, tt := range []struct {
		user, verb, resource string
		open                 bool
		code                 int32
	}{
		{"system:node:hollow-0", "watch", "pods", false, 200},
		{"system:node:hollow-0", "watch", "services", true, 200}, // no ResponseComplete
		{"system:node:hollow-0", "create", "nodes", false, 201},  // its RequestReceived ignored
		{"system:node:fleetlet-pool-0", "watch", "secrets", false, 403},
		{"system:anonymous", "get", "", false, 200},
	} {
		r := find(tt.user, tt.verb, tt.resource)
		if r.Open != tt.open || r.Code != tt.code {
			t.Errorf("%s %s by %s: open %v, code %d; want %v, %d", tt.verb, tt.resource, tt.user, r.Open, r.Code, tt.open, tt.code)
		}
	}
	if r := find("system:anonymous", "get", ""); r.Path != "/livez" || CallOf(r).String() != "get /livez" {
		t.Errorf("non-resource request: path %q, call %q", r.Path, CallOf(r))
	}
}

func TestSummarizeByUser(t *testing.T) {
	sums, err := Summarize(readTestLog(t), ByUser)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(sums)); !slices.Equal(got, []string{"system:anonymous", "system:kube-proxy", "system:node:fleetlet-pool-0", "system:node:hollow-0"}) {
		t.Errorf("identities %v", got)
	}
	calls := map[string]int{}
	for c, n := range sums["system:node:hollow-0"].Calls {
		calls[c.String()] = n
	}
	want := map[string]int{
		"create nodes": 1, "get nodes": 1, "patch nodes/status": 1, "watch nodes": 1,
		"create leases.coordination.k8s.io": 1, "get leases.coordination.k8s.io": 1, "update leases.coordination.k8s.io": 2,
		"create csinodes.storage.k8s.io": 1, "get csinodes.storage.k8s.io": 1,
		"watch pods": 1, "watch services": 1, "watch configmaps": 1,
		"watch runtimeclasses.node.k8s.io": 1, "watch csidrivers.storage.k8s.io": 1,
		"watch podcertificaterequests.certificates.k8s.io": 1,
	}
	if !maps.Equal(calls, want) {
		t.Errorf("hollow-0's calls:\n got %v\nwant %v", calls, want)
	}
	if s := sums["system:node:hollow-0"]; s.Total() != 16 || !maps.Equal(s.Nodes, map[string]bool{"hollow-0": true}) {
		t.Errorf("hollow-0: %d requests, nodes %v", s.Total(), s.Nodes)
	}

	var watches []string
	for _, w := range sums["system:node:hollow-0"].WatchSet() {
		watches = append(watches, w.String())
	}
	wantWatches := []string{
		"configmaps -n default fieldSelector=metadata.name=app-config",
		"csidrivers.storage.k8s.io",
		"nodes fieldSelector=metadata.name=<node>",
		"podcertificaterequests.certificates.k8s.io fieldSelector=spec.nodeName=<node>",
		"pods fieldSelector=spec.nodeName=<node>",
		"runtimeclasses.node.k8s.io",
		"services fieldSelector=spec.clusterIP!=None",
	}
	if !slices.Equal(watches, wantWatches) {
		t.Errorf("hollow-0's watches:\n got %q\nwant %q", watches, wantWatches)
	}

	if f := sums["system:node:fleetlet-pool-0"].Failed; !maps.Equal(f, map[Call]int{{Verb: "watch", Resource: "secrets"}: 1}) {
		t.Errorf("the agent's failed requests: %v, want its refused watch of secrets", f)
	}
	// Before it registers, a kubelet finds no Node, Lease or CSINode: 404s.
	notFound := map[Call]int{{Verb: "get", Resource: "nodes"}: 1, {Verb: "get", Group: "coordination.k8s.io", Resource: "leases"}: 1, {Verb: "get", Group: "storage.k8s.io", Resource: "csinodes"}: 1}
	if f := sums["system:node:hollow-0"].Failed; !maps.Equal(f, notFound) {
		t.Errorf("hollow-0's failed requests: %v, want the 404s of its registration", f)
	}

	// The agent's pod and Node watches read as the hollow kubelet's; it
	// lacks the others, and its refused watch of secrets counts.
	onlyHollow, onlyAgent := Diff(sums["system:node:hollow-0"].WatchSet(), sums["system:node:fleetlet-pool-0"].WatchSet())
	if len(onlyHollow) != 5 || len(onlyAgent) != 1 || onlyAgent[0].String() != "secrets" {
		t.Errorf("only hollow %v, only agent %v", onlyHollow, onlyAgent)
	}
}

// TestSummarizeKubeProxies tells hollow kube-proxies from agents' by user
// agent: they share the user system:kube-proxy, and the hollow ones watch no
// Node that could name them.
func TestSummarizeKubeProxies(t *testing.T) {
	classify := func(r Request) (string, string) {
		if r.User != "system:kube-proxy" {
			return "", ""
		}
		if r.UserAgent == "hollow-proxy" {
			return "hollow", ""
		}
		return "agent", strings.TrimSuffix(strings.TrimPrefix(r.UserAgent, "fleetlet/"), "/kube-proxy")
	}
	sums, err := Summarize(readTestLog(t), classify)
	if err != nil {
		t.Fatal(err)
	}
	hollow, agent := sums["hollow"], sums["agent"]
	if hollow == nil || agent == nil || len(sums) != 2 {
		t.Fatalf("groups %v", slices.Sorted(maps.Keys(sums)))
	}
	if hollow.Total() != 4 || agent.Total() != 2 || !agent.Nodes["fleetlet-pool-0"] {
		t.Errorf("hollow %d requests, agent %d requests on nodes %v", hollow.Total(), agent.Total(), agent.Nodes)
	}
	onlyHollow, onlyAgent := Diff(hollow.WatchSet(), agent.WatchSet())
	var a, b []string
	for _, w := range onlyHollow {
		a = append(a, w.String())
	}
	for _, w := range onlyAgent {
		b = append(b, w.String())
	}
	if !slices.Equal(a, []string{"endpointslices.discovery.k8s.io labelSelector=!service.kubernetes.io/headless", "servicecidrs.networking.k8s.io"}) ||
		!slices.Equal(b, []string{"nodes fieldSelector=metadata.name=<node>"}) {
		t.Errorf("only hollow %q, only agent %q", a, b)
	}
}

func TestNormalizeSelectors(t *testing.T) {
	for _, tt := range []struct {
		name, group, resource, field, label, node string
		wantField, wantLabel                      string
	}{
		{"none", "", "services", "", "", "", "", ""},
		{"pods of a node", "", "pods", "spec.nodeName=hollow-0", "", "", "spec.nodeName=<node>", ""},
		{"a node by name", "", "nodes", "metadata.name=fleetlet-pool-3", "", "", "metadata.name=<node>", ""},
		{"double equals", "", "nodes", "metadata.name==n1", "", "", "metadata.name=<node>", ""},
		{"a configmap keeps its name", "", "configmaps", "metadata.name=app-config", "", "n1", "metadata.name=app-config", ""},
		{"a lease named as its node", "coordination.k8s.io", "leases", "metadata.name=n1", "", "n1", "metadata.name=<node>", ""},
		{"a lease of another node", "coordination.k8s.io", "leases", "metadata.name=n2", "", "n1", "metadata.name=n2", ""},
		{"terms sorted", "", "services", "spec.clusterIP!=None,metadata.namespace=default", "", "", "metadata.namespace=default,spec.clusterIP!=None", ""},
		{"label not exists", "", "services", "", "!service.kubernetes.io/service-proxy-name", "", "", "!service.kubernetes.io/service-proxy-name"},
		{"labels sorted, own node replaced", "", "pods", "", "kubernetes.io/hostname=n1,app in (web,db)", "n1", "", "app in (db,web),kubernetes.io/hostname=<node>"},
		{"label value containing the node name kept", "", "pods", "", "app=n10", "n1", "", "app=n10"},
		{"label exists", "", "pods", "", "app", "", "", "app"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, l, err := NormalizeSelectors(tt.group, tt.resource, tt.field, tt.label, tt.node)
			if err != nil || f != tt.wantField || l != tt.wantLabel {
				t.Errorf("got %q, %q, %v; want %q, %q", f, l, err, tt.wantField, tt.wantLabel)
			}
		})
	}
	if _, _, err := NormalizeSelectors("", "pods", "", "a in (", ""); err == nil {
		t.Error("no error for a malformed label selector")
	}
	if _, _, err := NormalizeSelectors("", "pods", "a", "", ""); err == nil {
		t.Error("no error for a malformed field selector")
	}
}

func TestBetween(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var reqs []Request
	for i := range 5 {
		reqs = append(reqs, Request{AuditID: string(rune('a' + i)), Received: base.Add(time.Duration(i) * time.Minute)})
	}
	got := Between(reqs, base.Add(time.Minute), base.Add(3*time.Minute))
	if len(got) != 2 || got[0].AuditID != "b" || got[1].AuditID != "c" {
		t.Errorf("Between = %v, want b and c (from inclusive, to exclusive)", got)
	}
}

func TestNodeOf(t *testing.T) {
	for user, want := range map[string]string{"system:node:hollow-0": "hollow-0", "system:kube-proxy": "", "system:nodes": "", "": ""} {
		if got := NodeOf(user); got != want {
			t.Errorf("NodeOf(%q) = %q, want %q", user, got, want)
		}
	}
}
