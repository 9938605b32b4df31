package proxy

import (
	"fmt"
	"strings"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/tools/cache"
	netutils "k8s.io/utils/net"
)

// LabelServiceProxyName is the label that hands a Service to a proxy other
// than kube-proxy; kube-proxy watches only Services without it (upstream's
// pkg/proxy/apis.LabelServiceProxyName).
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// handle is an interned string: the keys, Service keys and resource
// versions the proxy keeps. Every proxy of a process holds the same
// objects, and so the same strings; a handle is 8 bytes, its string is kept
// once for the whole process, and it is collected once no proxy holds a
// handle of it. Logs and errors take its Value.
type handle = unique.Handle[string]

// A record is what the proxy keeps of one object, or less: the watches'
// objects are reduced to records as they arrive and never kept. Records are
// also what the reflectors' own temporary stores hold while a watch-list
// streams the initial state (see objectStore.Transformer), so that a
// proxy's start does not hold a thousand full EndpointSlices either.
type record interface {
	objectKey() handle
}

// serviceRecord is a Service as the change tracker sees it.
type serviceRecord struct {
	key handle
	// fingerprint stands for the ServicePortMap the proxier would build of
	// the Service; 0 when it would build none.
	fingerprint uint64
	// bad is why the Service could not be read, nil if it could.
	bad error
}

func (r *serviceRecord) objectKey() handle { return r.key }

// sliceRecord is an EndpointSlice as the endpoints change tracker sees it.
type sliceRecord struct {
	key handle
	// serviceKey is namespace/name of the slice's Service, the key its
	// trigger times are kept under; the zero handle when the slice names no
	// Service.
	serviceKey handle
	rv         handle
	// trigger is the last-change-trigger-time annotation; zero if missing
	// or unparseable.
	trigger time.Time
	// skip marks a slice the proxy does not track: of another address
	// family, or of a headless Service. It counts as absent.
	skip bool
	bad  error
}

func (r *sliceRecord) objectKey() handle { return r.key }

// cidrRecord is a ServiceCIDR: the proxier keeps only its CIDRs, and takes
// no sync for a change of them.
type cidrRecord struct{ key, rv handle }

func (r *cidrRecord) objectKey() handle { return r.key }

// nodeRecord is the proxy's Node as its topology config sees it.
type nodeRecord struct {
	key, rv handle
	zone    string
	hasZone bool
}

func (r *nodeRecord) objectKey() handle { return r.key }

// namespacedKey is cache.MetaNamespaceKeyFunc's key, interned. Like every
// handle's, its string is a copy (unique.Make clones what it has not
// seen), which keeps nothing of the object it was made from alive.
func namespacedKey(namespace, name string) handle {
	if namespace == "" {
		return unique.Make(name)
	}
	return unique.Make(namespace + "/" + name)
}

// noHandle is the zero handle: no Service key, no resource version. It has
// no Value.
var noHandle handle

func unwrapTombstone(obj any) any {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tomb.Obj
	}
	return obj
}

// reduceService makes a Service's record; a record is returned as is.
func reduceService(obj any) (record, error) {
	switch o := unwrapTombstone(obj).(type) {
	case *serviceRecord:
		return o, nil
	case *corev1.Service:
		r := &serviceRecord{key: namespacedKey(o.Namespace, o.Name)}
		// The watch's label selector: a Service that gains the label
		// leaves the watch, which the API server sends as a deletion.
		if _, other := o.Labels[LabelServiceProxyName]; !other {
			r.fingerprint, r.bad = serviceFingerprint(o)
		}
		return r, nil
	}
	return nil, fmt.Errorf("expected a Service, got %T", obj)
}

// reduceEndpointSlice makes an EndpointSlice's record; a record is returned
// as is.
func reduceEndpointSlice(obj any) (record, error) {
	switch o := unwrapTombstone(obj).(type) {
	case *sliceRecord:
		return o, nil
	case *discoveryv1.EndpointSlice:
		r := &sliceRecord{key: namespacedKey(o.Namespace, o.Name), rv: unique.Make(o.ResourceVersion)}
		_, headless := o.Labels[corev1.IsHeadlessService]
		// EndpointsChangeTracker.EndpointSliceUpdate: an IPv4 proxier
		// ignores slices of any other address type. (A dual-stack
		// kube-proxy runs a second tracker for IPv6, which in an IPv4
		// cluster sees nothing.)
		if headless || o.AddressType != discoveryv1.AddressTypeIPv4 {
			r.skip = true
			return r, nil
		}
		// endpointSliceCacheKeys: a slice is keyed by its Service.
		service := o.Labels[discoveryv1.LabelServiceName]
		if service == "" || o.Namespace == "" || o.Name == "" {
			r.bad = fmt.Errorf("no %s label set on EndpointSlice %s", discoveryv1.LabelServiceName, r.key.Value())
			return r, nil
		}
		r.serviceKey = serviceKeyOf(r.key.Value(), o.Namespace, o.Name, service)
		// getLastChangeTriggerTime: a missing annotation and one that does
		// not parse both give no trigger time; the latter is an error.
		if v, ok := o.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				r.bad = fmt.Errorf("annotation %s=%q of EndpointSlice %s is not an RFC 3339 time: %w",
					corev1.EndpointsLastChangeTriggerTime, v, r.key.Value(), err)
			} else {
				r.trigger = t
			}
		}
		return r, nil
	}
	return nil, fmt.Errorf("expected an EndpointSlice, got %T", obj)
}

// serviceKeyOf is namespace/service for the slice keyed sliceKey, interned:
// the handle of the Service's own key. The EndpointSlice controller names a
// slice after its Service plus a suffix, so the Service's key is most often
// a prefix of the slice's, and looking it up makes no string.
func serviceKeyOf(sliceKey, namespace, sliceName, service string) handle {
	if strings.HasPrefix(sliceName, service) {
		return unique.Make(sliceKey[:len(namespace)+1+len(service)])
	}
	return unique.Make(namespace + "/" + service)
}

// reduceServiceCIDR makes a ServiceCIDR's record.
func reduceServiceCIDR(obj any) (record, error) {
	switch o := unwrapTombstone(obj).(type) {
	case *cidrRecord:
		return o, nil
	case *networkingv1.ServiceCIDR:
		return &cidrRecord{key: namespacedKey("", o.Name), rv: unique.Make(o.ResourceVersion)}, nil
	}
	return nil, fmt.Errorf("expected a ServiceCIDR, got %T", obj)
}

// reduceNode makes a Node's record: the zone label is all of the Node that
// the proxier itself reads (NodeTopologyConfig in pkg/proxy/config/config.go).
func reduceNode(obj any) (record, error) {
	switch o := unwrapTombstone(obj).(type) {
	case *nodeRecord:
		return o, nil
	case *corev1.Node:
		zone, hasZone := o.Labels[corev1.LabelTopologyZone]
		return &nodeRecord{key: namespacedKey("", o.Name), rv: unique.Make(o.ResourceVersion),
			zone: strings.Clone(zone), hasZone: hasZone}, nil
	}
	return nil, fmt.Errorf("expected a Node, got %T", obj)
}

// serviceFingerprint hashes what newBaseServiceInfo (pkg/proxy/serviceport.go)
// reads of a Service for an IPv4 proxier, so that two states of a Service
// have one fingerprint when serviceToServiceMap
// (pkg/proxy/servicechangetracker.go) would make equal ServicePortMaps of
// them, and ServiceChangeTracker.Update would see no change: a status or
// annotation update is no change to a proxier. 0 stands for no map at all
// (ShouldSkipService, or no IPv4 cluster IP). The error says what could not
// be read; the fingerprint is still made of the rest.
func serviceFingerprint(svc *corev1.Service) (uint64, error) {
	spec := &svc.Spec
	// ShouldSkipService (pkg/proxy/util/utils.go).
	if spec.ClusterIP == "" || spec.ClusterIP == corev1.ClusterIPNone || spec.Type == corev1.ServiceTypeExternalName {
		return 0, nil
	}
	clusterIP := clusterIPv4(svc)
	if clusterIP == "" {
		return 0, nil
	}
	var bad error
	h := newFNV()
	if ip := netutils.ParseIPSloppy(clusterIP); ip != nil {
		h.str(ip.String())
	} else {
		bad = fmt.Errorf("cluster IP %q of Service %s/%s is not an IP address", clusterIP, svc.Namespace, svc.Name)
		h.str(clusterIP)
	}
	h.str(string(spec.SessionAffinity))
	if spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		// The API server guarantees the timeout; upstream reads it blindly.
		if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			h.int(int64(*c.ClientIP.TimeoutSeconds))
		} else if bad == nil {
			bad = fmt.Errorf("Service %s/%s has ClientIP session affinity without a timeout", svc.Namespace, svc.Name)
		}
	}
	// apiservice.ExternallyAccessible, ExternalPolicyLocal,
	// InternalPolicyLocal and NeedsHealthCheck (pkg/api/v1/service/util.go).
	externallyAccessible := spec.Type == corev1.ServiceTypeLoadBalancer || spec.Type == corev1.ServiceTypeNodePort ||
		(spec.Type == corev1.ServiceTypeClusterIP && len(spec.ExternalIPs) > 0)
	externalLocal := externallyAccessible && spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	internalLocal := spec.InternalTrafficPolicy != nil && *spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	h.bool(externalLocal)
	h.bool(internalLocal)
	// External IPs, source ranges and load balancer VIPs of the proxier's
	// family, in order.
	for _, s := range spec.ExternalIPs {
		if ip := netutils.ParseIPSloppy(s); ip != nil && ip.To4() != nil {
			h.str(ip.String())
		}
	}
	h.str("|")
	var ranges []string
	for _, s := range spec.LoadBalancerSourceRanges {
		_, cidr, err := netutils.ParseCIDRSloppy(strings.TrimSpace(s))
		if err != nil || !netutils.IsIPv4CIDR(cidr) {
			continue
		}
		if ones, _ := cidr.Mask.Size(); ones == 0 {
			// A zero-masked range allows all, as none does.
			ranges = nil
			break
		}
		ranges = append(ranges, cidr.String())
	}
	for _, s := range ranges {
		h.str(s)
	}
	h.str("|")
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" || (ing.IPMode != nil && *ing.IPMode != corev1.LoadBalancerIPModeVIP) {
			continue
		}
		if ip := netutils.ParseIPSloppy(ing.IP); ip != nil && ip.To4() != nil {
			h.str(ip.String())
		}
	}
	if spec.Type == corev1.ServiceTypeLoadBalancer && externalLocal {
		h.int(int64(spec.HealthCheckNodePort))
		if spec.HealthCheckNodePort == 0 && bad == nil {
			bad = fmt.Errorf("Service %s/%s has no health check node port", svc.Namespace, svc.Name)
		}
	}
	// The ports are the map's keys: their order is no change.
	var ports uint64
	for i := range spec.Ports {
		p := &spec.Ports[i]
		ph := h
		ph.str(p.Name)
		ph.str(string(p.Protocol))
		ph.int(int64(p.Port))
		ph.int(int64(p.NodePort))
		ports += uint64(ph)
	}
	h.int(int64(ports))
	h.int(int64(len(spec.Ports)))
	if h == 0 {
		h = 1
	}
	return uint64(h), bad
}

// clusterIPv4 is proxyutil.GetClusterIPByFamily for IPv4.
func clusterIPv4(svc *corev1.Service) string {
	spec := &svc.Spec
	if len(spec.IPFamilies) == 0 {
		if netutils.IsIPv6String(spec.ClusterIP) {
			return ""
		}
		return spec.ClusterIP
	}
	for i, family := range spec.IPFamilies {
		if family == corev1.IPv4Protocol && i < len(spec.ClusterIPs) {
			return spec.ClusterIPs[i]
		}
	}
	return ""
}

// fnv is a 64-bit FNV-1a hash written to field by field, without
// allocating.
type fnv uint64

func newFNV() fnv { return 14695981039346656037 }

func (h *fnv) byte(b byte) { *h = (*h ^ fnv(b)) * 1099511628211 }

func (h *fnv) int(v int64) {
	for i := range 8 {
		h.byte(byte(v >> (8 * i)))
	}
}

// str writes s and its length, so that fields cannot run into each other.
func (h *fnv) str(s string) {
	for i := 0; i < len(s); i++ {
		h.byte(s[i])
	}
	h.int(int64(len(s)))
}

func (h *fnv) bool(b bool) {
	if b {
		h.byte(1)
	} else {
		h.byte(0)
	}
}
