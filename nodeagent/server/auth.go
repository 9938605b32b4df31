package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	apiserverconfig "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/group"
	unionauth "k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// The kubelet's defaults for webhook authentication and authorization
// (KubeletConfiguration authentication.webhook.cacheTTL,
// authorization.webhook.cacheAuthorizedTTL and cacheUnauthorizedTTL).
const (
	authnCacheTTL        = 2 * time.Minute
	authzAllowedCacheTTL = 5 * time.Minute
	authzDeniedCacheTTL  = 30 * time.Second
)

// webhookRetryBackoff is k8s.io/apiserver/pkg/server/options
// DefaultAuthWebhookRetryBackoff, which the kubelet uses. Written out because
// that package drags the whole generic API server (etcd storage, admission)
// into every build of the fleet.
func webhookRetryBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// NewDelegatingAuth builds the kubelet's webhook authentication and
// authorization: client certificates signed by clientCAPEM (none when it is
// empty) or bearer tokens checked by TokenReview, then SubjectAccessReview,
// both answered by the API server behind client and cached with the kubelet's
// TTLs. Anonymous requests are refused. Build it once: it is safe for
// concurrent use and meant to be shared by every node server in a process
// (its caches key on the node name, so nodes do not see each other's answers).
func NewDelegatingAuth(client kubernetes.Interface, clientCAPEM []byte) (authenticator.Request, authorizer.UnconditionalAuthorizer, error) {
	if client == nil {
		return nil, nil, errors.New("kubelet API auth: no API server client; webhook authentication and authorization need one to send TokenReviews and SubjectAccessReviews")
	}
	authnConfig := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:               &apiserverconfig.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient: client.AuthenticationV1(),
		WebhookRetryBackoff:     webhookRetryBackoff(),
		CacheTTL:                authnCacheTTL,
	}
	tokenAuthn, _, err := authnConfig.New()
	if err != nil {
		return nil, nil, fmt.Errorf("kubelet API auth: building the webhook authenticator: %w", err)
	}
	authn := tokenAuthn
	if len(clientCAPEM) > 0 {
		// Static content: the fleet's CA does not rotate during a run, and a
		// file-watching provider would add a goroutine for nothing.
		ca, err := dynamiccertificates.NewStaticCAContent("client-ca-bundle", clientCAPEM)
		if err != nil {
			return nil, nil, fmt.Errorf("kubelet API auth: client CA bundle: %w; pass the PEM of the CA that signs the API server's kubelet client certificate", err)
		}
		// The factory's chain, [x509, token] under one group adder, built
		// here so that the certificate step can be cached: the same union,
		// the same order, the same groups.
		certAuthn := group.NewAuthenticatedGroupAdder(x509request.NewDynamic(ca.VerifyOptions, x509request.CommonNameUserConversion))
		authn = unionauth.New(newVerifiedCertCache(certAuthn, clock.RealClock{}), tokenAuthn)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             authzAllowedCacheTTL,
		DenyCacheTTL:              authzDeniedCacheTTL,
		WebhookRetryBackoff:       webhookRetryBackoff(),
	}.New()
	if err != nil {
		return nil, nil, fmt.Errorf("kubelet API auth: building the webhook authorizer: %w", err)
	}
	return authn, newDecisionCache(authz, clock.RealClock{}), nil
}

// withAuth is the kubelet's auth filter (pkg/kubelet/server InstallAuthFilter):
// every path, known or not, is authenticated and then authorized on any one
// of its node attributes.
func (s *Server) withAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		resp, ok, err := s.cfg.Authenticator.AuthenticateRequest(r)
		if err != nil {
			logger.Error(err, "Unable to authenticate the request due to an error", "path", r.URL.Path)
		}
		if err != nil || !ok {
			writeError(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		attrs := requestAttributes(s.cfg.NodeName, resp.User, r)
		subresources := make([]string, 0, len(attrs))
		for _, attr := range attrs {
			subresources = append(subresources, attr.Subresource)
			decision, _, err := s.cfg.Authorizer.Authorize(r.Context(), attr)
			if err != nil {
				logger.Error(err, "Authorization error", "user", attr.User.GetName(), "verb", attr.Verb, "resource", attr.Resource, "subresource", attr.Subresource)
				writeError(w, http.StatusInternalServerError, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)", attr.User.GetName(), attr.Verb, attr.Resource, attr.Subresource))
				return
			}
			if decision == authorizer.DecisionAllow {
				next.ServeHTTP(w, r)
				return
			}
		}
		logger.V(2).Info("Forbidden", "user", resp.User.GetName(), "verb", attrs[0].Verb, "resource", attrs[0].Resource, "subresources", subresources)
		writeError(w, http.StatusForbidden, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=%v)\n", resp.User.GetName(), attrs[0].Verb, attrs[0].Resource, subresources))
	})
}

// requestAttributes are the kubelet's authorization attributes for a request
// (pkg/kubelet/server nodeAuthorizerAttributesGetter, with
// KubeletFineGrainedAuthz, GA and locked on since 1.36): nodes/<node> with a
// subresource chosen by path, and a verb from the HTTP method. Paths with a
// fine-grained subresource also try "proxy", so older RBAC keeps working.
func requestAttributes(nodeName string, u user.Info, r *http.Request) []authorizer.AttributesRecord {
	verb := verbFor(r.Method)
	subresources := subresourcesFor(r.URL.Path)
	attrs := make([]authorizer.AttributesRecord, 0, len(subresources))
	for _, sub := range subresources {
		attrs = append(attrs, authorizer.AttributesRecord{
			User:            u,
			Verb:            verb,
			APIVersion:      "v1",
			Resource:        "nodes",
			Subresource:     sub,
			Name:            nodeName,
			ResourceRequest: true,
			Path:            r.URL.Path,
		})
	}
	return attrs
}

// verbFor maps an HTTP method to the API verb the kubelet authorizes; other
// methods get an empty verb, which no RBAC rule grants.
func verbFor(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodGet:
		return "get"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return ""
}

// subresourcesFor lists the node subresources a path is authorized on, in
// the order the kubelet tries them.
func subresourcesFor(path string) []string {
	var subs []string
	switch {
	case isSubpath(path, "/allocatedPods"), isSubpath(path, "/pods"), isSubpath(path, "/runningpods"):
		subs = append(subs, "pods")
	case isSubpath(path, "/healthz"):
		subs = append(subs, "healthz")
	case isSubpath(path, "/configz"):
		subs = append(subs, "configz")
	}
	switch {
	case isSubpath(path, "/stats"):
		subs = append(subs, "stats")
	case isSubpath(path, "/metrics"):
		subs = append(subs, "metrics")
	case isSubpath(path, "/logs"):
		subs = append(subs, "log")
	case isSubpath(path, "/checkpoint"):
		subs = append(subs, "checkpoint")
	case isSubpath(path, "/statusz"):
		subs = append(subs, "statusz")
	case isSubpath(path, "/flagz"):
		subs = append(subs, "configz")
	default:
		subs = append(subs, "proxy")
	}
	return subs
}

// isSubpath reports whether subpath is path or below it.
func isSubpath(subpath, path string) bool {
	return subpath == path || (strings.HasPrefix(subpath, path) && subpath[len(path)] == '/')
}

// verifiedCertCacheSize bounds the certificates remembered: a fleet is called
// by few identities (the API server's kubelet client, a Prometheus or two).
const verifiedCertCacheSize = 1024

// verifiedCertCache remembers, per presented certificate chain, the identity
// that x509 verification gave it. The kubelet verifies the chain on every
// request (k8s.io/apiserver x509.Authenticator), which costs an ECDSA or RSA
// verification each time: 0.2 ms, most of a scrape's CPU when 2,000 kubelets
// share one process and a Prometheus scrapes each of them three times every
// 30 s. With a static CA the answer for the same chain only changes when a
// certificate in it expires, so it is kept until the earliest NotAfter of
// the presented certificates and at most authnCacheTTL, as long as a token's
// review is. Failures are not kept: a bad certificate is verified, and
// refused, every time, as by the kubelet.
type verifiedCertCache struct {
	next  authenticator.Request
	clock clock.PassiveClock
	cache *utilcache.LRUExpireCache
}

func newVerifiedCertCache(next authenticator.Request, clk clock.PassiveClock) *verifiedCertCache {
	return &verifiedCertCache{next: next, clock: clk, cache: utilcache.NewLRUExpireCacheWithClock(verifiedCertCacheSize, clk)}
}

func (c *verifiedCertCache) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	h := sha256.New()
	expires := c.clock.Now().Add(authnCacheTTL)
	for _, cert := range r.TLS.PeerCertificates {
		h.Write(cert.Raw)
		if cert.NotAfter.Before(expires) {
			expires = cert.NotAfter
		}
	}
	key := string(h.Sum(nil))
	if cached, ok := c.cache.Get(key); ok {
		resp := *cached.(*authenticator.Response) // callers may not share one
		return &resp, true, nil
	}
	resp, ok, err := c.next.AuthenticateRequest(r)
	if err == nil && ok {
		if ttl := expires.Sub(c.clock.Now()); ttl > 0 {
			kept := *resp
			c.cache.Add(key, &kept, ttl)
		}
	}
	return resp, ok, err
}

// decisionCacheSize is twice the webhook authorizer's own LRU (8,192), so
// that the webhook forgets an answer before this cache does: an answer is
// then never kept longer than its TTL by the two caches together.
const decisionCacheSize = 2 * 8192

// decisionCache answers repeated authorizations from memory, with the
// kubelet's TTLs (allowed 5 min, denied 30 s; errors never kept), as the
// webhook authorizer's own cache does. It exists for its key: the webhook
// keys its cache on the SubjectAccessReview spec marshalled to JSON, which
// costs more than the rest of a metrics scrape's authorization; here the key
// is the same fields joined in one string. The webhook's cache stays behind
// it and is filled on the same miss, so the two expire together.
type decisionCache struct {
	next  authorizer.UnconditionalAuthorizer
	clock clock.PassiveClock
	cache *utilcache.LRUExpireCache
}

type decision struct {
	decision authorizer.Decision
	reason   string
}

func newDecisionCache(next authorizer.UnconditionalAuthorizer, clk clock.PassiveClock) *decisionCache {
	return &decisionCache{next: next, clock: clk, cache: utilcache.NewLRUExpireCacheWithClock(decisionCacheSize, clk)}
}

func (c *decisionCache) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if !cacheable(a) {
		return c.next.Authorize(ctx, a)
	}
	key := decisionKey(a)
	if cached, ok := c.cache.Get(key); ok {
		d := cached.(decision)
		return d.decision, d.reason, nil
	}
	d, reason, err := c.next.Authorize(ctx, a)
	if err != nil {
		return d, reason, err
	}
	ttl := authzDeniedCacheTTL
	if d == authorizer.DecisionAllow {
		ttl = authzAllowedCacheTTL
	}
	c.cache.Add(key, decision{d, reason}, ttl)
	return d, reason, nil
}

// maxCachedAttributesSize is the webhook's maxControlledAttrCacheSize: it
// caches no answer for attributes longer than this.
const maxCachedAttributesSize = 10000

// cacheable is the webhook's shouldCache, and no field or label selector:
// the kubelet's attributes never carry them, and decisionKey leaves them out.
func cacheable(a authorizer.Attributes) bool {
	size := len(a.GetNamespace()) + len(a.GetVerb()) + len(a.GetAPIGroup()) + len(a.GetAPIVersion()) +
		len(a.GetResource()) + len(a.GetSubresource()) + len(a.GetName()) + len(a.GetPath())
	if size >= maxCachedAttributesSize {
		return false
	}
	fs, ferr := a.GetFieldSelector()
	ls, lerr := a.GetLabelSelector()
	return len(fs) == 0 && len(ls) == 0 && ferr == nil && lerr == nil
}

// decisionKey holds every field of a that the webhook puts in its
// SubjectAccessReview (webhook.WebhookAuthorizer.Authorize): the user, and
// the resource attributes or, for a non-resource request, the path and verb.
func decisionKey(a authorizer.Attributes) string {
	var b strings.Builder
	field := func(s string) { b.WriteString(s); b.WriteByte(0) }
	u := a.GetUser()
	field(u.GetName())
	field(u.GetUID())
	b.WriteString(strconv.Itoa(len(u.GetGroups())))
	for _, g := range u.GetGroups() {
		field(g)
	}
	extra := u.GetExtra()
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		field(k)
		b.WriteString(strconv.Itoa(len(extra[k])))
		for _, v := range extra[k] {
			field(v)
		}
	}
	if !a.IsResourceRequest() {
		field("nonresource")
		field(a.GetPath())
		field(a.GetVerb())
		return b.String()
	}
	field("resource")
	for _, s := range []string{a.GetNamespace(), a.GetVerb(), a.GetAPIGroup(), a.GetAPIVersion(), a.GetResource(), a.GetSubresource(), a.GetName()} {
		field(s)
	}
	return b.String()
}
