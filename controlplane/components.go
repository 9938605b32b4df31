package controlplane

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// component is how to run and probe one of the four binaries; its ports are
// chosen anew for every attempt, so args and probe take them.
type component struct {
	name  string
	ports int
	args  func(ports []int) []string
	probe func(ctx context.Context, ports []int) error
}

func loopbackURL(scheme string, port int) string {
	return scheme + "://127.0.0.1:" + strconv.Itoa(port)
}

func (cp *ControlPlane) etcdComponent() component {
	dataDir := filepath.Join(cp.cfg.Dir, "etcd")
	return component{
		name:  ComponentEtcd,
		ports: 2,
		args: func(ports []int) []string {
			client, peer := loopbackURL("http", ports[0]), loopbackURL("http", ports[1])
			return []string{
				"--name=fleetlet",
				"--data-dir=" + dataDir,
				// Plain HTTP: etcd listens on loopback only, lives for one run
				// and has one intended client, the apiserver; TLS would add
				// certificates and handshakes for no one's benefit on a test
				// machine. (Anyone with a shell on the machine can reach it:
				// do not run fleetlet's control plane on a shared host.)
				"--listen-client-urls=" + client,
				"--advertise-client-urls=" + client,
				// A single member never talks to peers, but etcd binds the
				// peer port anyway: its default would collide between runs.
				"--listen-peer-urls=" + peer,
				"--initial-advertise-peer-urls=" + peer,
				"--initial-cluster=fleetlet=" + peer,
				"--initial-cluster-state=new",
				// A run's data dies with the run; fsync on every write would
				// make etcd, not the apiserver, the bottleneck being measured.
				"--unsafe-no-fsync=true",
				// A long load run's churn of pods, events and leases can outgrow
				// the default 2 GiB between the apiserver's 5-minute
				// compactions; etcd then raises the NOSPACE alarm and refuses
				// writes for the rest of the run. 8 GiB is the most etcd
				// recommends.
				"--quota-backend-bytes=" + strconv.FormatInt(8<<30, 10),
			}
		},
		probe: func(ctx context.Context, ports []int) error {
			return cp.httpGetOK(ctx, loopbackURL("http", ports[0])+"/readyz")
		},
	}
}

// apiserverComponent runs the API server on etcdURL; auditPolicy is the
// path of the audit policy when Config.AuditLogPath is set, else "".
func (cp *ControlPlane) apiserverComponent(etcdURL, auditPolicy string) component {
	p := cp.pki
	return component{
		name:  ComponentAPIServer,
		ports: 1,
		args: func(ports []int) []string {
			args := []string{
				"--etcd-servers=" + etcdURL,
				"--bind-address=127.0.0.1",
				"--advertise-address=127.0.0.1",
				"--secure-port=" + strconv.Itoa(ports[0]),
				"--tls-cert-file=" + p.apiserverServing.cert,
				"--tls-private-key-file=" + p.apiserverServing.key,
				"--client-ca-file=" + p.caFiles.cert,
				"--authorization-mode=Node,RBAC",
				// Nodes join as kubeadm's do: a bootstrap token, then a
				// CSR for their client certificate.
				"--enable-bootstrap-token-auth=true",
				"--enable-admission-plugins=NodeRestriction",
				"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
				"--service-account-key-file=" + p.serviceAccountPub,
				"--service-account-signing-key-file=" + p.serviceAccountKey,
				"--service-cluster-ip-range=" + cp.cfg.ServiceCIDR,
				"--allow-privileged=true",
				"--requestheader-client-ca-file=" + p.frontProxyCA.cert,
				"--requestheader-allowed-names=" + frontProxyClientName,
				"--requestheader-username-headers=X-Remote-User",
				"--requestheader-group-headers=X-Remote-Group",
				"--requestheader-extra-headers-prefix=X-Remote-Extra-",
				"--proxy-client-cert-file=" + p.frontProxyClient.cert,
				"--proxy-client-key-file=" + p.frontProxyClient.key,
				"--kubelet-client-certificate=" + p.kubeletClient.cert,
				"--kubelet-client-key=" + p.kubeletClient.key,
				// Agents report a loopback InternalIP and a made-up hostname
				// that no resolver knows; the upstream default tries the
				// hostname first.
				"--kubelet-preferred-address-types=InternalIP,Hostname",
				// The default of 400+200 is sized for a real cluster's
				// clients; thousands of agents registering and heartbeating at
				// once would be throttled with 429s by the apiserver itself,
				// hiding the behaviour under test. With priority and fairness
				// on (the default) the sum is the server's total concurrency.
				"--max-requests-inflight=2000",
				"--max-mutating-requests-inflight=1000",
				// Any other reconciler would publish 127.0.0.1 as the kubernetes
				// Service's endpoint, which Endpoints validation rejects
				// (loopback): the apiserver refuses to start. Nothing in an
				// emulated cluster dials that Service.
				"--endpoint-reconciler-type=none",
			}
			if auditPolicy != "" {
				args = append(args, auditArgs(cp.cfg.AuditLogPath, auditPolicy)...)
			}
			return args
		},
		probe: func(ctx context.Context, ports []int) error {
			return cp.httpGetOK(ctx, loopbackURL("https", ports[0])+"/readyz")
		},
	}
}

// The scheduler and the controller-manager share their serving and
// delegated-auth flags. --client-ca-file spares them waiting for the
// apiserver to publish it in kube-system, and --leader-elect=false removes
// lease renewals every 2 s from the apiserver metrics a run measures: there
// is only ever one instance.
//
// Their client-side limits are raised from 20 (controller-manager) and 50
// (scheduler) requests per second to 100, as upstream's kubemark jobs raise
// them for their masters: at the defaults, the scheduler's bindings cap
// scheduling at 50 pods/s, and the controller-manager takes minutes to
// untaint, annotate and give pod CIDRs to a fleet of thousands registering
// at once, all that time loading the apiserver a measurement window shares.
// The scheduler's flags are deprecated in favour of its config file but
// still honoured in 1.37.
func commonComponentArgs(port int, kubeconfig string, serving filePair, caFile string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--kube-api-qps=100",
		"--kube-api-burst=100",
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + serving.cert,
		"--tls-private-key-file=" + serving.key,
		"--client-ca-file=" + caFile,
		"--leader-elect=false",
	}
}

func (cp *ControlPlane) schedulerComponent(kubeconfig string) component {
	p := cp.pki
	return component{
		name:  ComponentScheduler,
		ports: 1,
		args: func(ports []int) []string {
			return commonComponentArgs(ports[0], kubeconfig, p.schedulerServing, p.caFiles.cert)
		},
		probe: func(ctx context.Context, ports []int) error {
			return cp.httpGetOK(ctx, loopbackURL("https", ports[0])+"/healthz")
		},
	}
}

func (cp *ControlPlane) controllerManagerComponent(kubeconfig string) component {
	p := cp.pki
	return component{
		name:  ComponentControllerManager,
		ports: 1,
		args: func(ports []int) []string {
			return append(commonComponentArgs(ports[0], kubeconfig, p.controllerServing, p.caFiles.cert),
				// Node IPAM gives each node a spec.podCIDR, the range its
				// agent hands pod IPs out of.
				"--allocate-node-cidrs=true",
				"--cluster-cidr="+cp.cfg.ClusterCIDR,
				"--node-cidr-mask-size="+strconv.Itoa(cp.cfg.NodeCIDRMaskSize),
				"--service-cluster-ip-range="+cp.cfg.ServiceCIDR,
				"--service-account-private-key-file="+p.serviceAccountKey,
				"--root-ca-file="+p.caFiles.cert,
				// Each controller acts as its own service account, so RBAC
				// denials and apiserver metrics name the controller.
				"--use-service-account-credentials=true",
				// CSRs from kubelet-style clients get certificates the
				// apiserver trusts.
				"--cluster-signing-cert-file="+p.caFiles.cert,
				"--cluster-signing-key-file="+p.caFiles.key,
				// The default "*": node lifecycle, node IPAM, deployment,
				// replicaset, garbage collector, the CSR approver and signer
				// and the rest of the default-on set; and, as kubeadm
				// enables them, the token cleaner (deletes expired bootstrap
				// tokens) and the bootstrap signer.
				"--controllers=*,bootstrapsigner,tokencleaner",
			)
		},
		probe: func(ctx context.Context, ports []int) error {
			return cp.httpGetOK(ctx, loopbackURL("https", ports[0])+"/healthz")
		},
	}
}

// probeTimeout bounds one readiness request, so that a component that
// accepts the connection but never answers still lets the poll loop check
// whether it exited.
const probeTimeout = 5 * time.Second

// httpGetOK succeeds when url answers 200. The client trusts only our CA and
// presents the admin certificate; no probe skips TLS verification, since
// every component serves a certificate from our CA.
func (cp *ControlPlane) httpGetOK(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := cp.httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
