package nodeagent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/fleetlet/fleetlet/nodeagent/prober"
)

func TestNetworkHookReachesThePod(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/drain" {
			http.Error(w, "no", http.StatusInternalServerError)
		}
	}))
	defer server.Close()
	_, portText, _ := net.SplitHostPort(strings.TrimPrefix(server.URL, "http://"))
	port, _ := strconv.Atoi(portText)
	pod := &corev1.Pod{Status: corev1.PodStatus{PodIP: "127.0.0.1"}}
	hook := networkHook(prober.NewHTTPRunner(nil))
	for path, wantErr := range map[string]bool{"/drain": false, "/other": true} {
		h := &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt(port)}}
		err := hook(context.Background(), pod, &corev1.Container{Name: "app"}, h, 5*time.Second)
		if (err != nil) != wantErr {
			t.Errorf("GET %s: err = %v, want an error %v", path, err, wantErr)
		}
	}
}
