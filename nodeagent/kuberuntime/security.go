package kuberuntime

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// namespacesForPod is the kubelet's NamespacesForPod: the pod's network,
// PID and IPC namespaces, the node's when it asks for the host's, the PID
// namespace its containers' own unless they share the pod's.
func namespacesForPod(pod *corev1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	return ns
}

// supplementalGroupsPolicy is the pod's policy in CRI's words; nil (the
// API's Merge) is CRI's zero value, Merge.
func supplementalGroupsPolicy(sc *corev1.PodSecurityContext) (runtimeapi.SupplementalGroupsPolicy, error) {
	if sc == nil || sc.SupplementalGroupsPolicy == nil {
		return runtimeapi.SupplementalGroupsPolicy_Merge, nil
	}
	v, ok := runtimeapi.SupplementalGroupsPolicy_value[string(*sc.SupplementalGroupsPolicy)]
	if !ok {
		return 0, fmt.Errorf("unsupported supplementalGroupsPolicy: %s", *sc.SupplementalGroupsPolicy)
	}
	return runtimeapi.SupplementalGroupsPolicy(v), nil
}

// podSupplementalGroups are the groups the kubelet adds to every process of
// the pod: its fsGroup first, then its supplementalGroups.
func podSupplementalGroups(sc *corev1.PodSecurityContext) []int64 {
	if sc == nil {
		return nil
	}
	var groups []int64
	if sc.FSGroup != nil {
		groups = append(groups, *sc.FSGroup)
	}
	return append(groups, sc.SupplementalGroups...)
}

func seLinuxOption(o *corev1.SELinuxOptions) *runtimeapi.SELinuxOption {
	if o == nil {
		return nil
	}
	return &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
}

// sandboxSecurityContext is the security part of the kubelet's
// generatePodSandboxLinuxConfig: privileged when any container is, the
// runtime's default seccomp profile, and the pod's user, groups, SELinux
// options and namespaces.
func sandboxSecurityContext(pod *corev1.Pod) (*runtimeapi.LinuxSandboxSecurityContext, error) {
	sc := &runtimeapi.LinuxSandboxSecurityContext{
		Privileged:       hasPrivilegedContainer(pod),
		Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
		NamespaceOptions: namespacesForPod(pod),
	}
	psc := pod.Spec.SecurityContext
	if psc == nil {
		return sc, nil
	}
	if psc.RunAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
	}
	if psc.RunAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
	}
	sc.SupplementalGroups = podSupplementalGroups(psc)
	policy, err := supplementalGroupsPolicy(psc)
	if err != nil {
		return nil, err
	}
	sc.SupplementalGroupsPolicy = policy
	sc.SelinuxOptions = seLinuxOption(psc.SELinuxOptions)
	return sc, nil
}

func hasPrivilegedContainer(pod *corev1.Pod) bool {
	privileged := func(c *corev1.Container) bool {
		return c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
	}
	for i := range pod.Spec.InitContainers {
		if privileged(&pod.Spec.InitContainers[i]) {
			return true
		}
	}
	for i := range pod.Spec.Containers {
		if privileged(&pod.Spec.Containers[i]) {
			return true
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if privileged((*corev1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)) {
			return true
		}
	}
	return false
}

// containerSecurityContext is the kubelet's determineEffectiveSecurityContext
// for what an agent sets: the pod's security context overridden field by
// field by the container's (user, group, privileged, capabilities, read-only
// root, privilege escalation, SELinux), the pod's supplemental groups and
// policy, and its namespaces. An ephemeral container that targets another
// (targetID, its runtime ID) joins that container's PID namespace when it
// would have one of its own. Seccomp, AppArmor and masked /proc paths are
// left to the runtime's defaults, which are the kubelet's.
func containerSecurityContext(pod *corev1.Pod, c *corev1.Container, targetID string) (*runtimeapi.LinuxContainerSecurityContext, error) {
	out := &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: namespacesForPod(pod)}
	psc, csc := pod.Spec.SecurityContext, c.SecurityContext
	var runAsUser, runAsGroup *int64
	var seLinux *corev1.SELinuxOptions
	if psc != nil {
		runAsUser, runAsGroup, seLinux = psc.RunAsUser, psc.RunAsGroup, psc.SELinuxOptions
	}
	if csc != nil {
		runAsUser = cmpOr(csc.RunAsUser, runAsUser)
		runAsGroup = cmpOr(csc.RunAsGroup, runAsGroup)
		seLinux = cmpOr(csc.SELinuxOptions, seLinux)
		out.Privileged = csc.Privileged != nil && *csc.Privileged
		out.ReadonlyRootfs = csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem
		out.NoNewPrivs = csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation
		if caps := csc.Capabilities; caps != nil {
			out.Capabilities = &runtimeapi.Capability{
				AddCapabilities:  make([]string, len(caps.Add)),
				DropCapabilities: make([]string, len(caps.Drop)),
			}
			for i, v := range caps.Add {
				out.Capabilities.AddCapabilities[i] = string(v)
			}
			for i, v := range caps.Drop {
				out.Capabilities.DropCapabilities[i] = string(v)
			}
		}
	}
	if runAsUser != nil {
		out.RunAsUser = &runtimeapi.Int64Value{Value: *runAsUser}
	}
	if runAsGroup != nil {
		out.RunAsGroup = &runtimeapi.Int64Value{Value: *runAsGroup}
	}
	out.SelinuxOptions = seLinuxOption(seLinux)
	out.SupplementalGroups = podSupplementalGroups(psc)
	policy, err := supplementalGroupsPolicy(psc)
	if err != nil {
		return nil, err
	}
	out.SupplementalGroupsPolicy = policy
	if targetID != "" && out.NamespaceOptions.Pid == runtimeapi.NamespaceMode_CONTAINER {
		out.NamespaceOptions.Pid = runtimeapi.NamespaceMode_TARGET
		out.NamespaceOptions.TargetId = targetID
	}
	return out, nil
}

// cmpOr returns a unless it is nil, then b.
func cmpOr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}
