package reports

// SLIPhases are the pod startup SLIs under the names clusterloader2's
// PodStartupLatency measurement gives them, so that a fleetlet report reads
// side by side with a clusterloader2 one. They are measured from our
// monotonic milestones, not from the API's 1-second timestamps, so the same
// name here is the same interval, measured more precisely. Their names are
// part of the report schema. Read-only.
//
// pod_startup is the SLI of the upstream SLO "startup latency of schedulable
// stateless pods": it excludes pods that pulled an image (those with the
// PullStarted milestone), since the SLO leaves image pulls out of scope.
// The other SLIs keep every pod, as clusterloader2's do.
var SLIPhases = []PhaseSpec{
	{Name: SLICreateToSchedule, From: Created, To: Scheduled},
	{Name: SLIScheduleToRun, From: Scheduled, To: RunningReported},
	{Name: SLIRunToWatch, From: RunningReported, To: RunningObserved},
	{Name: SLIScheduleToWatch, From: Scheduled, To: RunningObserved},
	{Name: SLIPodStartup, From: Created, To: RunningObserved, ExcludeIf: []Milestone{PullStarted}},
}

// The names of SLIPhases, for callers that look one up in Report.SLIs.
const (
	SLICreateToSchedule = "create_to_schedule"
	SLIScheduleToRun    = "schedule_to_run"
	SLIRunToWatch       = "run_to_watch"
	SLIScheduleToWatch  = "schedule_to_watch"
	SLIPodStartup       = "pod_startup"
)
