// Package loadprofiles describes a load run and carries it out: the profile
// schema (node pools, fake runtime behaviour, phases), the built-in profiles
// embedded in the binary, validation whose errors name the offending field,
// and the Driver that executes a profile's phases against the API server while
// stamping each pod's milestones at the source. Phases create, wait for and
// delete pods (create, waitRunning, delete, waitGone, churn), idle (sleep), or
// put ClusterIP Services in front of the run's pods (services), which the
// Driver deletes when the run ends.
//
// It knows nothing of node agents or the fleet: it speaks only to the API
// server and to a reports.Recorder.
package loadprofiles
