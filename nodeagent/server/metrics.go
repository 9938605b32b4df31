package server

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/fleetlet/fleetlet/nodeagent/metrics"
)

// families serves the metric families gather builds for this scrape,
// in the exposition format the scraper asks for (protobuf or text), as
// the kubelet's component-base handlers do.
func (s *Server) families(path string, gather func(ctx context.Context) metrics.Families) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if gather == nil {
			s.notProvided(w, path)
			return
		}
		fs := gather(r.Context())
		defer metrics.Release(fs)
		if err := metrics.Write(w, metrics.Format(r), fs); err != nil {
			klog.FromContext(r.Context()).V(4).Info("Writing metrics failed", "path", path, "err", err)
		}
	}
}

// The kubelet's resource metrics (pkg/kubelet/metrics/collectors
// resource_metrics.go). Help texts carry the stability prefix that
// component-base adds. The deprecated scrape_error is hidden since 1.30, as
// on a 1.37 kubelet, so it is not served. Descriptors are immutable, hence
// shared by every node.
var (
	nodeCPUUsageDesc        = prometheus.NewDesc("node_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemoryUsageDesc     = prometheus.NewDesc("node_memory_working_set_bytes", "[STABLE] Current working set of the node in bytes", nil, nil)
	nodeSwapUsageDesc       = prometheus.NewDesc("node_swap_usage_bytes", "[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems", nil, nil)
	containerCPUUsageDesc   = prometheus.NewDesc("container_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the container in core-seconds", []string{"container", "pod", "namespace"}, nil)
	containerMemoryDesc     = prometheus.NewDesc("container_memory_working_set_bytes", "[STABLE] Current working set of the container in bytes", []string{"container", "pod", "namespace"}, nil)
	containerSwapUsageDesc  = prometheus.NewDesc("container_swap_usage_bytes", "[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems", []string{"container", "pod", "namespace"}, nil)
	containerSwapLimitDesc  = prometheus.NewDesc("container_swap_limit_bytes", "[ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems", []string{"container", "pod", "namespace"}, nil)
	containerStartTimeDesc  = prometheus.NewDesc("container_start_time_seconds", "[STABLE] Start time of the container since unix epoch in seconds", []string{"container", "pod", "namespace"}, nil)
	podCPUUsageDesc         = prometheus.NewDesc("pod_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the pod in core-seconds", []string{"pod", "namespace"}, nil)
	podMemoryUsageDesc      = prometheus.NewDesc("pod_memory_working_set_bytes", "[STABLE] Current working set of the pod in bytes", []string{"pod", "namespace"}, nil)
	podSwapUsageDesc        = prometheus.NewDesc("pod_swap_usage_bytes", "[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems", []string{"pod", "namespace"}, nil)
	resourceScrapeErrorDesc = prometheus.NewDesc("resource_scrape_error", "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

// resourceMetrics serves /metrics/resource from a registry made for this one
// scrape: the collector holds this scrape's summary, and nothing outlives
// the request.
func (s *Server) resourceMetrics(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Summary == nil {
		s.notProvided(w, "/metrics/resource")
		return
	}
	c := &resourceCollector{}
	summary, err := s.cfg.Summary(r.Context())
	if err != nil {
		klog.FromContext(r.Context()).Error(err, "Error getting summary for resourceMetric prometheus endpoint")
	} else {
		c.summary = cpuAndMemoryOnly(summary)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}

// resourceCollector turns one summary into the kubelet's resource metrics;
// a nil summary means getting it failed, reported as resource_scrape_error 1.
type resourceCollector struct {
	summary *statsapi.Summary
}

func (c *resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		nodeCPUUsageDesc, nodeMemoryUsageDesc, nodeSwapUsageDesc,
		containerStartTimeDesc, containerCPUUsageDesc, containerMemoryDesc, containerSwapUsageDesc, containerSwapLimitDesc,
		podCPUUsageDesc, podMemoryUsageDesc, podSwapUsageDesc,
		resourceScrapeErrorDesc,
	} {
		ch <- d
	}
}

func (c *resourceCollector) Collect(ch chan<- prometheus.Metric) {
	if c.summary == nil {
		ch <- prometheus.MustNewConstMetric(resourceScrapeErrorDesc, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(resourceScrapeErrorDesc, prometheus.GaugeValue, 0)
	node := c.summary.Node
	if node.CPU != nil && node.CPU.UsageCoreNanoSeconds != nil {
		ch <- timestamped(node.CPU.Time.Time, nodeCPUUsageDesc, prometheus.CounterValue, coreSeconds(*node.CPU.UsageCoreNanoSeconds))
	}
	if node.Memory != nil && node.Memory.WorkingSetBytes != nil {
		ch <- timestamped(node.Memory.Time.Time, nodeMemoryUsageDesc, prometheus.GaugeValue, float64(*node.Memory.WorkingSetBytes))
	}
	if node.Swap != nil && node.Swap.SwapUsageBytes != nil {
		ch <- timestamped(node.Swap.Time.Time, nodeSwapUsageDesc, prometheus.GaugeValue, float64(*node.Swap.SwapUsageBytes))
	}
	for _, pod := range c.summary.Pods {
		ref := pod.PodRef
		for _, ctr := range pod.Containers {
			collectContainer(ch, ref, ctr)
		}
		if pod.CPU != nil && pod.CPU.UsageCoreNanoSeconds != nil {
			ch <- timestamped(pod.CPU.Time.Time, podCPUUsageDesc, prometheus.CounterValue, coreSeconds(*pod.CPU.UsageCoreNanoSeconds), ref.Name, ref.Namespace)
		}
		if pod.Memory != nil && pod.Memory.WorkingSetBytes != nil {
			ch <- timestamped(pod.Memory.Time.Time, podMemoryUsageDesc, prometheus.GaugeValue, float64(*pod.Memory.WorkingSetBytes), ref.Name, ref.Namespace)
		}
		if pod.Swap != nil && pod.Swap.SwapUsageBytes != nil {
			ch <- timestamped(pod.Swap.Time.Time, podSwapUsageDesc, prometheus.GaugeValue, float64(*pod.Swap.SwapUsageBytes), ref.Name, ref.Namespace)
		}
	}
}

func collectContainer(ch chan<- prometheus.Metric, ref statsapi.PodReference, c statsapi.ContainerStats) {
	labels := []string{c.Name, ref.Name, ref.Namespace}
	// The start time has no sample timestamp on the kubelet either: it is a
	// fact about the container, not a measurement.
	if c.StartTime.Unix() > 0 {
		ch <- prometheus.MustNewConstMetric(containerStartTimeDesc, prometheus.GaugeValue, float64(c.StartTime.UnixNano())/float64(time.Second), labels...)
	}
	if c.CPU != nil && c.CPU.UsageCoreNanoSeconds != nil {
		ch <- timestamped(c.CPU.Time.Time, containerCPUUsageDesc, prometheus.CounterValue, coreSeconds(*c.CPU.UsageCoreNanoSeconds), labels...)
	}
	if c.Memory != nil && c.Memory.WorkingSetBytes != nil {
		ch <- timestamped(c.Memory.Time.Time, containerMemoryDesc, prometheus.GaugeValue, float64(*c.Memory.WorkingSetBytes), labels...)
	}
	if c.Swap == nil {
		return
	}
	var usage float64
	if c.Swap.SwapUsageBytes != nil {
		usage = float64(*c.Swap.SwapUsageBytes)
		ch <- timestamped(c.Swap.Time.Time, containerSwapUsageDesc, prometheus.GaugeValue, usage, labels...)
	}
	if c.Swap.SwapAvailableBytes != nil {
		ch <- timestamped(c.Swap.Time.Time, containerSwapLimitDesc, prometheus.GaugeValue, float64(*c.Swap.SwapAvailableBytes)+usage, labels...)
	}
}

func timestamped(t time.Time, d *prometheus.Desc, vt prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	return prometheus.NewMetricWithTimestamp(t, prometheus.MustNewConstMetric(d, vt, v, labels...))
}

func coreSeconds(nanos uint64) float64 { return float64(nanos) / float64(time.Second) }
