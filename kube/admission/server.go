package admission

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// logOnce routes controller-runtime's logs (the certificate watcher's) to slog.
var logOnce sync.Once

// Paths the webhooks answer on.
const (
	PathMutatePods     = "/mutate-pods"
	PathValidatePods   = "/validate-pods"
	PathMutateJobs     = "/mutate-jobs"
	PathMutateCreator  = "/mutate-creator"
	PathMutateDevices  = "/mutate-devices"
	PathValidateQueues = "/validate-queues"
)

// Serve answers admission reviews on l, with the TLS certificate getCert returns, until ctx
// ends; metrics, when not nil, counts and times the answers.
func Serve(ctx context.Context, l net.Listener, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error), m *Mutator, v *Validator, q *QueueValidator, metrics *Metrics) error {
	mux := http.NewServeMux()
	mux.Handle(PathMutatePods, &admission.Webhook{Handler: metrics.instrument("mutate-pods", m)})
	mux.Handle(PathValidatePods, &admission.Webhook{Handler: metrics.instrument("validate-pods", v)})
	mux.Handle(PathMutateJobs, &admission.Webhook{Handler: metrics.instrument("mutate-jobs", JobMutator{})})
	mux.Handle(PathMutateCreator, &admission.Webhook{Handler: metrics.instrument("mutate-creator", Creator{})})
	mux.Handle(PathMutateDevices, &admission.Webhook{Handler: metrics.instrument("mutate-devices", Devices{Mutator: m})})
	mux.Handle(PathValidateQueues, &admission.Webhook{Handler: metrics.instrument("validate-queues", q)})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert}}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// CertFiles serves the certificate in dir/tls.crt and dir/tls.key, reloading it when the
// files change (as a cert-manager or Helm-rotated Secret mounted there does).
func CertFiles(ctx context.Context, dir string) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	logOnce.Do(func() { ctrllog.SetLogger(logr.FromSlogHandler(slog.Default().Handler())) })
	w, err := certwatcher.New(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("webhook certificate in %s: %w", dir, err)
	}
	go func() { _ = w.Start(ctx) }()
	return w.GetCertificate, nil
}

// SelfSigned writes a self-signed certificate for a webhook on 127.0.0.1 into dir (kept
// across restarts) and returns the CA bundle the API server must trust.
func SelfSigned(dir string) (caBundle []byte, err error) {
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if b, err := os.ReadFile(crt); err == nil {
		if _, err := os.Stat(key); err == nil {
			return b, nil
		}
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		return nil, err
	}
	return certPEM, os.WriteFile(crt, certPEM, 0o600)
}

// MutateCondition selects the pods the mutating webhook has something to do for: pods of a
// workload (queue, class and gang come from the owner), pods without a queue label (the
// namespace's default), pods sharing a GPU, and pods with a container that asks for no GPU
// (an init container, a sidecar, every container of a GPU-less pod: each is told it has
// none, whatever its image says; a limit of 0 asks for none). A bare pod that names its
// queue and whose every container asks for whole GPUs skips the call, which halves the admission cost of the
// commonest submission.
// Pods with another scheduler's names (peers.go) are sent too: a scheduler name Allot takes
// over (the pod is rewritten to Allot's, whatever else it asks), their queue label, a
// sharing annotation, or any extended resource but nvidia.com/gpu (HAMi's gpumem and
// gpucores, other vendors' devices, refused unless the scheduler schedules their kind).
const MutateCondition = `object.spec.schedulerName != 'allot' || has(object.metadata.ownerReferences) || !has(object.metadata.labels) || !('allot.dev/queue' in object.metadata.labels) ||
(has(object.metadata.annotations) && ('allot.dev/gpu-fraction' in object.metadata.annotations || 'allot.dev/gpu-memory' in object.metadata.annotations ||
'allot.dev/gpu-compute' in object.metadata.annotations || 'allot.dev/translated' in object.metadata.annotations ||
object.metadata.annotations.exists(k, k in ['nvidia.com/use-gpuuuid', 'nvidia.com/nouse-gpuuuid', 'nvidia.com/use-gputype', 'nvidia.com/nouse-gputype',
'nvidia.com/numa-bind', 'nvidia.com/vgpu-mode', 'hami.io/node-scheduler-policy', 'hami.io/gpu-scheduler-policy', 'gpu-fraction', 'gpu-memory',
'gpu-fraction-num-devices']))) ||
object.metadata.labels.exists(k, k in ['kai.scheduler/queue', 'runai/queue']) ||
object.spec.containers.exists(c, has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k.contains('/') && k != 'nvidia.com/gpu')) ||
(has(c.resources.requests) && c.resources.requests.exists(k, k.contains('/') && k != 'nvidia.com/gpu')))) ||
(has(object.spec.initContainers) && size(object.spec.initContainers) > 0) ||
object.spec.containers.exists(c, !(has(c.resources) && has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits && string(c.resources.limits['nvidia.com/gpu']) != '0'))`

// SchedulerCondition is the match condition of the pod webhooks: pods of Allot's, and
// those of the schedulers an admin had it take over (Peers.AdoptSchedulers).
func SchedulerCondition(adopt []string) string {
	cond := "object.spec.schedulerName == 'allot'"
	for _, a := range adopt {
		cond += fmt.Sprintf(" || object.spec.schedulerName == '%s'", a)
	}
	return cond
}

// Register creates or updates the webhook configurations that send pods scheduled by
// Allot to the webhooks at baseURL. Only pods with schedulerName allot are sent: a webhook
// that is down never blocks anyone else's pods.
func Register(ctx context.Context, client kubernetes.Interface, baseURL string, caBundle []byte) error {
	return RegisterAdopting(ctx, client, baseURL, caBundle, Peers{})
}

// RegisterAdopting is Register where the mutating webhook also sees the pods of the
// schedulers named in adopt, which it rewrites to Allot's (Peers.AdoptSchedulers).
func RegisterAdopting(ctx context.Context, client kubernetes.Interface, baseURL string, caBundle []byte, peers Peers) error {
	fail := admissionregv1.Fail
	none := admissionregv1.SideEffectClassNone
	timeout := int32(10)
	rules := []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create},
		Rule: admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}
	ours := []admissionregv1.MatchCondition{{Name: "scheduled-by-allot", Expression: "object.spec.schedulerName == 'allot'"}}
	mutate := []admissionregv1.MatchCondition{{Name: "scheduled-by-allot", Expression: SchedulerCondition(peers.AdoptSchedulers)},
		{Name: "needs-defaults", Expression: MutateCondition}}
	url := func(path string) admissionregv1.WebhookClientConfig {
		u := baseURL + path
		return admissionregv1.WebhookClientConfig{URL: &u, CABundle: caBundle}
	}
	debug := admissionregv1.RuleWithOperations{Operations: []admissionregv1.OperationType{admissionregv1.Update},
		Rule: admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/ephemeralcontainers"}}}
	ignore := admissionregv1.Ignore
	mut := &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "allot"},
		Webhooks: []admissionregv1.MutatingWebhook{{Name: "pods.mutate.allot.dev", ClientConfig: url(PathMutatePods),
			Rules: rules, MatchConditions: mutate, FailurePolicy: &fail, SideEffects: &none, TimeoutSeconds: &timeout,
			AdmissionReviewVersions: []string{"v1"}},
			// kubectl debug's containers are told they have no device (mutate-pods sees the
			// subresource).
			{Name: "debug.mutate.allot.dev", ClientConfig: url(PathMutatePods),
				Rules: []admissionregv1.RuleWithOperations{debug}, MatchConditions: ours, FailurePolicy: &fail, SideEffects: &none,
				TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"}},
			{Name: "jobs.mutate.allot.dev", ClientConfig: url(PathMutateJobs),
				Rules: []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create},
					Rule: admissionregv1.Rule{APIGroups: []string{"batch"}, APIVersions: []string{"v1"}, Resources: []string{"jobs"}}}},
				MatchConditions: []admissionregv1.MatchCondition{{Name: "scheduled-by-allot", Expression: "object.spec.template.spec.schedulerName == 'allot'"}},
				FailurePolicy:   &fail, SideEffects: &none, TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"}},
			// Who created each workload; the allot-created-by policy keeps the value true
			// where this one does not answer.
			{Name: "creator.mutate.allot.dev", ClientConfig: url(PathMutateCreator), Rules: creatorRules(),
				MatchConditions: []admissionregv1.MatchCondition{{Name: "a-workloads-creator", Expression: CreatorCondition}},
				FailurePolicy:   &ignore, SideEffects: &none, TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"}},
			// Other schedulers' GPU pods in tenants' namespaces become Allot's, and get all
			// the webhook above gives Allot's pods (foreign.go): last, so that each pod is
			// mutated once (the one above sees them under their own scheduler's name).
			{Name: "tenants.mutate.allot.dev", ClientConfig: url(PathMutatePods), Rules: rules,
				MatchConditions: []admissionregv1.MatchCondition{{Name: "gpu-pod-of-another-scheduler", Expression: peers.TenantMutateCondition()}},
				FailurePolicy:   &ignore, SideEffects: &none, TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"}},
			// Other schedulers' pods there, GPU or not, are told which containers have no
			// device (DevicesCondition): after the one above, which has made the GPU pods
			// it takes Allot's.
			{Name: "devices.mutate.allot.dev", ClientConfig: url(PathMutateDevices), Rules: rules,
				MatchConditions: []admissionregv1.MatchCondition{{Name: "pod-of-another-scheduler", Expression: peers.DevicesCondition()}},
				FailurePolicy:   &ignore, SideEffects: &none, TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"}}}}
	// kubectl debug's ephemeral containers arrive as an update of pods/ephemeralcontainers.
	validateRules := append(slices.Clone(rules), debug)
	val := &admissionregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "allot"},
		Webhooks: []admissionregv1.ValidatingWebhook{{Name: "pods.validate.allot.dev", ClientConfig: url(PathValidatePods),
			Rules: validateRules, MatchConditions: ours, FailurePolicy: &fail, SideEffects: &none, TimeoutSeconds: &timeout,
			AdmissionReviewVersions: []string{"v1"}},
			{Name: "tenants.validate.allot.dev", ClientConfig: url(PathValidatePods), Rules: rules,
				MatchConditions: []admissionregv1.MatchCondition{{Name: "pod-of-a-tenant", Expression: peers.TenantValidateCondition()}},
				FailurePolicy:   &ignore, SideEffects: &none, TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"}},
			{Name: "queues.validate.allot.dev", ClientConfig: url(PathValidateQueues),
				Rules: []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update, admissionregv1.Delete},
					Rule: admissionregv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{v1alpha1.GroupVersion.Version}, Resources: []string{"queues"}}}},
				FailurePolicy: &fail, SideEffects: &none, TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"}}}}
	mc := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if cur, err := mc.Get(ctx, mut.Name, metav1.GetOptions{}); err == nil {
		mut.ResourceVersion = cur.ResourceVersion
		_, err = mc.Update(ctx, mut, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
	} else if apierrors.IsNotFound(err) {
		if _, err := mc.Create(ctx, mut, metav1.CreateOptions{}); err != nil {
			return err
		}
	} else {
		return err
	}
	vc := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if cur, err := vc.Get(ctx, val.Name, metav1.GetOptions{}); err == nil {
		val.ResourceVersion = cur.ResourceVersion
		_, err = vc.Update(ctx, val, metav1.UpdateOptions{})
		return err
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	_, err := vc.Create(ctx, val, metav1.CreateOptions{})
	return err
}

// creatorRules are CreatorRules on creation and update.
func creatorRules() []admissionregv1.RuleWithOperations {
	out := make([]admissionregv1.RuleWithOperations, len(CreatorRules))
	for i, r := range CreatorRules {
		out[i] = admissionregv1.RuleWithOperations{Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update}, Rule: r}
	}
	return out
}
