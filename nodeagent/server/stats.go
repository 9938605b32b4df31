package server

import (
	"encoding/json"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// pods serves the agent's pods as a v1 PodList, encoded with the v1 legacy
// codec so it carries kind and apiVersion as the kubelet's does.
func (s *Server) pods(w http.ResponseWriter, r *http.Request) {
	list := &corev1.PodList{}
	for _, p := range s.cfg.Pods() {
		list.Items = append(list.Items, *p)
	}
	data, err := runtime.Encode(scheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion), list)
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("encoding the pods of node %q: %v", s.cfg.NodeName, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(data); err != nil {
		klog.FromContext(r.Context()).V(4).Info("Writing /pods response failed", "err", err)
	}
}

// statsSummary serves /stats/summary; only_cpu_and_memory=true (exactly one
// value, exactly "true", in the query or a POST form) trims it as the
// kubelet's GetCPUAndMemoryStats does.
func (s *Server) statsSummary(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Summary == nil {
		s.notProvided(w, "/stats/summary")
		return
	}
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("Internal Error: parse form failed: %v", err))
		return
	}
	v, found := r.Form["only_cpu_and_memory"]
	onlyCPUAndMemory := found && len(v) == 1 && v[0] == "true"
	summary, err := s.cfg.Summary(r.Context())
	if err != nil {
		klog.FromContext(r.Context()).Error(err, "HTTP InternalServerError serving", "request", "/stats/summary")
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("Internal Error: %v", err))
		return
	}
	if onlyCPUAndMemory {
		summary = cpuAndMemoryOnly(summary)
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(summary); err != nil {
		klog.FromContext(r.Context()).V(4).Info("Writing /stats/summary response failed", "err", err)
	}
}

// cpuAndMemoryOnly keeps what the kubelet's GetCPUAndMemoryStats reports:
// for the node its name, start time, CPU, memory, swap and system
// containers; for pods and containers their identity, start time, CPU,
// memory and swap. Network, filesystems, IO, volumes, processes,
// accelerators and user metrics are dropped. s is not modified.
func cpuAndMemoryOnly(s *statsapi.Summary) *statsapi.Summary {
	out := &statsapi.Summary{
		Node: statsapi.NodeStats{
			NodeName:         s.Node.NodeName,
			StartTime:        s.Node.StartTime,
			CPU:              s.Node.CPU,
			Memory:           s.Node.Memory,
			Swap:             s.Node.Swap,
			SystemContainers: containersCPUAndMemory(s.Node.SystemContainers),
		},
	}
	if s.Pods != nil {
		out.Pods = make([]statsapi.PodStats, 0, len(s.Pods))
	}
	for _, p := range s.Pods {
		out.Pods = append(out.Pods, statsapi.PodStats{
			PodRef:     p.PodRef,
			StartTime:  p.StartTime,
			CPU:        p.CPU,
			Memory:     p.Memory,
			Swap:       p.Swap,
			Containers: containersCPUAndMemory(p.Containers),
		})
	}
	return out
}

func containersCPUAndMemory(cs []statsapi.ContainerStats) []statsapi.ContainerStats {
	if cs == nil {
		return nil
	}
	out := make([]statsapi.ContainerStats, 0, len(cs))
	for _, c := range cs {
		out = append(out, statsapi.ContainerStats{
			Name:      c.Name,
			StartTime: c.StartTime,
			CPU:       c.CPU,
			Memory:    c.Memory,
			Swap:      c.Swap,
		})
	}
	return out
}
