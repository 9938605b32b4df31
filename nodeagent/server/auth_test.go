package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"
)

func TestRequestAttributes(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		verb         string
		subresources []string
	}{
		{http.MethodGet, "/stats/summary", "get", []string{"stats"}},
		{http.MethodPost, "/stats/summary", "create", []string{"stats"}},
		{http.MethodGet, "/stats", "get", []string{"stats"}},
		{http.MethodGet, "/statsfoo", "get", []string{"proxy"}},
		{http.MethodGet, "/metrics/resource", "get", []string{"metrics"}},
		{http.MethodGet, "/metrics", "get", []string{"metrics"}},
		{http.MethodGet, "/metrics/cadvisor", "get", []string{"metrics"}},
		{http.MethodGet, "/metrics/probes", "get", []string{"metrics"}},
		{http.MethodGet, "/logs/syslog", "get", []string{"log"}},
		{http.MethodGet, "/containerLogs/default/web/app", "get", []string{"proxy"}},
		{http.MethodGet, "/pods", "get", []string{"pods", "proxy"}},
		{http.MethodGet, "/pods/", "get", []string{"pods", "proxy"}},
		{http.MethodGet, "/runningpods/", "get", []string{"pods", "proxy"}},
		{http.MethodGet, "/allocatedPods", "get", []string{"pods", "proxy"}},
		{http.MethodGet, "/healthz", "get", []string{"healthz", "proxy"}},
		{http.MethodGet, "/healthz/ping", "get", []string{"healthz", "proxy"}},
		{http.MethodGet, "/configz", "get", []string{"configz", "proxy"}},
		{http.MethodGet, "/flagz", "get", []string{"configz"}},
		{http.MethodGet, "/statusz", "get", []string{"statusz"}},
		{http.MethodPost, "/checkpoint/default/web/app", "create", []string{"checkpoint"}},
		{http.MethodPost, "/run/default/web/app", "create", []string{"proxy"}},
		{http.MethodPost, "/exec/default/web/app", "create", []string{"proxy"}},
		{http.MethodGet, "/exec/default/web/app", "get", []string{"proxy"}},
		{http.MethodPut, "/x", "update", []string{"proxy"}},
		{http.MethodPatch, "/x", "patch", []string{"proxy"}},
		{http.MethodDelete, "/x", "delete", []string{"proxy"}},
		{http.MethodHead, "/x", "", []string{"proxy"}},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		u := &user.DefaultInfo{Name: "alice"}
		attrs := requestAttributes(testNode, u, r)
		var subs []string
		for _, a := range attrs {
			subs = append(subs, a.Subresource)
			if a.Verb != tc.verb || a.Resource != "nodes" || a.Name != testNode || a.APIVersion != "v1" || a.APIGroup != "" ||
				a.Namespace != "" || !a.ResourceRequest || a.Path != tc.path || a.User != u {
				t.Errorf("%s %s: attributes %+v, want verb %q on nodes/%s", tc.method, tc.path, a, tc.verb, testNode)
			}
		}
		if !reflect.DeepEqual(subs, tc.subresources) {
			t.Errorf("%s %s: subresources %v, want %v", tc.method, tc.path, subs, tc.subresources)
		}
	}
}

func TestAuthFilter(t *testing.T) {
	cfg := testConfig(&recorder{})
	// alice may read stats and use proxy; bob nothing.
	cfg.Authorizer = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetUser().GetName() == "broken" {
			return authorizer.DecisionNoOpinion, "", errors.New("SubjectAccessReview timed out")
		}
		if a.GetUser().GetName() == "alice" && (a.GetSubresource() == "stats" || a.GetSubresource() == "proxy") {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	tokens := map[string]string{"alice-token": "alice", "bob-token": "bob", "broken-token": "broken"}
	cfg.Authenticator = authenticatorFunc(func(r *http.Request) (string, bool) {
		name, ok := tokens[bearer(r)]
		return name, ok
	})
	base, pool, _ := serveTLS(t, newTestServer(t, cfg))
	c := tlsClient(pool, nil)
	for _, tc := range []struct {
		token, method, path string
		wantCode            int
		wantBody            string
	}{
		{"", http.MethodGet, "/stats/summary", http.StatusUnauthorized, "Unauthorized"},
		{"", http.MethodGet, "/no/such/path", http.StatusUnauthorized, "Unauthorized"},
		{"forged", http.MethodGet, "/healthz", http.StatusUnauthorized, "Unauthorized"},
		{"alice-token", http.MethodGet, "/stats/summary", http.StatusOK, ""},
		{"alice-token", http.MethodGet, "/pods", http.StatusOK, ""}, // allowed on its second attribute, proxy
		{"alice-token", http.MethodGet, "/metrics/resource", http.StatusForbidden, "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[metrics])\n"},
		{"bob-token", http.MethodGet, "/pods", http.StatusForbidden, "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"},
		{"bob-token", http.MethodPost, "/exec/default/web/app", http.StatusForbidden, "Forbidden (user=bob, verb=create, resource=nodes, subresource(s)=[proxy])\n"},
		{"broken-token", http.MethodGet, "/stats/summary", http.StatusInternalServerError, "Authorization error (user=broken, verb=get, resource=nodes, subresource=stats)"},
	} {
		code, body, _ := send(t, c, tc.method, base+tc.path, tc.token)
		if code != tc.wantCode || (tc.wantBody != "" && body != tc.wantBody) {
			t.Errorf("%s %s with %q = %d %q, want %d %q", tc.method, tc.path, tc.token, code, body, tc.wantCode, tc.wantBody)
		}
	}
}

func bearer(r *http.Request) string {
	const prefix = "Bearer "
	h := r.Header.Get("Authorization")
	if len(h) <= len(prefix) {
		return ""
	}
	return h[len(prefix):]
}

// testCA signs client certificates as a cluster's client CA does.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-client-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) issueClient(t *testing.T, cn string, groups ...string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: cn, Organization: groups},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// fakeReviews is the review endpoints of an API server: TokenReviews (one
// valid token, for bob) and SubjectAccessReviews (allowed when allow says
// so), counting both. client-go's fake clientset cannot stand in: the
// webhook authenticator and authorizer post through the typed clients'
// RESTClient, which the fake leaves nil.
type fakeReviews struct {
	tokenReviews, accessReviews atomic.Int32
	lastAccessReview            atomic.Pointer[authorizationv1.SubjectAccessReview]
	allow                       func(*authorizationv1.SubjectAccessReview) bool
}

func (f *fakeReviews) clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	decoder := scheme.Codecs.UniversalDeserializer()
	reply := func(w http.ResponseWriter, obj any) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(obj); err != nil {
			t.Errorf("fake API server: encoding a review: %v", err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", func(w http.ResponseWriter, r *http.Request) {
		f.tokenReviews.Add(1)
		review := &authenticationv1.TokenReview{}
		if err := decodeBody(decoder, r, review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if review.Spec.Token == "bob-token" {
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "bob", Groups: []string{"devs"}}}
		}
		review.APIVersion, review.Kind = "authentication.k8s.io/v1", "TokenReview"
		reply(w, review)
	})
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/subjectaccessreviews", func(w http.ResponseWriter, r *http.Request) {
		f.accessReviews.Add(1)
		review := &authorizationv1.SubjectAccessReview{}
		if err := decodeBody(decoder, r, review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.lastAccessReview.Store(review.DeepCopy())
		review.Status.Allowed = f.allow(review)
		review.APIVersion, review.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
		reply(w, review)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func decodeBody(decoder runtime.Decoder, r *http.Request, into runtime.Object) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	_, _, err = decoder.Decode(body, nil, into)
	return err
}

func TestDelegatingAuth(t *testing.T) {
	ca := newTestCA(t)
	reviews := &fakeReviews{allow: func(r *authorizationv1.SubjectAccessReview) bool {
		ra := r.Spec.ResourceAttributes
		return r.Spec.User == "kube-apiserver-kubelet-client" ||
			(r.Spec.User == "bob" && ra != nil && ra.Subresource == "stats" && ra.Name == testNode)
	}}
	authn, authz, err := NewDelegatingAuth(reviews.clientset(t), ca.pem)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(&recorder{})
	cfg.Authenticator, cfg.Authorizer = authn, authz
	base, pool, _ := serveTLS(t, newTestServer(t, cfg))

	apiserver := tlsClient(pool, ca.issueClient(t, "kube-apiserver-kubelet-client", "kubelet-api-admins"))
	if code, body, _ := send(t, apiserver, http.MethodGet, base+"/pods", ""); code != http.StatusOK {
		t.Errorf("GET /pods with the API server's client certificate = %d %q, want 200", code, body)
	}
	sar := reviews.lastAccessReview.Load()
	if sar == nil {
		t.Fatal("no SubjectAccessReview was sent")
	}
	want := authorizationv1.ResourceAttributes{Verb: "get", Version: "v1", Resource: "nodes", Subresource: "pods", Name: testNode}
	if ra := sar.Spec.ResourceAttributes; ra == nil || *ra != want {
		t.Errorf("SubjectAccessReview attributes = %+v, want %+v", ra, want)
	}
	if !reflect.DeepEqual(sar.Spec.Groups, []string{"kubelet-api-admins", "system:authenticated"}) {
		t.Errorf("SubjectAccessReview groups = %v, want the certificate's organization and system:authenticated", sar.Spec.Groups)
	}

	stranger := tlsClient(pool, newTestCA(t).issueClient(t, "kube-apiserver-kubelet-client"))
	if code, body, _ := send(t, stranger, http.MethodGet, base+"/pods", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /pods with a certificate from another CA = %d %q, want 401", code, body)
	}

	plain := tlsClient(pool, nil)
	if code, body, _ := send(t, plain, http.MethodGet, base+"/pods", ""); code != http.StatusUnauthorized || body != "Unauthorized" {
		t.Errorf("anonymous GET /pods = %d %q, want 401", code, body)
	}
	if code, _, _ := send(t, plain, http.MethodGet, base+"/pods", "forged-token"); code != http.StatusUnauthorized {
		t.Errorf("GET /pods with a token the API server rejects = %d, want 401", code)
	}
	if code, body, _ := send(t, plain, http.MethodGet, base+"/stats/summary", "bob-token"); code != http.StatusOK {
		t.Errorf("GET /stats/summary as bob = %d %q, want 200", code, body)
	}
	if code, body, _ := send(t, plain, http.MethodGet, base+"/metrics/resource", "bob-token"); code != http.StatusForbidden ||
		body != "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[metrics])\n" {
		t.Errorf("GET /metrics/resource as bob = %d %q, want 403 in the kubelet's words", code, body)
	}

	// Within the cache TTLs, a repeated request asks the API server nothing.
	tokens, accesses := reviews.tokenReviews.Load(), reviews.accessReviews.Load()
	if code, _, _ := send(t, plain, http.MethodGet, base+"/stats/summary", "bob-token"); code != http.StatusOK {
		t.Errorf("repeated GET /stats/summary as bob = %d, want 200", code)
	}
	if tr, ar := reviews.tokenReviews.Load(), reviews.accessReviews.Load(); tr != tokens || ar != accesses {
		t.Errorf("a repeated request sent %d TokenReviews and %d SubjectAccessReviews, want none (cached)", tr-tokens, ar-accesses)
	}
}

func TestDelegatingAuthRejectsBadInput(t *testing.T) {
	if _, _, err := NewDelegatingAuth(nil, nil); err == nil {
		t.Error("NewDelegatingAuth accepted a nil client")
	}
	if _, _, err := NewDelegatingAuth(kubernetes.NewForConfigOrDie(&rest.Config{Host: "https://127.0.0.1:1"}), []byte("not a certificate")); err == nil {
		t.Error("NewDelegatingAuth accepted a client CA that is not PEM")
	}
}

func TestVerifiedCertCache(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(now)
	var verifications int
	refuse := false
	next := authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
		verifications++
		if refuse {
			return nil, false, errors.New("verifying certificate failed: x509: certificate signed by unknown authority")
		}
		return &authenticator.Response{User: &user.DefaultInfo{Name: r.TLS.PeerCertificates[0].Subject.CommonName}}, true, nil
	})
	c := newVerifiedCertCache(next, clk)
	request := func(certs ...*x509.Certificate) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.TLS = &tls.ConnectionState{PeerCertificates: certs}
		return r
	}
	cert := func(raw, cn string, notAfter time.Time) *x509.Certificate {
		return &x509.Certificate{Raw: []byte(raw), Subject: pkix.Name{CommonName: cn}, NotAfter: notAfter}
	}
	prometheus := cert("prometheus", "prometheus", now.Add(time.Hour))

	if _, ok, err := c.AuthenticateRequest(request()); ok || err != nil || verifications != 0 {
		t.Fatalf("a request without a certificate: ok=%v err=%v after %d verifications, want no answer and none", ok, err, verifications)
	}
	first, ok, err := c.AuthenticateRequest(request(prometheus))
	if !ok || err != nil || first.User.GetName() != "prometheus" {
		t.Fatalf("first request = %v %v %v, want prometheus", first, ok, err)
	}
	second, ok, _ := c.AuthenticateRequest(request(prometheus))
	if !ok || second.User.GetName() != "prometheus" || verifications != 1 {
		t.Fatalf("repeated request: ok=%v user=%v after %d verifications, want prometheus after 1", ok, second.User, verifications)
	}
	if first == second {
		t.Error("two requests got the same Response; each caller must get its own")
	}

	// The chain is the key: another intermediate is another chain.
	if _, _, _ = c.AuthenticateRequest(request(prometheus, cert("intermediate", "", now.Add(time.Hour)))); verifications != 2 {
		t.Errorf("the same leaf with an intermediate: %d verifications, want 2 (a chain of its own)", verifications)
	}

	// Kept for authnCacheTTL at most, then verified again.
	clk.Step(authnCacheTTL + time.Second)
	if _, _, _ = c.AuthenticateRequest(request(prometheus)); verifications != 3 {
		t.Errorf("after the cache TTL: %d verifications, want 3", verifications)
	}

	// Kept no longer than the earliest NotAfter in the chain.
	shortLived := cert("short", "short", clk.Now().Add(10*time.Second))
	c.AuthenticateRequest(request(shortLived))
	clk.Step(11 * time.Second)
	refuse = true
	if _, ok, err := c.AuthenticateRequest(request(shortLived)); ok || err == nil || verifications != 5 {
		t.Errorf("an expired certificate: ok=%v err=%v after %d verifications, want it verified again and refused", ok, err, verifications)
	}

	// A refusal is never kept.
	stranger := cert("stranger", "stranger", clk.Now().Add(time.Hour))
	c.AuthenticateRequest(request(stranger))
	c.AuthenticateRequest(request(stranger))
	if verifications != 7 {
		t.Errorf("a refused certificate twice: %d verifications in all, want 7 (each refusal verified)", verifications)
	}
}

func TestDecisionCache(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	var asked int
	var failing bool
	next := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		asked++
		if failing {
			return authorizer.DecisionNoOpinion, "", errors.New("webhook unreachable")
		}
		if a.GetUser().GetName() == "prometheus" && a.GetSubresource() == "metrics" {
			return authorizer.DecisionAllow, "RBAC: allowed", nil
		}
		return authorizer.DecisionNoOpinion, "no rule", nil
	})
	c := newDecisionCache(next, clk)
	attrs := func(name string, groups []string, extra map[string][]string, sub, path string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{
			User: &user.DefaultInfo{Name: name, Groups: groups, Extra: extra},
			Verb: "get", APIVersion: "v1", Resource: "nodes", Subresource: sub, Name: testNode,
			ResourceRequest: true, Path: path,
		}
	}
	ask := func(a authorizer.AttributesRecord) authorizer.Decision {
		t.Helper()
		d, _, err := c.Authorize(context.Background(), a)
		if err != nil && !failing {
			t.Fatalf("Authorize: %v", err)
		}
		return d
	}
	prom := []string{"system:authenticated"}
	if d := ask(attrs("prometheus", prom, nil, "metrics", "/metrics")); d != authorizer.DecisionAllow || asked != 1 {
		t.Fatalf("first scrape: %v after %d reviews, want allowed after 1", d, asked)
	}
	// /metrics/probes is the same SubjectAccessReview: nodes/metrics.
	if d := ask(attrs("prometheus", prom, nil, "metrics", "/metrics/probes")); d != authorizer.DecisionAllow || asked != 1 {
		t.Errorf("another metrics path: %v after %d reviews, want allowed from the cache", d, asked)
	}
	// Anything in the review is in the key.
	for _, a := range []authorizer.AttributesRecord{
		attrs("prometheus", prom, nil, "stats", "/stats/summary"),
		attrs("prometheus", []string{"system:authenticated", "monitoring"}, nil, "metrics", "/metrics"),
		attrs("prometheus", prom, map[string][]string{"authentication.kubernetes.io/pod-name": {"prometheus-0"}}, "metrics", "/metrics"),
		attrs("prometheus\x00", prom, nil, "metrics", "/metrics"),
	} {
		before := asked
		ask(a)
		if asked != before+1 {
			t.Errorf("%+v was answered from another review's cache entry", a)
		}
	}
	// Allowed: 5 minutes.
	clk.Step(authzAllowedCacheTTL - time.Second)
	before := asked
	ask(attrs("prometheus", prom, nil, "metrics", "/metrics"))
	clk.Step(2 * time.Second)
	ask(attrs("prometheus", prom, nil, "metrics", "/metrics"))
	if asked != before+1 {
		t.Errorf("an allowed answer: %d reviews over 5 min 1 s, want 1 (kept 5 min)", asked-before)
	}
	// Denied or no opinion: 30 seconds.
	before = asked
	ask(attrs("bob", nil, nil, "metrics", "/metrics"))
	clk.Step(authzDeniedCacheTTL - time.Second)
	ask(attrs("bob", nil, nil, "metrics", "/metrics"))
	clk.Step(2 * time.Second)
	if d := ask(attrs("bob", nil, nil, "metrics", "/metrics")); d != authorizer.DecisionNoOpinion || asked != before+2 {
		t.Errorf("a refusal: %v with %d reviews over 31 s, want no opinion with 2 (kept 30 s)", d, asked-before)
	}
	// Errors are never kept.
	failing = true
	before = asked
	ask(attrs("carol", nil, nil, "metrics", "/metrics"))
	ask(attrs("carol", nil, nil, "metrics", "/metrics"))
	if asked != before+2 {
		t.Errorf("a failed review was answered from the cache: %d reviews, want 2", asked-before)
	}
}
