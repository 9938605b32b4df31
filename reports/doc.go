// Package reports turns what a fleetlet run measured into its result: it
// collects per-pod milestones and API traffic while the run goes on, builds
// latency histograms from them, and writes and renders the versioned report.
//
// Measurements arrive through small, concurrency-safe sinks that sit in the
// hot path of thousands of agents (Recorder, implemented by Collector, and
// APICounter at the client transport); everything else here runs once, at the
// end of a run. The package knows nothing of agents' internals.
//
// At the end of a run, a report (Report, the schema of report.json) is built
// from: the Collector's phases (DefaultPhases) and pod startup SLIs
// (SLIPhases, under clusterloader2's names) and its per-second PodSeries; the
// APICounter's table and RequestSeries; the control plane's own /metrics,
// scraped before and after the run (Scrape, Diff) for the apiserver's request
// latencies and the scheduler's throughput; and the SLO verdicts
// (EvaluateSLOs, against SLOThresholds). It is written as JSON (WriteJSON)
// and rendered for the terminal (RenderSummary), as Markdown (RenderMarkdown)
// and as one self-contained HTML file with charts (RenderHTML); all three
// read one view of the report (view.go), built section by section by pure
// functions of it, so that they say the same things in the same words.
// Reports of several processes merge exactly (Merge); two runs compare
// (Compare, RenderComparison). When a fleet's agents run in other processes
// than the load driver (shards), the driver imports their Collectors'
// stamps (Export, Import) moved onto its own clock by the offsets it
// measured (MeasureClock, ShardClock), so that phases between the two are
// computed; Report.Shards says by how much.
package reports
