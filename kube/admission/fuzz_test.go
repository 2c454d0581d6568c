package admission

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// FuzzWebhooks: whatever body the API server forwards (a pod with any annotations and
// labels, an owner whose spec the CRD did not check, a Job, or bytes that are none of
// these), the webhooks answer without a panic: a patch, an allowance, or a refusal
// or error with a message; and a gang size written onto a pod stays within MaxGang.
func FuzzWebhooks(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"p","labels":{"allot.dev/queue":"team-a"},"annotations":{"allot.dev/gpu-fraction":"0.5"}},"spec":{"schedulerName":"allot","containers":[{"name":"c"}]}}`),
		"Job", []byte(`{"spec":{"parallelism":4,"completions":4}}`))
	f.Add([]byte(`{"metadata":{"name":"p","labels":{"allot.dev/queue":"team-a","allot.dev/pod-group":"trio"},"annotations":{"allot.dev/gpu-memory":"1Ti","allot.dev/gpu-compute":"-1"}},"spec":{"schedulerName":"allot","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"9e18"}}}]}}`),
		"PyTorchJob", []byte(`{"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":1e30}}}}`))
	f.Add([]byte(`{"spec":{"template":{"spec":{"schedulerName":"allot","restartPolicy":"Never"}}}}`), "", []byte(`null`))
	f.Add([]byte(`not json`), "Deployment", []byte(`{`))
	f.Fuzz(func(t *testing.T, body []byte, ownerKind string, owner []byte) {
		var obj map[string]any
		_ = json.Unmarshal(owner, &obj)
		w := Workload{Kind: ownerKind, Name: "owner", Labels: map[string]string{}}
		if obj != nil {
			w.Object = &unstructured.Unstructured{Object: obj}
			w.Object.SetKind(ownerKind)
		}
		owners := func(context.Context, *corev1.Pod) Workload { return w }
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "fuzz", Namespace: "default", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: body}}}
		ctx := context.Background()
		for name, h := range map[string]admission.Handler{
			"pods mutator":   &Mutator{View: view{}, Owners: owners},
			"pods validator": &Validator{View: view{}},
			"jobs mutator":   JobMutator{},
			// Of the tenants' namespace ml (queue ml-only): the pod's own says nothing here.
			"devices mutator": Devices{Mutator: &Mutator{View: view{}}},
		} {
			r := h.Handle(ctx, req)
			if !r.Allowed && (r.Result == nil || r.Result.Message == "") {
				t.Fatalf("%s refused %s without a message", name, body)
			}
			for _, p := range r.Patches {
				if p.Path != "/metadata/annotations/"+jsonPointer(v1alpha1.AnnotationMinMember) {
					continue
				}
				s, _ := p.Value.(string)
				if n, err := strconv.Atoi(s); err != nil || n < 1 || n > v1alpha1.MaxGang {
					t.Fatalf("%s wrote min-member %v", name, p.Value)
				}
			}
		}
	})
}

// jsonPointer escapes a key for a JSON patch path (RFC 6901).
var jsonPointer = strings.NewReplacer("~", "~0", "/", "~1").Replace
