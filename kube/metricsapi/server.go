package metricsapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/stores"
)

// Where the API server publishes how it forwards users to aggregated APIs.
const (
	authConfigMap   = "extension-apiserver-authentication"
	authConfigMapNS = metav1.NamespaceSystem
)

// Server answers the custom metrics API. Every request is authenticated as an aggregated
// API server's are (the API server's front-proxy certificate and the user it forwards in
// headers, or a bearer token by TokenReview) and authorised by SubjectAccessReview:
// Kubernetes' own delegating authenticator and authoriser.
type Server struct {
	stores      stores.Source // pods, nodes and the agents' Leases
	deployments appslisters.DeploymentLister
	authn       authenticator.Request
	authz       authorizer.Authorizer
	now         func() time.Time
	// Warmup is how long a pod runs before its reading counts (DefaultWarmup when zero): a
	// server loading its model reads idle, and an autoscaler told so would take it away
	// before it ever served.
	Warmup time.Duration
	// Simulated says which nodes' own utilisation annotation is believed without an
	// agent's live Lease (idle.Options.Simulated: the embedded cluster's simulated
	// nodes). Nil, as on a real cluster: agents' Leases alone.
	Simulated func(*corev1.Node) bool
}

// DefaultWarmup is Warmup when it is not set.
const DefaultWarmup = 2 * time.Minute

// New starts what the server reads (an informer of Deployments and the API server's
// front-proxy settings) and returns once they are synced. Pods, nodes and the agents'
// Leases are read from src: the scheduler's informers (scheduler.Stores), so that the
// process holds one copy of every pod; nil starts informers of the server's own (a
// server run alone).
func New(ctx context.Context, client kubernetes.Interface, src stores.Source) (*Server, error) {
	ca, err := dynamiccertificates.NewDynamicCAFromConfigMapController("front-proxy-ca", authConfigMapNS, authConfigMap, "requestheader-client-ca-file", client)
	if err != nil {
		return nil, err
	}
	hdr := headerrequest.NewRequestHeaderAuthRequestController(authConfigMap, authConfigMapNS, client, "requestheader-username-headers",
		"requestheader-uid-headers", "requestheader-group-headers", "requestheader-extra-headers-prefix", "requestheader-allowed-names")
	if err := ca.RunOnce(ctx); err != nil {
		return nil, fmt.Errorf("the API server's front-proxy CA (configmap %s/%s): %w", authConfigMapNS, authConfigMap, err)
	}
	if err := hdr.RunOnce(ctx); err != nil {
		return nil, fmt.Errorf("the API server's request headers (configmap %s/%s): %w", authConfigMapNS, authConfigMap, err)
	}
	go ca.Run(ctx, 1)
	go hdr.Run(ctx, 1)
	strs := func(f func() []string) headerrequest.StringSliceProvider {
		return headerrequest.StringSliceProviderFunc(f)
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:  client.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      options.DefaultAuthWebhookRetryBackoff(),
		CacheTTL:                 10 * time.Second,
		RequestHeaderConfig: &authenticatorfactory.RequestHeaderConfig{CAContentProvider: ca,
			UsernameHeaders: strs(hdr.UsernameHeaders), UIDHeaders: strs(hdr.UIDHeaders), GroupHeaders: strs(hdr.GroupHeaders),
			ExtraHeaderPrefixes: strs(hdr.ExtraHeaderPrefixes), AllowedClientNames: strs(hdr.AllowedClientNames)},
	}.New()
	if err != nil {
		return nil, err
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL: 10 * time.Second, DenyCacheTTL: 10 * time.Second, WebhookRetryBackoff: options.DefaultAuthWebhookRetryBackoff()}.New()
	if err != nil {
		return nil, err
	}
	if src == nil {
		if src, err = stores.Start(ctx, client, nil); err != nil {
			return nil, fmt.Errorf("custom metrics API: %w", err)
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(stores.DropManagedFields))
	s := &Server{stores: src, deployments: factory.Apps().V1().Deployments().Lister(), authn: authn, authz: authz, now: time.Now}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("custom metrics API: %v informer did not sync", typ)
		}
	}
	return s, nil
}

// Serve serves the API over TLS on l until ctx ends. The TLS handshake asks for a client
// certificate without requiring one: the front proxy presents its own, which the
// authenticator verifies; other clients come with a token.
func (s *Server) Serve(ctx context.Context, l net.Listener, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) error {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert, ClientAuth: tls.RequestClientCert}}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

var prefix = "/apis/" + Group + "/" + Version

// ServeHTTP answers discovery and metric reads.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		status(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "the custom metrics API is read-only")
		return
	}
	resp, ok, err := s.authn.AuthenticateRequest(r)
	if err != nil || !ok {
		status(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch path {
	case "/apis/" + Group:
		writeJSON(w, metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: Group,
			Versions:         []metav1.GroupVersionForDiscovery{{GroupVersion: Group + "/" + Version, Version: Version}},
			PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: Group + "/" + Version, Version: Version}})
		return
	case prefix:
		// The metrics it has, as custom-metrics servers list theirs: resource/metric.
		writeJSON(w, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: Group + "/" + Version,
			APIResources: []metav1.APIResource{
				{Name: "pods/" + MetricGPUUtilization, Namespaced: true, Kind: "MetricValueList", Verbs: []string{"get"}},
				{Name: "deployments.apps/" + MetricGPUUtilization, Namespaced: true, Kind: "MetricValueList", Verbs: []string{"get"}},
			}})
		return
	}
	// namespaces/{ns}/{resource}/{name|*}/{metric}
	parts := strings.Split(strings.TrimPrefix(path, prefix+"/"), "/")
	if !strings.HasPrefix(path, prefix+"/") || len(parts) != 5 || parts[0] != "namespaces" {
		status(w, http.StatusNotFound, "NotFound", "no such path: this server has "+prefix+"/namespaces/NAMESPACE/{pods,deployments.apps}/NAME/"+MetricGPUUtilization)
		return
	}
	ns, res, name, metric := parts[1], parts[2], parts[3], parts[4]
	verb := "get"
	if name == "*" {
		verb = "list"
	}
	decision, reason, err := s.authz.Authorize(r.Context(), authorizer.AttributesRecord{User: resp.User, Verb: verb, Namespace: ns,
		APIGroup: Group, APIVersion: Version, Resource: res, Subresource: metric, Name: name, ResourceRequest: true, Path: r.URL.Path})
	if err != nil || decision != authorizer.DecisionAllow {
		status(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("%s cannot %s %s/%s %s in namespace %s: %s", resp.User.GetName(), verb, res, name, metric, ns, reason))
		return
	}
	if metric != MetricGPUUtilization {
		status(w, http.StatusNotFound, "NotFound", fmt.Sprintf("no metric %q: this server has %s", metric, MetricGPUUtilization))
		return
	}
	var items []cmv1beta2.MetricValue
	switch res {
	case "pods":
		items, err = s.podValues(ns, name, r.URL.Query().Get("labelSelector"))
	case "deployments.apps", "deployments":
		items, err = s.deploymentValue(ns, name)
	default:
		status(w, http.StatusNotFound, "NotFound", fmt.Sprintf("no metric %s for %s: this server has it for pods and deployments.apps", metric, res))
		return
	}
	if err != nil {
		status(w, http.StatusNotFound, "NotFound", err.Error())
		return
	}
	writeJSON(w, cmv1beta2.MetricValueList{TypeMeta: metav1.TypeMeta{Kind: "MetricValueList", APIVersion: Group + "/" + Version}, Items: items})
}

// window is the span a value covers: the agent's report interval, as it reads the counters.
var window = int64(10)

func (s *Server) value(obj corev1.ObjectReference, util float64) cmv1beta2.MetricValue {
	return cmv1beta2.MetricValue{DescribedObject: obj, Metric: cmv1beta2.MetricIdentifier{Name: MetricGPUUtilization},
		Timestamp: metav1.NewTime(s.now()), WindowSeconds: &window, Value: *resource.NewMilliQuantity(int64(util*1000+0.5), resource.DecimalSI)}
}

// podValues are the pods' values: one pod by name, or those a selector picks (name *).
func (s *Server) podValues(ns, name, selector string) ([]cmv1beta2.MetricValue, error) {
	st, err := s.stores.Get()
	if err != nil {
		return nil, err
	}
	var pods []*corev1.Pod
	if name == "*" {
		sel, err := labels.Parse(selector)
		if err != nil {
			return nil, fmt.Errorf("labelSelector %q: %w", selector, err)
		}
		if pods, err = st.Pods.Pods(ns).List(sel); err != nil {
			return nil, err
		}
	} else {
		p, err := st.Pods.Pods(ns).Get(name)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", ns, name, err)
		}
		pods = []*corev1.Pod{p}
	}
	items := []cmv1beta2.MetricValue{}
	for _, p := range pods {
		if u, ok := s.podUtil(st, p); ok {
			items = append(items, s.value(corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name}, u))
		}
	}
	if name != "*" && len(items) == 0 {
		return nil, fmt.Errorf("pod %s/%s has no %s: it holds no GPU its node's agent reports on, or it is not running", ns, name, MetricGPUUtilization)
	}
	return items, nil
}

func (s *Server) warmup() time.Duration {
	if s.Warmup > 0 {
		return s.Warmup
	}
	return DefaultWarmup
}

func (s *Server) podUtil(st stores.Stores, p *corev1.Pod) (float64, bool) {
	if p.Spec.NodeName == "" || p.Status.StartTime == nil || s.now().Sub(p.Status.StartTime.Time) < s.warmup() {
		return 0, false
	}
	n, err := st.Nodes.Get(p.Spec.NodeName)
	if err != nil {
		return 0, false
	}
	agent, _ := st.Leases.Get(v1alpha1.AgentLeaseName(n.Name))
	return podUtilization(p, heldDevices(p, n), deviceUtilization(n, agent, s.now(), s.Simulated != nil && s.Simulated(n)))
}

// deploymentValue is a Deployment's value: the mean over its running pods that hold GPUs.
func (s *Server) deploymentValue(ns, name string) ([]cmv1beta2.MetricValue, error) {
	d, err := s.deployments.Deployments(ns).Get(name)
	if err != nil {
		return nil, fmt.Errorf("deployment %s/%s: %w", ns, name, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, err
	}
	st, err := s.stores.Get()
	if err != nil {
		return nil, err
	}
	pods, err := st.Pods.Pods(ns).List(sel)
	if err != nil {
		return nil, err
	}
	sum, n := 0.0, 0
	for _, p := range pods {
		if u, ok := s.podUtil(st, p); ok {
			sum, n = sum+u, n+1
		}
	}
	mean := 0.0
	switch {
	case n > 0:
		mean = sum / float64(n)
	case d.Spec.Replicas == nil || *d.Spec.Replicas > 0:
		// Pods are asked for but none has a reading yet (pending, warming up, its agent's
		// reports stopped): no value, and the autoscaler holds. A 0 would have it take the
		// service away before it served, or while its agent is down.
		return nil, fmt.Errorf("deployment %s/%s has no %s yet: none of its pods has run %v with a reading of its GPUs", ns, name, MetricGPUUtilization, s.warmup())
	}
	// At rest at zero replicas the value is 0: nothing is busy, which lets a
	// HorizontalPodAutoscaler with minReplicas 0 (HPAScaleToZero) keep it there.
	return []cmv1beta2.MetricValue{s.value(corev1.ObjectReference{Kind: "Deployment", APIVersion: appsv1.SchemeGroupVersion.String(),
		Namespace: ns, Name: name, UID: d.UID}, mean)}, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		slog.Warn("custom metrics API: writing a response", "err", err)
	}
}

// status answers an error as the API server does, with a Status.
func status(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Message: msg, Reason: reason, Code: int32(code)})
}
