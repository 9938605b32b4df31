// Package objects is the kind-agnostic part of the load driver's object
// phases: it renders clusterloader2-style object templates (Go text/template
// over YAML) into unstructured objects, stamps the run's labels on an object
// and on its pod template so that the driver's pod watch sees its pods,
// decides from an object's own status whether its controller's pods are all
// running (clusterloader2's WaitForControlledPodsRunning), and creates,
// scales, applies, reads and deletes objects of any kind the API server
// serves, custom resources included, through controller-runtime's client.
//
// Everything but Client is a pure function of its arguments, so that the
// decisions are tested with tables and no API server.
package objects
