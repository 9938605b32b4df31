// Package reports turns what a fleetlet run measured into its result: it
// collects per-pod milestones and API traffic while the run goes on, builds
// latency histograms from them, and writes and renders the versioned report.
//
// Measurements arrive through small, concurrency-safe sinks that sit in the
// hot path of thousands of agents (Recorder, implemented by Collector, and
// APICounter at the client transport); everything else here runs once, at the
// end of a run. The package knows nothing of agents' internals.
package reports
