package reports

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// checkGolden compares got with testdata/name, or rewrites it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./reports/ -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (rerun with -update if the change is intended); first difference at line %d",
			golden, firstDiffLine(got, want))
	}
}

func firstDiffLine(a, b []byte) int {
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

func TestRenderMarkdownGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := RenderMarkdown(&buf, sampleReport()); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "report.md.golden", buf.Bytes())

	out := buf.String()
	for _, want := range []string{
		"❌ **SLOs fail.** 1 of 3 SLOs failed: Mutating API call latency",
		"| ✅ | Pod startup latency (`pod_startup_latency`) | 1 | pod_startup | 137.9 | 5000.0 |",
		"| `pod_startup` | created → running_observed | 180 |",
		"| PATCH | pods/status | resource | 400 |",
		"❌ 1875.0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}

func TestRenderMarkdownEscapesRunText(t *testing.T) {
	r := &Report{Profile: "a|b <script>", Errors: []string{"node *n1*: `boom`\nsecond line"}}
	var buf bytes.Buffer
	if err := RenderMarkdown(&buf, r); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{`# fleetlet report: a\|b \<script\>`, "- node \\*n1\\*: \\`boom\\` second line"} {
		if !strings.Contains(out, want) {
			t.Errorf("report.md lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "<script>") {
		t.Errorf("report.md carries raw HTML from the run")
	}
}

func TestRenderHTMLGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := RenderHTML(&buf, sampleReport()); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "report.html.golden", buf.Bytes())
	if err := checkWellFormed(buf.Bytes()); err != nil {
		t.Fatalf("report.html is not well-formed: %v", err)
	}
	doc, err := html.Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	// The SLI and phase distributions, pods over time, API request rate.
	if n := countElements(doc, "svg"); n != 5 {
		t.Errorf("report.html has %d <svg> elements, want 5", n)
	}
	// Self-contained: no script, no external reference of any kind.
	for _, tag := range []string{"script", "link", "img", "iframe", "object", "embed"} {
		if n := countElements(doc, tag); n != 0 {
			t.Errorf("report.html has %d <%s> elements, want none", n, tag)
		}
	}
	if s := buf.String(); strings.Contains(s, "http://") && strings.Count(s, "http://") != strings.Count(s, `xmlns="http://www.w3.org/2000/svg"`) ||
		strings.Contains(s, "https://") || strings.Contains(s, "url(") {
		t.Errorf("report.html refers to something outside itself")
	}
	// Every chart line has a point list that parses as numbers.
	for _, pl := range findElements(doc, "polyline") {
		pts := attr(pl, "points")
		if pts == "" {
			t.Errorf("a polyline has no points")
		}
		for _, p := range strings.Fields(pts) {
			var x, y float64
			if _, err := fmt.Sscanf(p, "%g,%g", &x, &y); err != nil || x < 0 || x > chartW || y < 0 || y > chartH {
				t.Errorf("polyline point %q is outside the chart", p)
			}
		}
	}
}

func TestRenderHTMLEscapesRunText(t *testing.T) {
	r := sampleReport()
	r.Profile = `<script>alert("x")</script>`
	r.Errors = []string{`<img src=x onerror="boom">`}
	r.Phases[0].Name = `</svg><script>`
	var buf bytes.Buffer
	if err := RenderHTML(&buf, r); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if n := countElements(doc, "script") + countElements(doc, "img"); n != 0 {
		t.Errorf("text from the run became %d elements", n)
	}
	if err := checkWellFormed(buf.Bytes()); err != nil {
		t.Errorf("report.html with hostile names is not well-formed: %v", err)
	}
}

func TestRenderHTMLEmptyReport(t *testing.T) {
	var buf bytes.Buffer
	if err := RenderHTML(&buf, &Report{}); err != nil {
		t.Fatal(err)
	}
	if err := checkWellFormed(buf.Bytes()); err != nil {
		t.Fatalf("empty report.html is not well-formed: %v", err)
	}
	doc, _ := html.Parse(bytes.NewReader(buf.Bytes()))
	if n := countElements(doc, "svg"); n != 0 {
		t.Errorf("an empty report has %d charts", n)
	}
	if !strings.Contains(buf.String(), "SLOs not checked") {
		t.Errorf("an empty report does not say its SLOs were not checked")
	}
	buf.Reset()
	if err := RenderMarkdown(&buf, &Report{}); err != nil {
		t.Fatal(err)
	}
}

// voidElements have no end tag in HTML.
var voidElements = []string{"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

// checkWellFormed tokenizes an HTML document and checks that every element
// that is opened is closed, in order; SVG elements may self-close. html.Parse
// alone would not tell: it repairs whatever it is given, as browsers do.
func checkWellFormed(doc []byte) error {
	z := html.NewTokenizer(bytes.NewReader(doc))
	var stack []string
	for {
		switch z.Next() {
		case html.ErrorToken:
			if errors.Is(z.Err(), io.EOF) {
				if len(stack) > 0 {
					return fmt.Errorf("unclosed elements at the end: %v", stack)
				}
				return nil
			}
			return z.Err()
		case html.StartTagToken:
			name, _ := z.TagName()
			if !slices.Contains(voidElements, string(name)) {
				stack = append(stack, string(name))
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			if len(stack) == 0 || stack[len(stack)-1] != string(name) {
				return fmt.Errorf("</%s> closes %v", name, stack)
			}
			stack = stack[:len(stack)-1]
		}
	}
}

func findElements(n *html.Node, tag string) []*html.Node {
	var out []*html.Node
	if n.Type == html.ElementNode && n.Data == tag {
		out = append(out, n)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		out = append(out, findElements(c, tag)...)
	}
	return out
}

func countElements(n *html.Node, tag string) int { return len(findElements(n, tag)) }

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}
