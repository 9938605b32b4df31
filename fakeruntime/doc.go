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
// In-process callers get the runtime's own label and annotation maps in
// what the list, status and stats calls return: the maps are copied once,
// when a sandbox or container is created, and never written after, so
// sharing them is safe for readers, and saves a copy per object per call
// (every PLEG relist and every stats scrape lists every container). A
// caller must not modify them; the kubelet's code does not. Over the
// socket, gRPC serialises them as always.
//
// Nothing runs: containers are records whose state changes when the agent
// calls the API, or when their behaviour says so. Where CRI leaves room, the
// Runtime behaves like containerd, so that an agent written against the fake
// also works against containerd. A container's status names its image by
// its first repo tag and its image_ref by the image's first repo digest (the
// kubelet's imageID), and reports the user containerd 2 reports: the
// config's runAsUser and runAsGroup, else root and group 0 (the fake's
// images have no USER and no /etc/group memberships), with the primary
// group and the config's supplemental groups, sorted, as its groups.
//
// # Behaviour model
//
// Every simulated duration and fault is data, not code, and is measured on
// the injected clock, so tests and replays control time. A container's state
// is a pure function of its behaviour, its start time and the time asked
// about (see model.go): it is worked out whenever the runtime is asked
// (ListContainers, ContainerStatus, ExecSync, ProbeNetwork, the stats calls,
// ContainerLogs), never by a timer, so idle containers cost nothing. The one
// exception is GetContainerEvents: while it has a subscriber, each running
// container that will exit by itself has a timer on the clock, so that its
// exit event comes on time.
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
//	memory         usage curves (below) of the memory working set in bytes,
//	cpu            of CPU in cores, of the number of processes (default 1)
//	pids           and of the bytes written to the writable layer; they
//	writableLayer  feed the CRI stats calls. A curve set in the annotation
//	               replaces the node's default curve whole
//	logs           {every, line}: a line printed every "every" while the
//	               container runs (see ContainerLogs for every line)
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
// And a pod whose "cache" container uses a quarter of a core, starts at
// 64 MiB and leaks 1 MiB a second, jumps to 200 MiB under load at 30 s and,
// with a 256 MiB limit, is OOM-killed 86 s after it started, logging a line
// every 10 s until then:
//
//	fleetlet.io/behaviour: |
//	  cache:
//	    cpu: {start: 250m}
//	    memory: {start: 64Mi, perSecond: 1Mi, steps: [{after: 30s, value: 200Mi}]}
//	    logs: {every: 10s, line: "cache: serving"}
//
// # Usage curves
//
// A usage curve is {start, perSecond, steps, max}, its levels as Kubernetes
// quantities ("64Mi", "250m", "10"). Its value t after the container started
// is the level of the last step at or before t ({after, value}, sorted by
// after), or start before any step, plus perSecond (which may be negative)
// times the time since that step, kept between 0 and max (no cap when
// unset). Constant usage is a start alone, a leak a perSecond, a spike a
// step up and a step back down.
//
// The CPU curve is the rate (usageNanoCores); usageCoreNanoSeconds is its
// integral over the time the container has run. Memory is modelled as
// anonymous memory: usageBytes and rssBytes equal the working set. A
// container whose working set reaches its memory limit (the container
// config's linux.resources.memoryLimitInBytes, when positive) is killed then,
// as the kernel's OOM killer would: it exits with code 137 and reason
// OOMKilled, at the instant a step takes it past the limit or its growth
// reaches the limit, or at its runFor if that comes first. An exited
// container reports the memory, CPU time and writable layer it had when it
// exited; a removed one nothing. Inodes are estimated as one per 16 KiB.
//
// # Stats, logs and events
//
// ContainerStats, ListContainerStats, PodSandboxStats, ListPodSandboxStats
// and ImageFsInfo report the usage curves at the clock's time (stats.go
// says how a pod adds up its containers). ContainerLogs, not part of CRI,
// computes a container's log lines from its behaviour, for the node's
// kubelet API; nothing is written or stored per line. GetContainerEvents
// streams container and sandbox events for evented PLEG, including the
// exits the behaviour decides; a subscriber that falls 1024 events behind
// loses the newer ones rather than slow the runtime.
//
// # Node faults and reboots
//
// A Fault (SetFault) is what is wrong with the whole node while a load
// profile runs, as opposed to one pod's behaviour: containerd down (every
// CRI call fails Unavailable, with the error a kubelet sees for a dead
// socket), a slow node (latencies multiplied, a delay added to every call,
// the PLEG's relists included), a registry refusing every pull, a missing
// CNI plugin. It reaches the calls that start after it is set; calls
// already waiting out a latency finish as they began. Reboot is the node's
// power cycle: sandboxes and containers are gone, images and the pod CIDR
// stay, and calls in flight fail Unavailable without committing. Neither
// touches what a kubelet reaches without CRI: ProbeNetwork, ContainerLogs
// and the socket's side channel answer while the node is Down.
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
