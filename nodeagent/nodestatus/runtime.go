package nodestatus

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's runtime sync: its updateRuntimeUp asks the runtime's Status
// every RuntimeUpPeriod, and its runtime state counts the runtime as down
// once the last Status that found it ready is MaxWaitForContainerRuntime
// old (maxWaitForContainerRuntime). A runtime that stops answering leaves
// the node Ready for that long.
const (
	RuntimeUpPeriod            = 5 * time.Second
	MaxWaitForContainerRuntime = 30 * time.Second
)

// The kubelet's runtime state errors, which the Ready condition's message
// carries.
var (
	errRuntimeNotSynced = errors.New("container runtime status check may not have completed yet")
	errRuntimeDown      = errors.New("container runtime is down")
	errNetworkUnknown   = errors.New("network state unknown")
)

// RuntimeInfo is what a ready runtime's CRI Status says about itself:
// status.runtimeHandlers and status.features.
type RuntimeInfo struct {
	Handlers []corev1.NodeRuntimeHandler
	// Features is nil when the runtime reports none; the node then keeps
	// the features it reported before, as the kubelet's NodeFeatures setter.
	Features *corev1.NodeFeatures
}

// HealthCheck is one of the kubelet's runtime health checks: the PLEG's,
// whose failure makes the node NotReady with "<Name> is not healthy: <err>".
type HealthCheck struct {
	Name    string
	Healthy func() (bool, error)
}

// RuntimeSync is the kubelet's runtimeState: what the periodic CRI Status
// calls (Update, the kubelet's updateRuntimeUp) found, from which State
// derives the node's readiness at each status update. Its methods are safe
// for concurrent use.
type RuntimeSync struct {
	mu sync.Mutex
	// lastSync is when a Status last found the runtime ready (zero:
	// never); runtimeErr and networkErr are what the last answered Status
	// said was not ready. A Status that fails changes none of them, so
	// only time makes the runtime count as down.
	lastSync   time.Time
	runtimeErr error
	networkErr error
	// info is what the runtime said of itself when last ready.
	info *RuntimeInfo
}

// NewRuntimeSync returns the state of a runtime not asked yet: its network
// state is unknown, as the kubelet's newRuntimeState.
func NewRuntimeSync() *RuntimeSync { return &RuntimeSync{networkErr: errNetworkUnknown} }

// Update records the answer of a CRI Status call made at now, as the
// kubelet's updateRuntimeUp: the network's readiness is taken from every
// answer; the runtime's handlers and features, and the time of the sync,
// only from one that says the runtime is ready. It returns the call's
// error, or the answer's, for the caller to log; a failed call changes
// nothing.
func (s *RuntimeSync) Update(resp *runtimeapi.StatusResponse, err error, now time.Time) error {
	if err != nil {
		return err
	}
	if resp.GetStatus() == nil {
		return errors.New("runtime status is nil")
	}
	var runtimeReady, networkReady *runtimeapi.RuntimeCondition
	for _, c := range resp.GetStatus().GetConditions() {
		switch c.Type {
		case runtimeapi.RuntimeReady:
			runtimeReady = c
		case runtimeapi.NetworkReady:
			networkReady = c
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A condition the runtime does not report counts as not ready.
	if networkReady == nil || !networkReady.Status {
		s.networkErr = fmt.Errorf("container runtime network not ready: %s", conditionString(networkReady))
	} else {
		s.networkErr = nil
	}
	if runtimeReady == nil || !runtimeReady.Status {
		s.runtimeErr = fmt.Errorf("container runtime not ready: %s", conditionString(runtimeReady))
		return s.runtimeErr
	}
	s.runtimeErr = nil
	s.info = runtimeInfo(resp)
	s.lastSync = now
	return nil
}

// conditionString is the kubelet's RuntimeCondition.String, "<nil>" for a
// condition missing from the answer.
func conditionString(c *runtimeapi.RuntimeCondition) string {
	if c == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s=%t reason:%s message:%s", c.Type, c.Status, c.Reason, c.Message)
}

// State is the runtime's part of the node status at now, as the kubelet's
// ReadyCondition reads its runtime state: not ready while a Status has
// never found the runtime ready or the last that did is
// MaxWaitForContainerRuntime old, while a check fails, or while the last
// answer said the runtime or its network is not ready, with every reason
// in the message in the kubelet's order and form ("[a, b]" for more than
// one). Runtime is what the runtime said of itself when last ready. The
// pressure conditions are for the caller to add.
func (s *RuntimeSync) State(now time.Time, checks ...HealthCheck) RuntimeState {
	s.mu.Lock()
	lastSync, runtimeErr, networkErr, info := s.lastSync, s.runtimeErr, s.networkErr, s.info
	s.mu.Unlock()
	var errs []error
	switch {
	case lastSync.IsZero():
		errs = append(errs, errRuntimeNotSynced)
	case !lastSync.Add(MaxWaitForContainerRuntime).After(now):
		errs = append(errs, errRuntimeDown)
	}
	for _, c := range checks {
		if ok, err := c.Healthy(); !ok {
			errs = append(errs, fmt.Errorf("%s is not healthy: %v", c.Name, err))
		}
	}
	errs = append(errs, runtimeErr, networkErr)
	st := RuntimeState{Ready: true, Runtime: info}
	if err := utilerrors.NewAggregate(errs); err != nil {
		st.Ready, st.Message = false, err.Error()
	}
	return st
}

// runtimeInfo is the kubelet's toKubeRuntimeStatus followed by its
// RuntimeHandlers and NodeFeatures setters: every handler's two features
// are set, false when the runtime does not say, and the handlers are
// sorted by name, so that their order never reads as a change.
func runtimeInfo(resp *runtimeapi.StatusResponse) *RuntimeInfo {
	info := &RuntimeInfo{Handlers: make([]corev1.NodeRuntimeHandler, len(resp.GetRuntimeHandlers()))}
	for i, h := range resp.GetRuntimeHandlers() {
		rro, userns := h.GetFeatures().GetRecursiveReadOnlyMounts(), h.GetFeatures().GetUserNamespaces()
		info.Handlers[i] = corev1.NodeRuntimeHandler{
			Name:     h.GetName(),
			Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &rro, UserNamespaces: &userns},
		}
	}
	slices.SortStableFunc(info.Handlers, func(a, b corev1.NodeRuntimeHandler) int { return strings.Compare(a.Name, b.Name) })
	if f := resp.GetFeatures(); f != nil {
		sgp := f.GetSupplementalGroupsPolicy()
		info.Features = &corev1.NodeFeatures{SupplementalGroupsPolicy: &sgp}
	}
	return info
}
