package objects

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"text/template"
	"text/template/parse"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// Template is a parsed object template. It is safe for concurrent Renders.
type Template struct {
	name string
	tmpl *template.Template
	// optional are the top-level keys the template reads only through
	// DefaultParam (see optionalParams).
	optional []string
}

// Parse parses a Go template whose output is the YAML of one object, with
// clusterloader2's functions (see funcs.go). A key missing from the data is
// an execution error (missingkey=error), so that a typo in a profile fails
// the run instead of rendering "<no value>" into a manifest; the exception
// is a key read as DefaultParam's first argument, which is what
// DefaultParam is for.
func Parse(name, text string) (*Template, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(funcs(nil)).Parse(text)
	if err != nil {
		return nil, err
	}
	return &Template{name: name, tmpl: t, optional: optionalParams(t)}, nil
}

// Name is the name the template was parsed with.
func (t *Template) Name() string { return t.name }

// Render executes the template with data and decodes its output, which must
// be one YAML object with apiVersion and kind. The driver passes at least
// Index, Name and Namespace, and the profile's params. rng is what RandInt
// and RandIntRange draw from, so that a run replays from its seed; it may be
// nil for a template that draws nothing. rng is used by this call only, but
// a *rand.Rand is not safe for concurrent use: concurrent Renders need their
// own.
func (t *Template) Render(data map[string]any, rng *rand.Rand) (*unstructured.Unstructured, error) {
	cloned := false
	for _, key := range t.optional {
		if _, ok := data[key]; ok {
			continue
		}
		if !cloned { // the caller's map is left as it is
			data, cloned = maps.Clone(data), true
			if data == nil {
				data = map[string]any{}
			}
		}
		data[key] = nil
	}
	// The clone gives this call its own function map, bound to rng, without
	// touching the parsed template that other Renders share.
	tmpl, err := t.tmpl.Clone()
	if err != nil {
		return nil, fmt.Errorf("template %q: %w", t.name, err)
	}
	var out bytes.Buffer
	if err := tmpl.Funcs(funcs(rng)).Execute(&out, data); err != nil {
		return nil, err
	}
	return decodeOne(t.name, out.String())
}

// optionalParams returns the top-level keys that t passes to DefaultParam
// as its first argument, as .Key or $.Key. clusterloader2 executes its
// templates without missingkey=error, so `DefaultParam .Replicas 3` sees nil
// for a missing Replicas; under missingkey=error the lookup itself would
// fail before DefaultParam runs. Render sets these keys to nil when data
// lacks them, which keeps DefaultParam working and every other missing key
// an error. A key so declared optional and also printed directly renders
// "<no value>" when missing, as in clusterloader2; templates assign
// DefaultParam's result to a variable and print that.
func optionalParams(t *template.Template) []string {
	seen := map[string]bool{}
	var keys []string
	add := func(key string) {
		if !seen[key] {
			seen[key] = true
			keys = append(keys, key)
		}
	}
	var walk func(n parse.Node)
	walk = func(n parse.Node) {
		switch n := n.(type) {
		case *parse.ListNode:
			if n == nil {
				return
			}
			for _, c := range n.Nodes {
				walk(c)
			}
		case *parse.ActionNode:
			walk(n.Pipe)
		case *parse.IfNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.RangeNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.WithNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.TemplateNode:
			walk(n.Pipe)
		case *parse.PipeNode:
			if n == nil {
				return
			}
			for _, cmd := range n.Cmds {
				walk(cmd)
			}
		case *parse.CommandNode:
			if len(n.Args) >= 2 {
				if id, ok := n.Args[0].(*parse.IdentifierNode); ok && id.Ident == "DefaultParam" {
					switch arg := n.Args[1].(type) {
					case *parse.FieldNode:
						if len(arg.Ident) == 1 {
							add(arg.Ident[0])
						}
					case *parse.VariableNode:
						if len(arg.Ident) == 2 && arg.Ident[0] == "$" {
							add(arg.Ident[1])
						}
					}
				}
			}
			for _, a := range n.Args {
				walk(a)
			}
		}
	}
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
			walk(tt.Tree.Root)
		}
	}
	return keys
}

// decodeOne decodes a rendered template: exactly one YAML document that is
// an object with apiVersion and kind. Empty documents (a leading "---", a
// comment) are skipped, as kubectl skips them.
func decodeOne(name, text string) (*unstructured.Unstructured, error) {
	var doc []byte
	docLine := 0
	for _, d := range splitDocuments(text) {
		// The document is prefixed with the blank lines before it, so that
		// the YAML parser's line numbers are the rendered template's.
		j, err := yaml.YAMLToJSON([]byte(strings.Repeat("\n", d.line-1) + d.text))
		if err != nil {
			return nil, fmt.Errorf("template %q renders invalid YAML: %w: fix the template at that line", name, err)
		}
		if bytes.Equal(bytes.TrimSpace(j), []byte("null")) {
			continue
		}
		if doc != nil {
			return nil, fmt.Errorf("template %q renders a second YAML document at line %d (the first is at line %d): a template makes one object; give each object its own template", name, d.line, docLine)
		}
		doc, docLine = j, d.line
	}
	if doc == nil {
		return nil, fmt.Errorf("template %q renders no object: its output is empty", name)
	}
	var content any
	if err := utiljson.Unmarshal(doc, &content); err != nil {
		return nil, fmt.Errorf("template %q: decoding its object: %w", name, err)
	}
	m, ok := content.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("template %q renders a YAML %s, not an object: a template makes one object with apiVersion and kind", name, yamlKind(content))
	}
	obj := &unstructured.Unstructured{Object: m}
	var missing []string
	if s, _ := m["apiVersion"].(string); s == "" {
		missing = append(missing, "apiVersion")
	}
	if s, _ := m["kind"].(string); s == "" {
		missing = append(missing, "kind")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("template %q renders an object without %s: add %s at the top of the template", name, strings.Join(missing, " or "), strings.Join(missing, " and "))
	}
	return obj, nil
}

func yamlKind(v any) string {
	switch v.(type) {
	case []any:
		return "list"
	default:
		return "scalar"
	}
}

// document is one YAML document of a stream and the line it starts on.
type document struct {
	text string
	line int // 1-based
}

// splitDocuments splits a YAML stream at its "---" separator lines (a line
// that is "---", possibly followed by blanks or a comment), as
// k8s.io/apimachinery's YAMLReader does, and keeps each document's first
// line number for error messages.
func splitDocuments(text string) []document {
	lines := strings.SplitAfter(text, "\n")
	var docs []document
	var cur strings.Builder
	start := 1
	for i, l := range lines {
		if isSeparator(l) {
			docs = append(docs, document{text: cur.String(), line: start})
			cur.Reset()
			start = i + 2
			continue
		}
		cur.WriteString(l)
	}
	return append(docs, document{text: cur.String(), line: start})
}

func isSeparator(line string) bool {
	rest, ok := strings.CutPrefix(line, "---")
	if !ok {
		return false
	}
	rest = strings.TrimSpace(rest)
	return rest == "" || strings.HasPrefix(rest, "#")
}

// errNoRand is RandInt's and RandIntRange's error when Render got no rng.
var errNoRand = errors.New("the template draws random numbers but Render was given no *rand.Rand: pass the run's seeded one")
