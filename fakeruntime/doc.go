// Package fakeruntime is an in-memory CRI v1 runtime and image service: one
// Runtime stands in for containerd on one emulated node.
//
// A Runtime implements the kubelet's internal CRI interfaces
// (internalapi.RuntimeService and internalapi.ImageManagerService), so a node
// agent can call it in-process with no gRPC and no request structs: that is
// the cheap path for thousands of nodes in one process. Serve exposes the same
// Runtime on a unix socket as a real CRI v1 gRPC server, for k8s.io/cri-client
// and crictl.
//
// Nothing runs: containers are records whose state changes when the agent
// calls the API, or when their behaviour says so. Where CRI leaves room, the
// Runtime behaves like containerd, so that an agent written against the fake
// also works against containerd.
//
// # Behaviour model
//
// Every simulated duration and fault is data, not code, and is measured on
// the injected clock, so tests and replays control time. A container's state
// is a pure function of its behaviour, its start time and the time asked
// about (see model.go): it is worked out whenever the runtime is asked
// (ListContainers, ContainerStatus, ExecSync, ProbeNetwork), never by a timer,
// so idle containers cost nothing.
//
// A container's behaviour comes from three places. A field set in a more
// specific place wins, field by field:
//
//  1. The node's Behaviour (Config.Behaviour, from the load profile): its
//     latencies, Behaviour.Containers (the default for every container) and
//     Behaviour.Images (keyed by image reference, as written in the pod or
//     in any spelling that normalises to the same name).
//  2. The pod annotation fleetlet.io/behaviour, entry "*": for every
//     container of the pod that the annotation does not name.
//  3. The same annotation, entry named after the container.
//
// A named entry replaces the "*" entry for its container; both merge over the
// node's default. The behaviour is resolved when the container is created, so
// each restart (a new container, attempt+1) follows it from its own start: a
// runFor with a non-zero exitCode gives a crash loop.
//
// # The fleetlet.io/behaviour annotation
//
// The value is JSON or YAML: a mapping from container name (or "*") to a
// ContainerBehaviour. Durations are Go duration strings ("500ms", "1m30s").
// Every field is optional, and a field given as zero or as an empty list
// still overrides the default. Unknown fields are errors: a malformed value
// makes CreateContainer fail with an error that names the annotation, the
// pod and the problem, which the agent reports as CreateContainerError.
//
//	runFor         how long the container runs once started before it exits
//	               by itself; "0s" or absent: until stopped
//	exitCode       its exit code then (0-255): 0 reads as reason Completed,
//	               anything else as Error
//	createLatency  how long CreateContainer, StartContainer and a graceful
//	startLatency   StopContainer take for this container, overriding the
//	stopLatency    node's latencies
//	readiness      outcomes over time of the network probes (httpGet,
//	liveness       tcpSocket, grpc) an emulated node cannot send: a list of
//	startup        {after, succeed} steps sorted by after, the time since the
//	               container started; before the first step, and with no
//	               steps, the probe succeeds
//	exec           ExecSync results: a list of {command, steps, stdout,
//	               exitCode}. command is the arguments joined with single
//	               spaces, or "*" for any; the first exact match wins, then
//	               the first "*". The command succeeds (exit 0) or fails
//	               (exitCode, default 1) as its steps say, and prints stdout
//	               either way. Unmatched commands exit 0 silently.
//	jitter         a fraction (0 to 1) by which runFor and the latencies
//	               above vary per container, drawn from the runtime's seed
//	               and the container's ID, so that a run replays
//
// For example, a pod whose "app" container crashes after 30 s with exit code
// 1, and whose other containers are unready for their first 10 s and fail
// their exec liveness probe after 2 minutes:
//
//	metadata:
//	  annotations:
//	    fleetlet.io/behaviour: |
//	      app:
//	        runFor: 30s
//	        exitCode: 1
//	      "*":
//	        readiness: [{after: 0s, succeed: false}, {after: 10s, succeed: true}]
//	        exec:
//	          - command: cat /tmp/healthy
//	            steps: [{after: 2m, succeed: false}]
//
// # The fleetlet.io/pull-error annotation
//
// "unauthorized" or "notfound" makes every PullImage for the pod fail, after
// the pull latency, with containerd's error: code Unknown and "failed to pull
// and unpack image ...: pull access denied, repository does not exist or may
// require authorization: server message: insufficient_scope: authorization
// failed", or code NotFound and "...: not found". Behaviour.Images can fail
// one image on every pod the same way (ImageBehaviour.PullError).
package fakeruntime
