package admission

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// classView is view with a queue, notebooks, that runs interactive workloads only.
type classView struct{ view }

func (v classView) Queue(name string) (*v1alpha1.Queue, bool) {
	if name == "notebooks" {
		return &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.QueueSpec{Class: v1alpha1.ClassInteractive}}, true
	}
	return v.view.Queue(name)
}

// A queue that fixes its class gives it to every pod, over the class its owner's label
// says (a notebook run as a Deployment labelled train), and a pod naming another class
// itself is refused: the queue's time limit and idle timeout reach all it runs.
func TestQueueFixesTheClass(t *testing.T) {
	owner := Workload{Kind: "Deployment", Name: "nb", Labels: map[string]string{v1alpha1.LabelClass: v1alpha1.ClassTrain}}
	p := admitWith(t, classView{}, owner, pod("notebooks", 1, nil, nil))
	if c := p.Labels[v1alpha1.LabelClass]; c != v1alpha1.ClassInteractive {
		t.Errorf("a pod of a Deployment labelled train in queue notebooks got class %q, want interactive", c)
	}
	if err := ValidatePod(p, classView{}, nil); err != nil {
		t.Errorf("the pod as the webhook left it: %v", err)
	}
	own := pod("notebooks", 1, map[string]string{v1alpha1.LabelClass: v1alpha1.ClassTrain}, nil)
	err := ValidatePod(own, classView{}, nil)
	if want := `allot.dev/class: "train" is not allowed in queue notebooks, which runs interactive workloads only`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a pod labelled train in queue notebooks: %v, want %q", err, want)
	}
	// Elsewhere the owner's class stands.
	if c := admitWith(t, classView{}, owner, pod("team-a", 1, nil, nil)).Labels[v1alpha1.LabelClass]; c != v1alpha1.ClassTrain {
		t.Errorf("in a queue that fixes no class the pod got %q, want its owner's train", c)
	}
}

// A queue naming no namespace admits those no queue claims: from ml (which queue ml-only
// names) a pod may not use the open queue team-a; from default it may.
func TestOpenQueueAdmitsUnclaimedNamespacesOnly(t *testing.T) {
	p := pod("team-a", 1, nil, nil)
	p.Namespace = "ml"
	err := ValidatePod(p, view{}, nil)
	if want := `allot.dev/queue: namespace "ml" may not use queue "team-a", which admits only namespaces no queue claims: "ml" is ml-only's`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("ml using the open queue: %v, want %q", err, want)
	}
	if err := ValidatePod(pod("team-a", 1, nil, nil), view{}, nil); err != nil {
		t.Errorf("default using the open queue: %v", err)
	}
	p.Labels[v1alpha1.LabelQueue] = "ml-only"
	if err := ValidatePod(p, view{}, nil); err != nil {
		t.Errorf("ml using its own queue: %v", err)
	}
}
