package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"
)

// SchemaVersion names the shape of report.json. Any change that a reader of
// an older report would misread (a renamed field or phase, a changed unit)
// needs a new version.
const SchemaVersion = "fleetlet.io/v1alpha1"

// Report is the result of one run, written as report.json. Field names are
// lowerCamelCase; durations are milliseconds in float64 fields whose names end
// in Ms, with microsecond resolution; times are RFC 3339. Fields marked
// optional are left out of the JSON when empty, and were added after the
// first release of the schema: a reader must not require them.
type Report struct {
	// SchemaVersion names this shape: always SchemaVersion when written.
	SchemaVersion string `json:"schemaVersion"`
	// Profile is the load profile's name.
	Profile string `json:"profile"`
	// StartedAt and FinishedAt bound the run, wall clock; WallSeconds is the
	// time between them, measured on the monotonic clock.
	StartedAt   time.Time `json:"startedAt"`
	FinishedAt  time.Time `json:"finishedAt"`
	WallSeconds float64   `json:"wallSeconds"`
	// Nodes is the number of emulated nodes.
	Nodes int       `json:"nodes"`
	Pods  PodCounts `json:"pods"`
	// Phases are the per-pod latencies between milestones, in the order of
	// the PhaseSpecs they were built from (normally DefaultPhases).
	Phases []PhaseSummary `json:"phases"`
	// SLIs (optional) are the pod startup SLIs under clusterloader2's names,
	// built from SLIPhases, in that order.
	SLIs []PhaseSummary `json:"slis,omitempty"`
	// PodGroups (optional) split Phases and SLIs by the pods' groups: the
	// load driver puts each pod in the group of the profile phase that
	// created it (or created the object that owns it) and of its owning
	// kind, "Pod" for the driver's own pods. In the order the groups were
	// first seen.
	PodGroups []PodGroup `json:"podGroups,omitempty"`
	// Workloads (optional) are, per waitRunning phase and kind, how long the
	// run's objects took from their create, scale or update call to every
	// desired pod Running and their rollout done, one value per object
	// (Count is objects, not pods); named <phase>/<Kind>.
	Workloads []PhaseSummary `json:"workloads,omitempty"`
	// NetworkProgrammingNodes, with the network_programming SLI, says how
	// the nodes' own p99s spread.
	NetworkProgrammingNodes *NetworkProgrammingNodes `json:"networkProgrammingNodes,omitempty"`
	// API is the client-side view of the requests to the apiserver, as
	// APICounter.Snapshot returns it: the fleet's requests only.
	API []APIStat `json:"api"`
	// APIServerLatency (optional) is the server-side view: the apiserver's
	// own request latencies between the run's two scrapes of its /metrics,
	// for every client. See APICallLatency.
	APIServerLatency []APICallLatency `json:"apiServerLatency,omitempty"`
	// Scheduling (optional) is the scheduling throughput.
	Scheduling SchedulingStats `json:"scheduling,omitzero"`
	// Heartbeat (optional) is the fleet's heartbeat load and how late its
	// lease renewals came.
	Heartbeat *HeartbeatStats `json:"heartbeat,omitempty"`
	// Outages (optional) are the stretches of the run in which the API
	// server answered none of the fleet's requests, and what each cost.
	Outages []Outage `json:"outages,omitempty"`
	// Faults (optional) are the faults the profile's fault phases injected
	// into the fleet's nodes and what the control plane did about each, in
	// the order they started.
	Faults []Fault `json:"faults,omitempty"`
	// Shards (optional) are the processes whose agents the run's pods ran
	// on, when they were not the driver's own, and the clock offsets that
	// moved their stamps onto the driver's clock: phases between a
	// milestone of the driver and one of an agent are differences of the
	// two processes' clocks, corrected by these offsets. In the order the
	// shards were given.
	Shards []ShardClock `json:"shards,omitempty"`
	// Series (optional) are per-second time series of pods and requests.
	Series Series `json:"series,omitzero"`
	// SLOThresholds (optional) are the thresholds SLOs were checked
	// against, defaulted; absent when the SLOs were not checked.
	SLOThresholds *SLOThresholds `json:"sloThresholds,omitempty"`
	// SLOs (optional) are the verdicts of the SLO checks, per SLO and
	// subject; see CheckSLOs.
	SLOs  []SLOResult `json:"slos,omitempty"`
	Fleet FleetStats  `json:"fleet"`
	// Settings holds the agent settings that differ from the kubelet's
	// defaults, by their KubeletConfiguration names.
	Settings map[string]string `json:"settings,omitempty"`
	// Errors says what went wrong during the run. A run that fails still
	// writes its report, with what it measured until then.
	Errors []string `json:"errors,omitempty"`
}

// PodGroup is the pods of one group: their phases and SLIs, built from the
// same specs as the report's (DefaultPhases, SLIPhases), over the group's
// pods only.
type PodGroup struct {
	// Name is "<phase>/<Kind>": the profile phase that created the pods or
	// their owning object, and the object's kind ("Pod" for bare pods).
	Name   string         `json:"name"`
	Phases []PhaseSummary `json:"phases"`
	SLIs   []PhaseSummary `json:"slis"`
}

// PodCounts are the numbers of pods that reached the load driver's
// milestones.
type PodCounts struct {
	// Created: the driver's create call returned.
	Created int `json:"created"`
	// Running: the driver's watch saw the pod Running.
	Running int `json:"running"`
	// Deleted: the driver's delete call returned.
	Deleted int `json:"deleted"`
	// Gone: the driver's watch saw the pod removed.
	Gone int `json:"gone"`
}

// FleetStats is the cost of the fleet itself, measured in its own process.
type FleetStats struct {
	// PeakRSSBytes is the process's peak resident set size (VmHWM); 0 when
	// unknown.
	PeakRSSBytes int64 `json:"peakRSSBytes"`
	// Goroutines is the number of goroutines at the end of the run.
	Goroutines int `json:"goroutines"`
	// CPUSeconds is the user and system CPU time the process used.
	CPUSeconds float64 `json:"cpuSeconds"`
	// GCPercent is the Go collector's target (GOGC) the process ran
	// with, which sets how much of the RSS is headroom over live data; 0
	// when unknown, or when merged shards ran with different targets.
	GCPercent int `json:"gcPercent,omitempty"`
}

// WriteJSON writes r to path, creating its directory. The write is atomic: a
// temporary file in the same directory is written, synced and renamed over
// path, so a reader (or a crash) never sees half a report. The schemaVersion
// written is always SchemaVersion, whatever r holds: the document has this
// package's shape.
func WriteJSON(path string, r *Report) (err error) {
	doc := *r
	doc.SchemaVersion = SchemaVersion
	// Empty lists as [], not null, so that jq and other readers of a run that
	// stopped early need no special case.
	if doc.Phases == nil {
		doc.Phases = []PhaseSummary{}
	}
	if doc.API == nil {
		doc.API = []APIStat{}
	}
	data, err := json.MarshalIndent(&doc, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding report for %s: %w", path, err)
	}
	data = append(data, '\n')

	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing report: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing report: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("writing report %s: %w", tmp.Name(), err)
	}
	// CreateTemp makes the file 0600; a report is for everyone to read.
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("writing report %s: %w", tmp.Name(), err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("writing report %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("writing report %s: %w", tmp.Name(), err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing report: %w", err)
	}
	// Sync the directory so that the rename itself survives a crash. Some
	// filesystems cannot sync a directory; the report is written either way.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// ReadJSON reads a report written by WriteJSON. It refuses a document of
// another schemaVersion, or none, rather than misread it; and a file that is
// not a report, or a damaged one (see validate), with an error that says
// which and where, rather than one about Go types.
func ReadJSON(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading report: %w", err)
	}
	var head struct {
		SchemaVersion *string `json:"schemaVersion"`
	}
	headErr := json.Unmarshal(data, &head)
	var syntax *json.SyntaxError
	switch kind := jsonKind(data); {
	case len(data) == 0:
		return nil, fmt.Errorf("reading report %s: the file is empty, so it is damaged or not a report", path)
	case kind == "":
		return nil, fmt.Errorf("reading report %s: the file holds only white space, so it is damaged or not a report", path)
	case errors.As(headErr, &syntax):
		return nil, fmt.Errorf("reading report %s: not valid JSON (%s at byte %d of %d), so the file is damaged or not a report",
			path, strings.TrimPrefix(syntax.Error(), "json: "), syntax.Offset, len(data))
	case kind != "object":
		return nil, fmt.Errorf("reading report %s: not a fleetlet report (the file holds %s; a report is an object with a schemaVersion)", path, kind)
	case headErr != nil:
		var typ *json.UnmarshalTypeError
		if errors.As(headErr, &typ) {
			return nil, fmt.Errorf("reading report %s: not a fleetlet report (its schemaVersion is a JSON %s, not a string)", path, typ.Value)
		}
		return nil, fmt.Errorf("reading report %s: %v, so the file is damaged or not a report", path, headErr)
	case head.SchemaVersion == nil || *head.SchemaVersion == "":
		return nil, fmt.Errorf("reading report %s: no schemaVersion, so it is not a fleetlet report", path)
	case *head.SchemaVersion != SchemaVersion:
		return nil, &SchemaVersionError{Path: path, Got: *head.SchemaVersion}
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) && typ.Field != "" && typ.Type != nil {
			return nil, fmt.Errorf("reading report %s: %s holds a JSON %s where a report has %s, so the file is damaged or not a report",
				path, typ.Field, typ.Value, jsonKindOf(typ.Type))
		}
		return nil, fmt.Errorf("reading report %s: %v, so the file is damaged or not a report", path, err)
	}
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("reading report %s: %w: the file is damaged; use an undamaged copy of the report (or merge the shards again), or run the profile again", path, err)
	}
	return &r, nil
}

// jsonKind names the kind of the JSON value data begins with, as an error
// says it ("a JSON array"), "object" for an object, or "" for no value.
func jsonKind(data []byte) string {
	data = bytes.TrimLeft(data, " \t\r\n")
	if len(data) == 0 {
		return ""
	}
	switch c := data[0]; {
	case c == '{':
		return "object"
	case c == '[':
		return "a JSON array"
	case c == '"':
		return "a JSON string"
	case c == 't' || c == 'f':
		return "a JSON boolean"
	case c == 'n':
		return "JSON null"
	default:
		return "a JSON number"
	}
}

// jsonKindOf names the JSON a Go type is decoded from, for a reader of
// report.json who knows its fields but not this package's types.
func jsonKindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	default:
		return "another kind of value"
	}
}

// validate checks, once, what a report read from a file must hold for its
// readers (RenderSummary, Compare, Merge) to be right: every encoded
// histogram decodes, in the report's geometry, and holds as many values as
// the count stored beside it. A phase's count is its histogram's; an API
// row counts requests before their latency is recorded, and failed ones
// have none, so its histogram holds at most its count. The error names the
// field as it is in the JSON.
func (r *Report) validate() error {
	phases := func(field string, ps []PhaseSummary) error {
		for i, p := range ps {
			if err := checkHistogram(p.Histogram, int64(p.Count), true); err != nil {
				return fmt.Errorf("%s[%d] (%s): %w", field, i, p.Name, err)
			}
		}
		return nil
	}
	if err := phases("phases", r.Phases); err != nil {
		return err
	}
	if err := phases("slis", r.SLIs); err != nil {
		return err
	}
	for i, a := range r.API {
		if err := checkHistogram(a.Histogram, a.Count, false); err != nil {
			return fmt.Errorf("api[%d] (%s %s): %w", i, a.Verb, a.Label(), err)
		}
	}
	if hb := r.Heartbeat; hb != nil {
		if err := checkHistogram(hb.Lateness.Histogram, int64(hb.Lateness.Count), true); err != nil {
			return fmt.Errorf("heartbeat.lateness: %w", err)
		}
		if err := checkHistogram(hb.LeaseWriteLatency.Histogram, int64(hb.LeaseWriteLatency.Count), true); err != nil {
			return fmt.Errorf("heartbeat.leaseWriteLatency: %w", err)
		}
	}
	return nil
}

// SchemaVersionError is returned by ReadJSON for a report of a schema this
// build does not read; callers that compare reports across releases can find
// it with errors.As.
type SchemaVersionError struct {
	Path string
	Got  string
}

func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("reading report %s: schemaVersion %q is not supported (this fleetlet reads %q); use the fleetlet release that wrote it",
		e.Path, e.Got, SchemaVersion)
}
