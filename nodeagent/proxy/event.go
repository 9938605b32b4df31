package proxy

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/klog/v2"
)

// kubeProxy is kube-proxy's reporting controller.
const kubeProxy = "kube-proxy"

// birthCry sends the event of the proxy's start: server.go's birthCry,
// Recorder.Eventf(NodeRef, nil, Normal, "Starting", "StartKubeProxy", "").
//
// It is one direct Create, not client-go's events broadcaster as upstream
// uses: a broadcaster starts goroutines of its own for as long as it lives
// and caches events to make series of them, which for one event per start
// buys nothing and across thousands of proxies costs much. The event is
// the one upstream's recorder makes (makeEvent in
// client-go/tools/events/event_recorder.go), and a failure is logged, not
// fatal, as upstream's is; unlike the broadcaster, it is not retried.
func (p *Proxy) birthCry(ctx context.Context) {
	ev := p.birthCryEvent()
	if _, err := p.cfg.Client.EventsV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).Error(err, "Could not send the event of kube-proxy's start", "reason", ev.Reason)
	}
}

func (p *Proxy) birthCryEvent() *eventsv1.Event {
	node := p.cfg.NodeName
	now := p.clock.Now()
	return &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name: util.GenerateEventName(node, now.UnixNano()),
			// A Node is not namespaced: its events go to "default".
			Namespace: metav1.NamespaceDefault,
		},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: kubeProxy,
		// Upstream's is kube-proxy-<hostname>; an emulated node's host
		// name is its node name.
		ReportingInstance: kubeProxy + "-" + node,
		Action:            "StartKubeProxy",
		Reason:            "Starting",
		// server.go's NodeRef, which in 1.37 carries no UID (some earlier
		// releases set it to the node name, as the kubelet's does).
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node},
		Type:      corev1.EventTypeNormal,
	}
}
