package admission

import (
	"context"
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// The creator webhook writes the requester's name over whatever a top object carries, and
// leaves owned objects (a controller's) and updates alone.
func TestCreatorRecordsTheRequester(t *testing.T) {
	review := func(op admissionv1.Operation, obj string) admission.Response {
		return Creator{}.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: op, UserInfo: authenticationv1.UserInfo{Username: "alice"}, Object: runtime.RawExtension{Raw: []byte(obj)}}})
	}
	for _, c := range []struct {
		name, obj string
		want      string // the patch, "" for none
	}{
		{"a Job", `{"kind":"Job","metadata":{"name":"j"}}`, `[{"op":"add","path":"/metadata/annotations","value":{"allot.dev/created-by":"alice"}}]`},
		{"a forged name", `{"kind":"Job","metadata":{"name":"j","annotations":{"allot.dev/created-by":"dave"}}}`,
			`[{"op":"replace","path":"/metadata/annotations/allot.dev~1created-by","value":"alice"}]`},
		{"a controller's pod", `{"kind":"Pod","metadata":{"name":"p","ownerReferences":[{"kind":"Job","name":"j"}]}}`, ""},
	} {
		r := review(admissionv1.Create, c.obj)
		got, _ := json.Marshal(r.Patches)
		if !r.Allowed || (c.want == "") != (len(r.Patches) == 0) || c.want != "" && string(got) != c.want {
			t.Errorf("%s: allowed %v, patch %s, want %s", c.name, r.Allowed, got, c.want)
		}
	}
	// An update that drops the name gets it back; one that changes it is the policy's.
	update := func(obj string) admission.Response {
		return Creator{}.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Update, UserInfo: authenticationv1.UserInfo{Username: "bob"}, Object: runtime.RawExtension{Raw: []byte(obj)},
			OldObject: runtime.RawExtension{Raw: []byte(`{"kind":"Job","metadata":{"name":"j","annotations":{"allot.dev/created-by":"alice"}}}`)}}})
	}
	if r := update(`{"kind":"Job","metadata":{"name":"j"}}`); !r.Allowed || len(r.Patches) != 1 || r.Patches[0].Value.(map[string]any)["allot.dev/created-by"] != "alice" {
		t.Errorf("an update dropping the name: %+v", r.Patches)
	}
	if r := update(`{"kind":"Job","metadata":{"name":"j","annotations":{"allot.dev/created-by":"dave"}}}`); !r.Allowed || len(r.Patches) != 0 {
		t.Errorf("an update changing the name: %+v", r.Patches)
	}
}
