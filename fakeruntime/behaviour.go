package fakeruntime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The behaviour model's data types. Package documentation describes how they
// combine; model.go holds the pure functions that turn them into states.

const (
	// AnnotationBehaviour is the pod annotation that carries a PodBehaviour,
	// as JSON or YAML.
	AnnotationBehaviour = "fleetlet.io/behaviour"
	// AnnotationPullError is the pod annotation that makes every PullImage
	// for the pod fail: PullErrorUnauthorized or PullErrorNotFound.
	AnnotationPullError = "fleetlet.io/pull-error"

	// PullErrorUnauthorized fails a pull as a registry that refuses the
	// credentials (or has no such repository) does.
	PullErrorUnauthorized = "unauthorized"
	// PullErrorNotFound fails a pull as a registry without the tag does.
	PullErrorNotFound = "notfound"

	// Wildcard is the PodBehaviour key for every container the annotation
	// does not name, and the ExecBehaviour command that matches any command.
	Wildcard = "*"
)

// Duration is a time.Duration that JSON and YAML spell as a Go duration
// string ("500ms", "1m30s"), as Kubernetes does: integer nanoseconds in a
// pod annotation would be unreadable and easy to get wrong by 10^9.
type Duration time.Duration

// String returns the duration as time.Duration prints it.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string. A number is refused rather than
// guessed at: "30" could mean seconds or nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration must be a string such as \"30s\" or \"1m30s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ContainerBehaviour is how one container behaves once the agent starts it.
// Every field is optional: an unset field (nil) falls back to the next, less
// specific source (see the package documentation), so a pod can override
// one field of the profile's default and keep the others. A set field wins
// even when it is zero: runFor "0s" over a default of "30s" means "runs until
// stopped", and an empty list of steps clears the default's steps.
type ContainerBehaviour struct {
	// RunFor is how long the container runs after it starts before it exits
	// by itself; 0 means it runs until stopped.
	RunFor *Duration `json:"runFor,omitempty"`
	// ExitCode is what the container exits with when RunFor elapses: 0
	// reads as reason Completed, anything else as Error. Default 0.
	ExitCode *int32 `json:"exitCode,omitempty"`
	// CreateLatency, StartLatency and StopLatency override the node's
	// ContainerCreateLatency, ContainerStartLatency and StopLatency.
	CreateLatency *Duration `json:"createLatency,omitempty"`
	StartLatency  *Duration `json:"startLatency,omitempty"`
	StopLatency   *Duration `json:"stopLatency,omitempty"`
	// Readiness, Liveness and Startup are the outcomes over time of the
	// network probes (httpGet, tcpSocket, grpc) that an emulated node cannot
	// send: ProbeNetwork answers from them. No steps: the probe succeeds.
	// (Lists use omitzero so that an empty list, which clears a default,
	// survives a round trip.)
	Readiness []ProbeStep `json:"readiness,omitzero"`
	Liveness  []ProbeStep `json:"liveness,omitzero"`
	Startup   []ProbeStep `json:"startup,omitzero"`
	// Exec are the results of ExecSync (exec probes, kubectl exec) by
	// command. A command matched by none exits 0 with no output.
	Exec []ExecBehaviour `json:"exec,omitzero"`
	// Jitter is the fraction (0 to 1) by which RunFor and the container's
	// create, start and stop latencies vary from one container to the next:
	// a duration d becomes one in [d×(1-jitter), d×(1+jitter)). The
	// variation is a hash of the runtime's seed and the container's ID, so a
	// run with the same seed replays. Default 0.
	Jitter *float64 `json:"jitter,omitempty"`
	// Memory is the container's memory working set in bytes over its run
	// time ("64Mi"). When it reaches the container's memory limit the
	// container is OOM-killed (exit code 137, reason OOMKilled). Unset: 0.
	Memory *UsageCurve `json:"memory,omitempty"`
	// CPU is the container's CPU use in cores over its run time ("250m");
	// its integral is the cumulative CPU time. Unset: 0.
	CPU *UsageCurve `json:"cpu,omitempty"`
	// Pids is the number of processes over its run time. Unset: 1.
	Pids *UsageCurve `json:"pids,omitempty"`
	// WritableLayer is the size in bytes of what the container has written
	// to its writable layer, over its run time. Unset: 0.
	WritableLayer *UsageCurve `json:"writableLayer,omitempty"`
	// Logs, when set, makes the container print a line at a fixed period
	// while it runs (see ContainerLogs).
	Logs *LogBehaviour `json:"logs,omitempty"`
}

// UsageCurve is a resource's use over a container's run time, in the
// resource's unit as a quantity ("64Mi" bytes, "250m" cores, "10"
// processes). Its value at time t after the start is the level of the last
// step at or before t (Start before any step) plus PerSecond times the time
// since that step (or since the start), kept between 0 and Max. A constant
// is just Start; a leak is a PerSecond; a load spike is a step up and a
// step back down.
type UsageCurve struct {
	// Start is the level at the start. Default 0.
	Start *resource.Quantity `json:"start,omitempty"`
	// PerSecond is how much the level grows each second, from the start or
	// from the last step; negative shrinks it. Default 0.
	PerSecond *resource.Quantity `json:"perSecond,omitempty"`
	// Steps set the level at given times since the start, sorted by After.
	Steps []UsageStep `json:"steps,omitzero"`
	// Max caps the value; unset: no cap.
	Max *resource.Quantity `json:"max,omitempty"`
}

// UsageStep sets a UsageCurve's level to Value After the start.
type UsageStep struct {
	After Duration          `json:"after"`
	Value resource.Quantity `json:"value"`
}

// LogBehaviour is what a running container prints besides the lines every
// container prints (see ContainerLogs).
type LogBehaviour struct {
	// Every is the period of the line, from the start: the first line comes
	// Every after the container started. Must be positive.
	Every Duration `json:"every"`
	// Line is the text printed, on stdout; empty prints
	// `fleetlet-fake: container "NAME" is running`.
	Line string `json:"line,omitempty"`
}

// ProbeStep is one step of a schedule: from After (time since the container
// started) on, the probe succeeds if Succeed. Steps are sorted by After;
// before the first step the probe succeeds. Steps at 0s fail, 30s succeed,
// 60s fail make a container ready for the second half-minute only.
type ProbeStep struct {
	After   Duration `json:"after"`
	Succeed bool     `json:"succeed"`
}

// ExecBehaviour is the result of ExecSync for the commands Command matches.
type ExecBehaviour struct {
	// Command is the command's arguments joined with single spaces, exactly
	// ("cat /tmp/healthy"), or Wildcard ("*") for any command. The first
	// exact match wins, then the first wildcard.
	Command string `json:"command"`
	// Steps say over time whether the command succeeds (exit 0) or fails
	// (ExitCode); none: it always succeeds.
	Steps []ProbeStep `json:"steps,omitzero"`
	// Stdout is what the command prints, whether it succeeds or fails.
	Stdout string `json:"stdout,omitempty"`
	// ExitCode is what a failing step exits with; 0 means 1, the exit code
	// of a failing shell test.
	ExitCode int32 `json:"exitCode,omitempty"`
}

// ImageBehaviour is how the registry serves one image.
type ImageBehaviour struct {
	// PullError makes every PullImage of the image fail, after the pull
	// latency, with the error containerd reports: PullErrorUnauthorized or
	// PullErrorNotFound.
	PullError string `json:"pullError,omitempty"`
	// PullLatency overrides the node's PullLatency for this image.
	PullLatency *Duration `json:"pullLatency,omitempty"`
	// SizeBytes overrides the node's ImageSizeBytes for this image.
	SizeBytes int64 `json:"sizeBytes,omitempty"`
}

// PodBehaviour is the value of the AnnotationBehaviour annotation: container
// name to behaviour, with Wildcard for every container not named.
type PodBehaviour map[string]ContainerBehaviour

// ParsePodBehaviour parses and validates the value of the
// AnnotationBehaviour annotation. JSON and YAML are both accepted; unknown
// and repeated fields are errors, so that a typo does not silently do
// nothing. An empty value is no behaviour. The error is one line, fit for an
// event.
func ParsePodBehaviour(value string) (PodBehaviour, error) {
	raw, err := yaml.YAMLToJSON([]byte(value))
	if err != nil {
		return nil, err
	}
	// sigs.k8s.io/json rather than encoding/json: it matches keys case-
	// sensitively, as the API server does, and names the path of an
	// unknown field.
	var pb PodBehaviour
	strictErrs, err := sigsjson.UnmarshalStrict(raw, &pb)
	if err != nil {
		return nil, err
	}
	if len(strictErrs) > 0 {
		return nil, utilerrors.NewAggregate(strictErrs)
	}
	if errs := pb.Validate(); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return pb, nil
}

// Validate checks every container's behaviour; paths start at the
// container's name ("app.runFor").
func (pb PodBehaviour) Validate() field.ErrorList {
	var errs field.ErrorList
	for _, name := range slices.Sorted(maps.Keys(pb)) {
		errs = append(errs, pb[name].Validate(field.NewPath(name))...)
	}
	return errs
}

// forContainer returns the behaviour the pod gives the container named name,
// and whether it gives one.
func (pb PodBehaviour) forContainer(name string) (ContainerBehaviour, bool) {
	if cb, ok := pb[name]; ok {
		return cb, true
	}
	cb, ok := pb[Wildcard]
	return cb, ok
}

// Validate reports values the runtime would otherwise clamp or ignore.
func (b ContainerBehaviour) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, d := range []struct {
		name string
		v    *Duration
	}{
		{"runFor", b.RunFor},
		{"createLatency", b.CreateLatency},
		{"startLatency", b.StartLatency},
		{"stopLatency", b.StopLatency},
	} {
		if d.v != nil && *d.v < 0 {
			errs = append(errs, field.Invalid(path.Child(d.name), *d.v, "must not be negative"))
		}
	}
	if b.ExitCode != nil {
		errs = append(errs, validateExitCode(*b.ExitCode, path.Child("exitCode"))...)
	}
	if b.Jitter != nil && !(*b.Jitter >= 0 && *b.Jitter <= 1) { // also rejects NaN
		errs = append(errs, field.Invalid(path.Child("jitter"), *b.Jitter, "must be a fraction between 0 and 1"))
	}
	errs = append(errs, b.Memory.validate(path.Child("memory"))...)
	errs = append(errs, b.CPU.validate(path.Child("cpu"))...)
	errs = append(errs, b.Pids.validate(path.Child("pids"))...)
	errs = append(errs, b.WritableLayer.validate(path.Child("writableLayer"))...)
	if b.Logs != nil && b.Logs.Every <= 0 {
		errs = append(errs, field.Invalid(path.Child("logs", "every"), b.Logs.Every, "must be positive"))
	}
	errs = append(errs, validateSteps(b.Readiness, path.Child("readiness"))...)
	errs = append(errs, validateSteps(b.Liveness, path.Child("liveness"))...)
	errs = append(errs, validateSteps(b.Startup, path.Child("startup"))...)
	seen := make(map[string]bool, len(b.Exec))
	for i, e := range b.Exec {
		ep := path.Child("exec").Index(i)
		switch {
		case e.Command == "":
			errs = append(errs, field.Required(ep.Child("command"), `the command's arguments joined with single spaces, or "*" for any command`))
		case seen[e.Command]:
			errs = append(errs, field.Duplicate(ep.Child("command"), e.Command))
		}
		seen[e.Command] = true
		errs = append(errs, validateSteps(e.Steps, ep.Child("steps"))...)
		errs = append(errs, validateExitCode(e.ExitCode, ep.Child("exitCode"))...)
	}
	return errs
}

// validate checks a curve, which may be nil (unset). Levels are never
// negative; the growth may be, to model memory given back.
func (u *UsageCurve) validate(path *field.Path) field.ErrorList {
	if u == nil {
		return nil
	}
	var errs field.ErrorList
	nonNegative := func(q *resource.Quantity, p *field.Path) {
		if q != nil && q.Sign() < 0 {
			errs = append(errs, field.Invalid(p, q.String(), "must not be negative"))
		}
	}
	nonNegative(u.Start, path.Child("start"))
	nonNegative(u.Max, path.Child("max"))
	for i, s := range u.Steps {
		p := path.Child("steps").Index(i)
		nonNegative(&s.Value, p.Child("value"))
		switch {
		case s.After < 0:
			errs = append(errs, field.Invalid(p.Child("after"), s.After, "must not be negative"))
		case i > 0 && s.After < u.Steps[i-1].After:
			errs = append(errs, field.Invalid(p.Child("after"), s.After,
				fmt.Sprintf("steps must be sorted by after, and this one comes after a step at %s", u.Steps[i-1].After)))
		}
	}
	return errs
}

func validateExitCode(code int32, path *field.Path) field.ErrorList {
	if code < 0 || code > 255 {
		return field.ErrorList{field.Invalid(path, code, "must be between 0 and 255, as a process's exit status is")}
	}
	return nil
}

// validateSteps requires sorted steps rather than sorting them: a schedule
// written out of order is more likely a mistake than an intent.
func validateSteps(steps []ProbeStep, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, s := range steps {
		switch {
		case s.After < 0:
			errs = append(errs, field.Invalid(path.Index(i).Child("after"), s.After, "must not be negative"))
		case i > 0 && s.After < steps[i-1].After:
			errs = append(errs, field.Invalid(path.Index(i).Child("after"), s.After,
				fmt.Sprintf("steps must be sorted by after, and this one comes after a step at %s", steps[i-1].After)))
		}
	}
	return errs
}

// Validate reports values the runtime would otherwise ignore.
func (b ImageBehaviour) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !validPullError(b.PullError) {
		errs = append(errs, field.NotSupported(path.Child("pullError"), b.PullError, []string{PullErrorUnauthorized, PullErrorNotFound}))
	}
	if b.PullLatency != nil && *b.PullLatency < 0 {
		errs = append(errs, field.Invalid(path.Child("pullLatency"), *b.PullLatency, "must not be negative"))
	}
	if b.SizeBytes < 0 {
		errs = append(errs, field.Invalid(path.Child("sizeBytes"), b.SizeBytes, "must not be negative"))
	}
	return errs
}

// ValidatePullError checks a value of the AnnotationPullError annotation at
// path as PullImage does, so that a profile can be checked before any pod
// runs: PullErrorUnauthorized, PullErrorNotFound, or empty for none.
func ValidatePullError(value string, path *field.Path) field.ErrorList {
	if validPullError(value) {
		return nil
	}
	return field.ErrorList{field.NotSupported(path, value, []string{PullErrorUnauthorized, PullErrorNotFound})}
}

// validPullError reports whether reason is a pull error or empty (none).
func validPullError(reason string) bool {
	return reason == "" || reason == PullErrorUnauthorized || reason == PullErrorNotFound
}

// over returns b with every field b leaves unset taken from base: the merge
// of a pod's annotation over the profile's default.
func (b ContainerBehaviour) over(base ContainerBehaviour) ContainerBehaviour {
	b.RunFor = orElse(b.RunFor, base.RunFor)
	b.ExitCode = orElse(b.ExitCode, base.ExitCode)
	b.CreateLatency = orElse(b.CreateLatency, base.CreateLatency)
	b.StartLatency = orElse(b.StartLatency, base.StartLatency)
	b.StopLatency = orElse(b.StopLatency, base.StopLatency)
	b.Jitter = orElse(b.Jitter, base.Jitter)
	// A curve replaces the default's curve whole: mixing one's start with
	// the other's steps would describe neither.
	b.Memory = orElse(b.Memory, base.Memory)
	b.CPU = orElse(b.CPU, base.CPU)
	b.Pids = orElse(b.Pids, base.Pids)
	b.WritableLayer = orElse(b.WritableLayer, base.WritableLayer)
	b.Logs = orElse(b.Logs, base.Logs)
	// A nil list is unset; an empty one is set (to no steps).
	if b.Readiness == nil {
		b.Readiness = base.Readiness
	}
	if b.Liveness == nil {
		b.Liveness = base.Liveness
	}
	if b.Startup == nil {
		b.Startup = base.Startup
	}
	if b.Exec == nil {
		b.Exec = base.Exec
	}
	return b
}

// deepCopy copies b, so that a Runtime shares no pointer or slice with its
// caller, who may reuse its Behaviour for the next node.
func (b ContainerBehaviour) deepCopy() ContainerBehaviour {
	b.RunFor = clonePtr(b.RunFor)
	b.ExitCode = clonePtr(b.ExitCode)
	b.CreateLatency = clonePtr(b.CreateLatency)
	b.StartLatency = clonePtr(b.StartLatency)
	b.StopLatency = clonePtr(b.StopLatency)
	b.Jitter = clonePtr(b.Jitter)
	b.Memory = b.Memory.deepCopy()
	b.CPU = b.CPU.deepCopy()
	b.Pids = b.Pids.deepCopy()
	b.WritableLayer = b.WritableLayer.deepCopy()
	b.Logs = clonePtr(b.Logs)
	// slices.Clone keeps nil nil and empty empty: both mean something.
	b.Readiness = slices.Clone(b.Readiness)
	b.Liveness = slices.Clone(b.Liveness)
	b.Startup = slices.Clone(b.Startup)
	b.Exec = slices.Clone(b.Exec)
	for i := range b.Exec {
		b.Exec[i].Steps = slices.Clone(b.Exec[i].Steps)
	}
	return b
}

func (u *UsageCurve) deepCopy() *UsageCurve {
	if u == nil {
		return nil
	}
	c := &UsageCurve{Steps: slices.Clone(u.Steps)}
	for _, q := range []struct{ src, dst **resource.Quantity }{{&u.Start, &c.Start}, {&u.PerSecond, &c.PerSecond}, {&u.Max, &c.Max}} {
		if *q.src != nil {
			v := (*q.src).DeepCopy()
			*q.dst = &v
		}
	}
	for i := range c.Steps {
		c.Steps[i].Value = c.Steps[i].Value.DeepCopy()
	}
	return c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func orElse[T any](v, fallback *T) *T {
	if v != nil {
		return v
	}
	return fallback
}

// validateImages checks the image behaviours and their keys, which must be
// image references, naming distinct images once normalised.
func validateImages(images map[string]ImageBehaviour, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	byName := make(map[string]string, len(images))
	for _, ref := range slices.Sorted(maps.Keys(images)) {
		p := path.Key(ref)
		errs = append(errs, images[ref].Validate(p)...)
		name, err := normaliseImageRef(ref)
		if err != nil {
			errs = append(errs, field.Invalid(p, ref, err.Error()))
			continue
		}
		if other, dup := byName[name]; dup {
			errs = append(errs, field.Duplicate(p, fmt.Sprintf("%s (the same image as %q)", name, other)))
			continue
		}
		byName[name] = ref
	}
	return errs
}

// errPodBehaviour is the error CreateContainer returns for a pod whose
// annotation does not parse.
func errPodBehaviour(podNamespace, podName string, err error) error {
	return fmt.Errorf("annotation %s of pod %s/%s is invalid: %w; fix the annotation (its format is in the fakeruntime package documentation)", AnnotationBehaviour, podNamespace, podName, err)
}

// joinFieldErrors is errors.Join over field errors, so callers can
// errors.As each *field.Error as with loadprofiles' errors.
func joinFieldErrors(errs field.ErrorList) error {
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}
