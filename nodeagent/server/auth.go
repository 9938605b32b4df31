package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	apiserverconfig "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
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
func NewDelegatingAuth(client kubernetes.Interface, clientCAPEM []byte) (authenticator.Request, authorizer.Authorizer, error) {
	if client == nil {
		return nil, nil, errors.New("kubelet API auth: no API server client; webhook authentication and authorization need one to send TokenReviews and SubjectAccessReviews")
	}
	authnConfig := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:               &apiserverconfig.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient: client.AuthenticationV1(),
		WebhookRetryBackoff:     webhookRetryBackoff(),
		CacheTTL:                authnCacheTTL,
	}
	if len(clientCAPEM) > 0 {
		// Static content: the fleet's CA does not rotate during a run, and a
		// file-watching provider would add a goroutine for nothing.
		ca, err := dynamiccertificates.NewStaticCAContent("client-ca-bundle", clientCAPEM)
		if err != nil {
			return nil, nil, fmt.Errorf("kubelet API auth: client CA bundle: %w; pass the PEM of the CA that signs the API server's kubelet client certificate", err)
		}
		authnConfig.ClientCertificateCAContentProvider = ca
	}
	authn, _, err := authnConfig.New()
	if err != nil {
		return nil, nil, fmt.Errorf("kubelet API auth: building the webhook authenticator: %w", err)
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
	return authn, authz, nil
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
