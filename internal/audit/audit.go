// Package audit reads a kube-apiserver audit log (JSON lines of
// audit.k8s.io/v1 Events, as controlplane writes with Config.AuditLogPath)
// and sums it up per identity: requests by verb and resource, and the set of
// watches each identity holds, with their selectors normalized so that the
// sets of different nodes compare equal.
//
// Everything here is a pure function of the events; reading the file is
// apart (Read, ReadFile).
package audit

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// ReadFile reads the audit log at path.
func ReadFile(path string) ([]auditv1.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	events, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("audit: %s: %w", path, err)
	}
	return events, nil
}

// maxLine bounds one event's line. At Metadata level an event is a few
// hundred bytes to a few KiB (a long request URI, annotations).
const maxLine = 4 << 20

// Read reads JSON-lines audit events. A last line cut short (the API server
// still writing it) is ignored; any other line that does not parse is an
// error naming its number.
func Read(r io.Reader) ([]auditv1.Event, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var (
		events  []auditv1.Event
		pending error
	)
	for line := 1; sc.Scan(); line++ {
		if pending != nil {
			return nil, pending
		}
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var e auditv1.Event
		if err := json.Unmarshal(b, &e); err != nil {
			// An error only if another line follows.
			pending = fmt.Errorf("line %d: %w", line, err)
			continue
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return events, nil
}

// Request is one API request: the events sharing its audit ID, folded.
type Request struct {
	AuditID   string
	User      string
	UserAgent string
	SourceIPs []string
	Verb      string
	// Group, Resource, Subresource, Namespace and Name are the object
	// reference; for a non-resource request all are "" and Path is set.
	Group, Resource, Subresource, Namespace, Name string
	Path                                          string
	// RequestURI is as sent, with its query.
	RequestURI string
	// Code is the response code: ResponseComplete's, else ResponseStarted's.
	Code int32
	// Received is when the API server received the request.
	Received time.Time
	// Open marks a watch whose ResponseComplete is not in the log: still
	// streaming when the log was read.
	Open bool
}

// Requests folds events into one Request per audit ID, in the order the
// requests were received, and counts each request exactly once:
//   - A request that is not long-running has one event, ResponseComplete
//     (the policy omits RequestReceived; if present it is ignored).
//   - A watch has ResponseStarted when its stream begins and
//     ResponseComplete when it ends, minutes later. A watch counts once,
//     from its ResponseStarted event when there is one. Counting by
//     ResponseComplete would miss every watch still open when the log is
//     read, which is most of a node's (client-go re-opens them every 5 to
//     10 minutes), and would put a watch in the window in which it ended
//     rather than the one in which it was opened; counting both would count
//     each finished watch twice. Folding by audit ID makes this hold
//     whichever events the policy keeps: a watch refused before its stream
//     began (no ResponseStarted) still counts once, by ResponseComplete.
//
// Events at stage Panic count as the request's end.
func Requests(events []auditv1.Event) []Request {
	byID := map[string]*Request{}
	var order []*Request
	for i := range events {
		e := &events[i]
		if e.Stage == auditv1.StageRequestReceived {
			continue
		}
		id := string(e.AuditID)
		r := byID[id]
		if r == nil {
			r = newRequest(e)
			byID[id] = r
			order = append(order, r)
		}
		switch e.Stage {
		case auditv1.StageResponseStarted:
			r.Open = true
			if r.Code == 0 {
				r.Code = code(e)
			}
		case auditv1.StageResponseComplete, auditv1.StagePanic:
			r.Open = false
			if c := code(e); c != 0 {
				r.Code = c
			}
		}
	}
	// A request whose completion was logged first (never for one request,
	// but events of several requests interleave) keeps its received time.
	sort.SliceStable(order, func(i, j int) bool { return order[i].Received.Before(order[j].Received) })
	out := make([]Request, len(order))
	for i, r := range order {
		out[i] = *r
	}
	return out
}

func newRequest(e *auditv1.Event) *Request {
	r := &Request{
		AuditID: string(e.AuditID), User: e.User.Username, UserAgent: e.UserAgent,
		SourceIPs: slices.Clone(e.SourceIPs), Verb: e.Verb, RequestURI: e.RequestURI,
		Received: e.RequestReceivedTimestamp.Time,
	}
	if o := e.ObjectRef; o != nil {
		r.Group, r.Resource, r.Subresource, r.Namespace, r.Name = o.APIGroup, o.Resource, o.Subresource, o.Namespace, o.Name
	}
	if r.Resource == "" {
		r.Path, _, _ = strings.Cut(e.RequestURI, "?")
	}
	return r
}

func code(e *auditv1.Event) int32 {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

// Between returns the requests received in [from, to).
func Between(reqs []Request, from, to time.Time) []Request {
	var out []Request
	for _, r := range reqs {
		if !r.Received.Before(from) && r.Received.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// Call is a kind of request: a verb on a resource (with its subresource
// and group), or on a non-resource path.
type Call struct {
	Verb, Group, Resource, Subresource, Path string
}

// String reads as in fleetlet's reports: "patch pods/status",
// "update leases.coordination.k8s.io", "get /api".
func (c Call) String() string {
	return c.Verb + " " + c.Label()
}

// Label is the resource part: "pods/status", "leases.coordination.k8s.io".
func (c Call) Label() string {
	if c.Resource == "" {
		return c.Path
	}
	l := c.Resource
	if c.Group != "" {
		l += "." + c.Group
	}
	if c.Subresource != "" {
		l += "/" + c.Subresource
	}
	return l
}

// CallOf is r's kind of request.
func CallOf(r Request) Call {
	return Call{Verb: r.Verb, Group: r.Group, Resource: r.Resource, Subresource: r.Subresource, Path: r.Path}
}

// Watch is what a watch request watches: its resource, its namespace ("" for
// all), and its field and label selectors, normalized (NormalizeSelectors).
type Watch struct {
	Group, Resource, Namespace   string
	FieldSelector, LabelSelector string
}

// String reads "pods fieldSelector=spec.nodeName=<node>",
// "configmaps -n default fieldSelector=metadata.name=kube-root-ca.crt".
func (w Watch) String() string {
	s := w.Resource
	if w.Group != "" {
		s += "." + w.Group
	}
	if w.Namespace != "" {
		s += " -n " + w.Namespace
	}
	if w.FieldSelector != "" {
		s += " fieldSelector=" + w.FieldSelector
	}
	if w.LabelSelector != "" {
		s += " labelSelector=" + w.LabelSelector
	}
	return s
}

// NodePlaceholder replaces a node's own name in a normalized selector.
const NodePlaceholder = "<node>"

// NodeOf is the node whose kubelet user is username
// ("system:node:<name>"), or "".
func NodeOf(username string) string {
	name, ok := strings.CutPrefix(username, "system:node:")
	if !ok {
		return ""
	}
	return name
}

// WatchOf is what r watches, with per-node names replaced by
// NodePlaceholder (see NormalizeSelectors). node is r's node when the
// caller knows it ("" otherwise: NodeOf(r.User) is tried).
func WatchOf(r Request, node string) (Watch, error) {
	u, err := url.ParseRequestURI(r.RequestURI)
	if err != nil {
		return Watch{}, fmt.Errorf("audit: request %s: URI %q: %w", r.AuditID, r.RequestURI, err)
	}
	q := u.Query()
	if node == "" {
		node = NodeOf(r.User)
	}
	fs, ls, err := NormalizeSelectors(r.Group, r.Resource, q.Get("fieldSelector"), q.Get("labelSelector"), node)
	if err != nil {
		return Watch{}, fmt.Errorf("audit: request %s: %w", r.AuditID, err)
	}
	return Watch{Group: r.Group, Resource: r.Resource, Namespace: r.Namespace, FieldSelector: fs, LabelSelector: ls}, nil
}

// NormalizeSelectors returns a watch's field and label selectors in a
// canonical form, with each term sorted and every per-node name replaced by
// NodePlaceholder: the value of spec.nodeName, of metadata.name on nodes
// (a Node watch names its node), and any value equal to node, the
// requester's own node when known. Two nodes' watches of the same kind then
// read the same. Other names (a ConfigMap's) are kept.
func NormalizeSelectors(group, resource, fieldSelector, labelSelector, node string) (string, string, error) {
	var fieldTerms []string
	if fieldSelector != "" {
		sel, err := fields.ParseSelector(fieldSelector)
		if err != nil {
			return "", "", fmt.Errorf("field selector %q: %w", fieldSelector, err)
		}
		for _, req := range sel.Requirements() {
			v := req.Value
			perNode := req.Field == "spec.nodeName" || (group == "" && resource == "nodes" && req.Field == "metadata.name")
			if perNode || (node != "" && v == node) {
				v = NodePlaceholder
			}
			fieldTerms = append(fieldTerms, req.Field+string(req.Operator)+v)
		}
	}
	var labelTerms []string
	if labelSelector != "" {
		sel, err := labels.Parse(labelSelector)
		if err != nil {
			return "", "", fmt.Errorf("label selector %q: %w", labelSelector, err)
		}
		reqs, _ := sel.Requirements()
		for _, req := range reqs {
			labelTerms = append(labelTerms, labelTerm(req, node))
		}
	}
	slices.Sort(fieldTerms)
	slices.Sort(labelTerms)
	return strings.Join(fieldTerms, ","), strings.Join(labelTerms, ","), nil
}

// Summary is what one identity (or kind of identity) asked of the API
// server.
type Summary struct {
	// Calls counts requests by verb and resource; watches are among them
	// (verb "watch"), counted once each (see Requests).
	Calls map[Call]int
	// Failed counts those of Calls that the API server answered with an
	// error (code 400 or more): refused, conflicting, throttled.
	Failed map[Call]int
	// Watches counts watch requests by what they watch.
	Watches map[Watch]int
	// Nodes are the distinct nodes whose requests were summed (by NodeOf
	// or by the classifier), for per-node rates.
	Nodes map[string]bool
}

// Total is the number of requests summed.
func (s *Summary) Total() int {
	n := 0
	for _, c := range s.Calls {
		n += c
	}
	return n
}

// Classifier names the group a request is summed into (and the node it
// belongs to, "" if unknown); "" for the group leaves the request out.
type Classifier func(r Request) (group, node string)

// ByUser sums each user apart: user.username, as the API server
// authenticated it.
func ByUser(r Request) (string, string) { return r.User, NodeOf(r.User) }

// Summarize sums reqs into one Summary per group of classify. A watch
// whose URI does not parse is an error: it would be missing from the sets
// compared.
func Summarize(reqs []Request, classify Classifier) (map[string]*Summary, error) {
	out := map[string]*Summary{}
	for _, r := range reqs {
		group, node := classify(r)
		if group == "" {
			continue
		}
		s := out[group]
		if s == nil {
			s = &Summary{Calls: map[Call]int{}, Failed: map[Call]int{}, Watches: map[Watch]int{}, Nodes: map[string]bool{}}
			out[group] = s
		}
		if node != "" {
			s.Nodes[node] = true
		}
		s.Calls[CallOf(r)]++
		if r.Code >= 400 {
			s.Failed[CallOf(r)]++
		}
		if r.Verb == "watch" {
			w, err := WatchOf(r, node)
			if err != nil {
				return nil, err
			}
			s.Watches[w]++
		}
	}
	return out, nil
}

// WatchSet is the distinct watches of s, sorted.
func (s *Summary) WatchSet() []Watch {
	return SortedWatches(slices.Collect(maps.Keys(s.Watches)))
}

// SortedWatches sorts ws by their String.
func SortedWatches(ws []Watch) []Watch {
	slices.SortFunc(ws, func(a, b Watch) int { return cmp.Compare(a.String(), b.String()) })
	return ws
}

// SortedCalls sorts cs by resource label, then verb.
func SortedCalls(cs []Call) []Call {
	slices.SortFunc(cs, func(a, b Call) int {
		return cmp.Or(cmp.Compare(a.Label(), b.Label()), cmp.Compare(a.Verb, b.Verb))
	})
	return cs
}

// Diff returns the watches only in a and only in b.
func Diff(a, b []Watch) (onlyA, onlyB []Watch) {
	inA, inB := map[Watch]bool{}, map[Watch]bool{}
	for _, w := range a {
		inA[w] = true
	}
	for _, w := range b {
		inB[w] = true
	}
	for _, w := range a {
		if !inB[w] {
			onlyA = append(onlyA, w)
		}
	}
	for _, w := range b {
		if !inA[w] {
			onlyB = append(onlyB, w)
		}
	}
	return SortedWatches(onlyA), SortedWatches(onlyB)
}

// labelTerm writes req as a label selector does, its values sorted and
// node's name, if among them, replaced by NodePlaceholder.
func labelTerm(req labels.Requirement, node string) string {
	values := req.Values().UnsortedList()
	for i, v := range values {
		if node != "" && v == node {
			values[i] = NodePlaceholder
		}
	}
	slices.Sort(values)
	key := req.Key()
	switch op := req.Operator(); op {
	case selection.Exists:
		return key
	case selection.DoesNotExist:
		return "!" + key
	case selection.In, selection.NotIn:
		return key + " " + string(op) + " (" + strings.Join(values, ",") + ")"
	case selection.DoubleEquals:
		return key + "=" + strings.Join(values, ",")
	default: // =, !=, gt, lt
		return key + string(op) + strings.Join(values, ",")
	}
}
