package submit

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// FuzzObjects: whatever is typed after -g, --gpu-memory, --cpu, --memory, --env and the
// worker counts, `allot submit` builds objects the scheduler can read or says which flag
// is wrong, before anything reaches the API server; it never panics.
func FuzzObjects(f *testing.F) {
	f.Add("1", "", "", "", "A=1", 0, 0, false)
	f.Add("0.5", "", "2", "8Gi", "", 0, 0, true)
	f.Add("", "8Gi", "500m", "", "", 4, 2, false)
	f.Add("1e400", "-1Gi", "NaN", "1e999", "=", -1, 9, false)
	f.Fuzz(func(t *testing.T, gpus, gpuMemory, cpu, memory, env string, workers, minWorkers int, interactive bool) {
		s := Spec{Name: "job", Namespace: "default", Queue: "team-a", Image: "pytorch", GPUs: gpus, GPUMemory: gpuMemory,
			CPU: cpu, Memory: memory, Interactive: interactive, Workers: workers, MinWorkers: minWorkers}
		if env != "" {
			s.Env = []string{env}
		}
		objs, err := s.Objects()
		if err != nil {
			if err.Error() == "" || strings.Contains(err.Error(), "panic") {
				t.Fatalf("unhelpful error %q", err)
			}
			return
		}
		for _, o := range objs {
			for _, p := range podSpecs(o) {
				a := p.Annotations
				if _, err := v1alpha1.ParseGPUShare(a); err != nil {
					t.Fatalf("submit wrote annotations the scheduler refuses: %v", err)
				}
				for _, c := range p.Spec.Containers {
					if q, ok := c.Resources.Limits[v1alpha1.GPUResource]; ok && q.Sign() < 0 {
						t.Fatalf("negative GPUs %s from %q", q.String(), gpus)
					}
				}
			}
		}
	})
}

func podSpecs(o runtime.Object) []corev1.PodTemplateSpec {
	switch x := o.(type) {
	case *batchv1.Job:
		return []corev1.PodTemplateSpec{x.Spec.Template}
	case *appsv1.Deployment:
		return []corev1.PodTemplateSpec{x.Spec.Template}
	case *appsv1.StatefulSet:
		return []corev1.PodTemplateSpec{x.Spec.Template}
	}
	return nil
}
