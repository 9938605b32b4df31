package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/viper"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestScrapeAsPrometheus: every target is scraped at every path about once
// per interval, over kept-alive connections, with the kubeconfig's token
// and Prometheus's Accept header; a failing target is counted, not fatal.
func TestScrapeAsPrometheus(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	conns := map[string]bool{}
	var badHeaders []string
	handler := func(name string, code int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits[name+r.URL.Path]++
			if r.ProtoMajor != 1 {
				badHeaders = append(badHeaders, r.Proto)
			}
			conns[r.RemoteAddr] = true
			if r.Header.Get("Authorization") != "Bearer scraper-token" || !strings.HasPrefix(r.Header.Get("Accept"), "application/openmetrics-text") {
				badHeaders = append(badHeaders, r.Header.Get("Authorization")+" "+r.Header.Get("Accept"))
			}
			mu.Unlock()
			w.WriteHeader(code)
			_, _ = w.Write([]byte("kubelet_running_pods 1\n"))
		})
	}
	var targets []scrapeTarget
	for _, tc := range []struct {
		name string
		code int
	}{{"a", http.StatusOK}, {"b", http.StatusOK}, {"broken", http.StatusInternalServerError}} {
		ts := httptest.NewUnstartedServer(handler(tc.name, tc.code))
		ts.EnableHTTP2 = true // the server offers it; the scraper must not take it
		ts.StartTLS()
		t.Cleanup(ts.Close)
		targets = append(targets, scrapeTarget{node: tc.name, base: ts.URL})
	}
	// The servers' certificates are httptest's own, unknown to the client,
	// as kubelets' self-signed ones are to Prometheus.
	client, err := kubeletScrapeClient(&rest.Config{Host: "https://127.0.0.1:1", BearerToken: "scraper-token", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("not used")}})
	if err != nil {
		t.Fatal(err)
	}
	const interval, duration = 200 * time.Millisecond, 2 * time.Second
	paths := []string{"/metrics", "/metrics/cadvisor"}
	res := scrape(context.Background(), client, targets, paths, interval, duration)

	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"a", "b"} {
		for _, p := range paths {
			// 10 intervals; a loaded machine may lose a few of them.
			if n := hits[name+p]; n < 3 || n > 11 {
				t.Errorf("%s%s scraped %d times in %v every %v, want about 10", name, p, n, duration, interval)
			}
		}
	}
	if len(badHeaders) > 0 {
		t.Errorf("scrapes without the token or Prometheus's Accept header: %q", badHeaders)
	}
	// One connection per target, kept alive (a loaded machine may open a
	// second one now and then).
	if len(conns) > 2*len(targets) {
		t.Errorf("%d connections for %d targets, want them kept alive", len(conns), len(targets))
	}
	for _, p := range paths {
		pr := res.paths[p]
		if pr == nil || pr.ok < 6 || pr.failed < 3 || pr.bytes != int64(pr.ok)*int64(len("kubelet_running_pods 1\n")) {
			t.Fatalf("%s: %+v, want the two good targets' scrapes counted with their bytes and the broken one's as failures", p, pr)
		}
		if !strings.Contains(strings.Join(pr.samples, " "), "broken"+p+": HTTP 500") {
			t.Errorf("%s failures %q, want the broken target named with its status", p, pr.samples)
		}
	}
	var out strings.Builder
	printScrape(&out, res, paths)
	if !strings.Contains(out.String(), "/metrics/cadvisor") || !strings.Contains(out.String(), "HTTP 500") {
		t.Errorf("printed:\n%s\nwant a row per path and the failures", out.String())
	}
	// A path given twice (scraped twice an interval) is one row of all its
	// scrapes.
	out.Reset()
	printScrape(&out, res, []string{"/metrics", "/metrics", "/metrics/cadvisor"})
	n := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "/metrics" && f[1] != "failures," {
			n++
		}
	}
	if n != 1 {
		t.Errorf("printed:\n%s\nwant /metrics on one row, got %d", out.String(), n)
	}
}

func TestScrapeTargets(t *testing.T) {
	node := func(name, ip string, port int32) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = port
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}}
		if ip != "" {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		return n
	}
	got := scrapeTargets([]corev1.Node{node("a", "127.1.0.1", 10250), node("v6", "::1", 10251), node("no-ip", "", 10250), node("no-port", "127.1.0.3", 0)})
	want := []scrapeTarget{{"a", "https://127.1.0.1:10250"}, {"v6", "https://[::1]:10251"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("targets %v, want %v", got, want)
	}
}

func TestParseScrapeTargets(t *testing.T) {
	got, err := parseScrapeTargets([]string{"http://127.0.0.1:20250", " https://[::1]:10250/ "})
	if err != nil {
		t.Fatal(err)
	}
	want := []scrapeTarget{{"127.0.0.1:20250", "http://127.0.0.1:20250"}, {"[::1]:10250", "https://[::1]:10250"}}
	if !slices.Equal(got, want) {
		t.Errorf("targets %v, want %v", got, want)
	}
	for _, bad := range []string{"127.0.0.1:10250", "ftp://127.0.0.1:10250", "https://127.0.0.1:10250/metrics", "https://", "https://h:1?x=1"} {
		if _, err := parseScrapeTargets([]string{bad}); err == nil || !strings.Contains(err.Error(), "--target") {
			t.Errorf("--target %q: err %v, want one naming --target", bad, err)
		}
	}
}

// TestScrapeCostOfAProcess: --target scrapes a given port with no cluster,
// and --cost-of prints the serving process's CPU idle and scraped, and
// the difference per scrape.
func TestScrapeCostOfAProcess(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("kubelet_running_pods 1\n", 200)))
	}))
	t.Cleanup(ts.Close)
	v := viper.New()
	v.Set("target", []string{ts.URL})
	v.Set("cost-of", os.Getpid())
	v.Set("paths", "/metrics")
	v.Set("interval", "5ms")
	v.Set("duration", "1s")
	var out strings.Builder
	if err := runScrape(context.Background(), v, &out); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`process (\d+): CPU ([0-9.]+) s idle, ([0-9.]+) s while scraped \((\d+) scrapes\): (-?\d+) µs a scrape`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("printed:\n%s\nwant the process's CPU idle, scraped and per scrape", out.String())
	}
	if m[1] != strconv.Itoa(os.Getpid()) {
		t.Errorf("cost of process %s, want %d", m[1], os.Getpid())
	}
	// About 200 scrapes in 1 s every 5 ms; a loaded machine loses some.
	if n, _ := strconv.Atoi(m[4]); n < 20 {
		t.Errorf("%d scrapes in 1 s every 5 ms, want about 200", n)
	}
	// Client and server are this process: the scrapes cost it something.
	if busy, _ := strconv.ParseFloat(m[3], 64); busy <= 0 {
		t.Errorf("CPU while scraped %v s, want more than 0", busy)
	}
}
