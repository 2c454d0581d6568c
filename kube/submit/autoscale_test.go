package submit

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
)

// TestReplicas: --replicas N is a fixed Deployment; MIN:MAX adds an autoscaler on the pods'
// GPU utilisation, at the target asked (70 by default), on the Deployment's own when it may
// rest at zero; bad values are refused by name.
func TestReplicas(t *testing.T) {
	build := func(replicas string, target int) (*appsv1.Deployment, *autoscalingv2.HorizontalPodAutoscaler) {
		t.Helper()
		s := base()
		s.Inference, s.GPUs, s.TargetGPUUtilization = true, "1", target
		var err error
		if s.MinReplicas, s.MaxReplicas, err = ParseReplicas(replicas); err != nil {
			t.Fatal(err)
		}
		objs, err := s.Objects()
		if err != nil {
			t.Fatal(err)
		}
		d := objs[0].(*appsv1.Deployment)
		if len(objs) == 1 {
			return d, nil
		}
		return d, objs[1].(*autoscalingv2.HorizontalPodAutoscaler)
	}
	if d, h := build("3", 0); *d.Spec.Replicas != 3 || h != nil {
		t.Fatalf("--replicas 3: replicas %d, autoscaler %v", *d.Spec.Replicas, h)
	}
	d, h := build("1:4", 80)
	m := h.Spec.Metrics[0]
	if *d.Spec.Replicas != 1 || *h.Spec.MinReplicas != 1 || h.Spec.MaxReplicas != 4 || h.Spec.ScaleTargetRef.Name != "job" ||
		m.Type != autoscalingv2.PodsMetricSourceType || m.Pods.Metric.Name != "gpu-utilization" || m.Pods.Target.AverageValue.Value() != 80 {
		t.Fatalf("--replicas 1:4 --target-gpu-utilization 80: replicas %d, autoscaler %+v", *d.Spec.Replicas, h.Spec)
	}
	d, h = build("0:2", 0)
	m = h.Spec.Metrics[0]
	if *d.Spec.Replicas != 1 || *h.Spec.MinReplicas != 0 || m.Type != autoscalingv2.ObjectMetricSourceType ||
		m.Object.DescribedObject.Kind != "Deployment" || m.Object.Target.Value.Value() != DefaultTargetGPUUtilization {
		t.Fatalf("--replicas 0:2: replicas %d, autoscaler %+v", *d.Spec.Replicas, h.Spec)
	}
	for _, bad := range []string{"", "x", "0", "-1:2", "3:2", "1:1001", "1:x", "1:2:3"} {
		if _, _, err := ParseReplicas(bad); err == nil || !strings.Contains(err.Error(), "--replicas") {
			t.Errorf("--replicas %q: %v", bad, err)
		}
	}
	for _, c := range []struct {
		edit func(*Spec)
		want string
	}{
		{func(s *Spec) { s.MinReplicas, s.MaxReplicas = 1, 2 }, "--replicas and --target-gpu-utilization are for --inference"},
		{func(s *Spec) { s.Inference, s.MinReplicas, s.MaxReplicas, s.TargetGPUUtilization = true, 1, 2, 101 }, "--target-gpu-utilization 101 is not allowed: a percent from 1 to 100"},
		{func(s *Spec) { s.Inference, s.MinReplicas, s.MaxReplicas, s.TargetGPUUtilization = true, 2, 2, 70 }, "--target-gpu-utilization needs a range to scale in"},
		{func(s *Spec) { s.Inference, s.TargetGPUUtilization = true, 70 }, "--target-gpu-utilization needs a range to scale in"},
	} {
		s := base()
		c.edit(&s)
		if _, err := s.Objects(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
