package staticpods

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// setPodDefaults is the defaulting the kubelet's decoder applies to a pod
// manifest (the core/v1 scheme's SetObjectDefaults_Pod, in
// k8s.io/kubernetes/pkg/apis/core/v1, which is not importable as a library),
// with the feature gates at their 1.37 defaults: ImageVolume on (GA),
// PodLevelResourcesFixDefaulting on (pod-level requests are defaulted by the
// API server, not the decoder), H2CContainerProbe off. The API server
// applies the same defaults to pods it stores; a static pod, which never
// goes through it, gets them here, so that it runs as the kubelet runs it.
func setPodDefaults(pod *corev1.Pod) {
	setDefaultsPod(pod)
	spec := &pod.Spec
	setDefaultsPodSpec(spec)
	for i := range spec.Volumes {
		setDefaultsVolume(&spec.Volumes[i])
	}
	for i := range spec.InitContainers {
		setDefaultsContainer(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		setDefaultsContainer(&spec.Containers[i])
	}
	for i := range spec.EphemeralContainers {
		setDefaultsContainer((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	roundUpResources(spec.Overhead)
	if spec.Resources != nil {
		roundUpResources(spec.Resources.Limits)
		roundUpResources(spec.Resources.Requests)
	}
	setDefaultsPodStatus(&pod.Status)
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for i := range statuses {
			roundUpResources(statuses[i].AllocatedResources)
			if r := statuses[i].Resources; r != nil {
				roundUpResources(r.Limits)
				roundUpResources(r.Requests)
			}
		}
	}
	roundUpResources(pod.Status.AllocatedResources)
	if r := pod.Status.Resources; r != nil {
		roundUpResources(r.Limits)
		roundUpResources(r.Requests)
	}
}

// setDefaultsPod is SetDefaults_Pod.
func setDefaultsPod(pod *corev1.Pod) {
	spec := &pod.Spec
	if g := spec.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	}
	// Requests default to limits, on a pod only.
	for _, containers := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for i := range containers {
			r := &containers[i].Resources
			if r.Limits == nil {
				continue
			}
			if r.Requests == nil {
				r.Requests = corev1.ResourceList{}
			}
			for name, q := range r.Limits {
				if _, ok := r.Requests[name]; !ok {
					r.Requests[name] = q.DeepCopy()
				}
			}
		}
	}
	if spec.EnableServiceLinks == nil {
		spec.EnableServiceLinks = ptr.To(corev1.DefaultEnableServiceLinks)
	}
	if spec.HostNetwork {
		for _, containers := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
			for i := range containers {
				for j := range containers[i].Ports {
					if p := &containers[i].Ports[j]; p.HostPort == 0 {
						p.HostPort = p.ContainerPort
					}
				}
			}
		}
	}
}

// setDefaultsPodSpec is SetDefaults_PodSpec.
func setDefaultsPodSpec(spec *corev1.PodSpec) {
	if spec.ServiceAccountName == "" {
		spec.ServiceAccountName = spec.DeprecatedServiceAccount
	}
	spec.DeprecatedServiceAccount = spec.ServiceAccountName
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptr.To[int64](corev1.DefaultTerminationGracePeriodSeconds)
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = corev1.DefaultSchedulerName
	}
}

// setDefaultsVolume is SetDefaults_Volume and the defaults of each volume
// source.
func setDefaultsVolume(v *corev1.Volume) {
	if ptr.AllPtrFieldsNil(&v.VolumeSource) {
		v.VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	}
	src := &v.VolumeSource
	if src.Image != nil && src.Image.PullPolicy == "" {
		src.Image.PullPolicy = defaultPullPolicy(src.Image.Reference)
	}
	if src.HostPath != nil && src.HostPath.Type == nil {
		src.HostPath.Type = ptr.To(corev1.HostPathUnset)
	}
	if src.Secret != nil && src.Secret.DefaultMode == nil {
		src.Secret.DefaultMode = ptr.To(corev1.SecretVolumeSourceDefaultMode)
	}
	if src.ISCSI != nil && src.ISCSI.ISCSIInterface == "" {
		src.ISCSI.ISCSIInterface = "default"
	}
	if rbd := src.RBD; rbd != nil {
		if rbd.RBDPool == "" {
			rbd.RBDPool = "rbd"
		}
		if rbd.RadosUser == "" {
			rbd.RadosUser = "admin"
		}
		if rbd.Keyring == "" {
			rbd.Keyring = "/etc/ceph/keyring"
		}
	}
	if d := src.DownwardAPI; d != nil {
		if d.DefaultMode == nil {
			d.DefaultMode = ptr.To(corev1.DownwardAPIVolumeSourceDefaultMode)
		}
		for i := range d.Items {
			setDefaultsFieldRef(d.Items[i].FieldRef)
		}
	}
	if src.ConfigMap != nil && src.ConfigMap.DefaultMode == nil {
		src.ConfigMap.DefaultMode = ptr.To(corev1.ConfigMapVolumeSourceDefaultMode)
	}
	if az := src.AzureDisk; az != nil {
		if az.CachingMode == nil {
			az.CachingMode = ptr.To(corev1.AzureDataDiskCachingReadWrite)
		}
		if az.FSType == nil {
			az.FSType = ptr.To("ext4")
		}
		if az.ReadOnly == nil {
			az.ReadOnly = ptr.To(false)
		}
		if az.Kind == nil {
			az.Kind = ptr.To(corev1.AzureSharedBlobDisk)
		}
	}
	if p := src.Projected; p != nil {
		if p.DefaultMode == nil {
			p.DefaultMode = ptr.To(corev1.ProjectedVolumeSourceDefaultMode)
		}
		for i := range p.Sources {
			s := &p.Sources[i]
			if s.DownwardAPI != nil {
				for j := range s.DownwardAPI.Items {
					setDefaultsFieldRef(s.DownwardAPI.Items[j].FieldRef)
				}
			}
			if s.ServiceAccountToken != nil && s.ServiceAccountToken.ExpirationSeconds == nil {
				s.ServiceAccountToken.ExpirationSeconds = ptr.To(int64(time.Hour.Seconds()))
			}
		}
	}
	if s := src.ScaleIO; s != nil {
		if s.StorageMode == "" {
			s.StorageMode = "ThinProvisioned"
		}
		if s.FSType == "" {
			s.FSType = "xfs"
		}
	}
	if e := src.Ephemeral; e != nil && e.VolumeClaimTemplate != nil {
		spec := &e.VolumeClaimTemplate.Spec
		if spec.VolumeMode == nil {
			spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
		}
		roundUpResources(spec.Resources.Limits)
		roundUpResources(spec.Resources.Requests)
	}
}

// setDefaultsContainer is SetDefaults_Container and the defaults of what a
// container holds: ports, environment, resources, probes, lifecycle hooks.
func setDefaultsContainer(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = defaultPullPolicy(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if from := c.Env[i].ValueFrom; from != nil {
			setDefaultsFieldRef(from.FieldRef)
			if from.FileKeyRef != nil && from.FileKeyRef.Optional == nil {
				from.FileKeyRef.Optional = ptr.To(false)
			}
		}
	}
	roundUpResources(c.Resources.Limits)
	roundUpResources(c.Resources.Requests)
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		if p.TimeoutSeconds == 0 {
			p.TimeoutSeconds = 1
		}
		if p.PeriodSeconds == 0 {
			p.PeriodSeconds = 10
		}
		if p.SuccessThreshold == 0 {
			p.SuccessThreshold = 1
		}
		if p.FailureThreshold == 0 {
			p.FailureThreshold = 3
		}
		setDefaultsHTTPGet(p.HTTPGet)
		if p.GRPC != nil && p.GRPC.Service == nil {
			p.GRPC.Service = ptr.To("")
		}
	}
	if l := c.Lifecycle; l != nil {
		for _, h := range []*corev1.LifecycleHandler{l.PostStart, l.PreStop} {
			if h != nil {
				setDefaultsHTTPGet(h.HTTPGet)
			}
		}
	}
}

func setDefaultsHTTPGet(h *corev1.HTTPGetAction) {
	if h == nil {
		return
	}
	if h.Path == "" {
		h.Path = "/"
	}
	if h.Scheme == "" {
		h.Scheme = corev1.URISchemeHTTP
	}
}

func setDefaultsFieldRef(f *corev1.ObjectFieldSelector) {
	if f != nil && f.APIVersion == "" {
		f.APIVersion = "v1"
	}
}

// setDefaultsPodStatus is SetDefaults_PodStatus: podIP and podIPs agree.
func setDefaultsPodStatus(st *corev1.PodStatus) {
	hasIP, hasIPs := st.PodIP != "", len(st.PodIPs) > 0
	switch {
	case hasIP && !hasIPs:
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	case !hasIP && hasIPs:
		st.PodIP = st.PodIPs[0].IP
	case hasIP && hasIPs && st.PodIPs[0].IP != st.PodIP:
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	}
}

// roundUpResources is SetDefaults_ResourceList: quantities round up to
// milli-units.
func roundUpResources(list corev1.ResourceList) {
	for name, q := range list {
		q.RoundUp(-3)
		list[name] = q
	}
}

// defaultPullPolicy is Always for an image tagged (or defaulting to) latest,
// IfNotPresent otherwise, as SetDefaults_Container decides with
// parsers.ParseImageName.
func defaultPullPolicy(image string) corev1.PullPolicy {
	if imageTag(image) == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// imageTag is the tag of an image reference: after the last colon of its
// last path component, "latest" when it has neither a tag nor a digest.
func imageTag(image string) string {
	ref, _, hasDigest := strings.Cut(image, "@")
	last := ref[strings.LastIndexByte(ref, '/')+1:]
	if i := strings.LastIndexByte(last, ':'); i >= 0 {
		return last[i+1:]
	}
	if hasDigest {
		return ""
	}
	return "latest"
}
