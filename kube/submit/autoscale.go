package submit

import (
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MetricGPUUtilization is the custom metric an inference service scales on: how busy its
// pods' GPUs are, in percent, as Allot's scheduler serves it (kube/metricsapi).
const MetricGPUUtilization = "gpu-utilization"

// DefaultTargetGPUUtilization is the utilisation a range of replicas aims at when
// --target-gpu-utilization is left out.
const DefaultTargetGPUUtilization = 70

// maxReplicas bounds --replicas: a typo of a few digits is refused rather than scaled to.
const maxReplicas = 1000

// ParseReplicas reads --replicas: N (that many, fixed) or MIN:MAX (scaled between them on
// GPU utilisation; MIN 0 lets it rest at zero).
func ParseReplicas(v string) (min, max int, err error) {
	bad := fmt.Errorf("--replicas %q is not allowed: N (from 1 to %d), or MIN:MAX for autoscaling on GPU utilisation (0 <= MIN <= MAX, 1 <= MAX <= %d)", v, maxReplicas, maxReplicas)
	lo, hi, isRange := strings.Cut(strings.TrimSpace(v), ":")
	if min, err = strconv.Atoi(lo); err != nil {
		return 0, 0, bad
	}
	max = min
	if isRange {
		if max, err = strconv.Atoi(hi); err != nil {
			return 0, 0, bad
		}
	}
	if min < 0 || max < 1 || min > max || max > maxReplicas {
		return 0, 0, bad
	}
	return min, max, nil
}

// scaled reports whether the spec asks for autoscaling (a range of replicas).
func (s Spec) scaled() bool { return s.MaxReplicas > 0 && s.MinReplicas < s.MaxReplicas }

// checkReplicas says what is wrong with the replica flags.
func (s Spec) checkReplicas() error {
	if (s.MaxReplicas > 0 || s.TargetGPUUtilization != 0) && !s.Inference {
		return fmt.Errorf("--replicas and --target-gpu-utilization are for --inference: other workloads run their pods once")
	}
	if s.MaxReplicas > 0 {
		if _, _, err := ParseReplicas(fmt.Sprintf("%d:%d", s.MinReplicas, s.MaxReplicas)); err != nil {
			return err
		}
	}
	if s.TargetGPUUtilization != 0 {
		if s.TargetGPUUtilization < 1 || s.TargetGPUUtilization > 100 {
			return fmt.Errorf("--target-gpu-utilization %d is not allowed: a percent from 1 to 100", s.TargetGPUUtilization)
		}
		if !s.scaled() {
			return fmt.Errorf("--target-gpu-utilization needs a range to scale in: --replicas MIN:MAX")
		}
	}
	return nil
}

// replicas is how many pods the Deployment starts with: the fixed number, or the range's
// minimum (at least one: a service at rest at zero starts once, then scales down).
func (s Spec) replicas() int32 {
	switch {
	case s.MaxReplicas == 0:
		return 1
	case s.scaled():
		return int32(max(s.MinReplicas, 1))
	}
	return int32(s.MaxReplicas)
}

// autoscaler is the HorizontalPodAutoscaler of a scaled inference service: on the pods'
// mean GPU utilisation (a Pods metric). With a minimum of 0 it scales on the Deployment's
// utilisation instead (an Object metric): Kubernetes lets an autoscaler reach zero only on
// an Object or External metric, and only where the HPAScaleToZero feature gate is on.
func (s Spec) autoscaler(d *appsv1.Deployment) *autoscalingv2.HorizontalPodAutoscaler {
	target := s.TargetGPUUtilization
	if target == 0 {
		target = DefaultTargetGPUUtilization
	}
	value := resource.NewQuantity(int64(target), resource.DecimalSI)
	metric := autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: MetricGPUUtilization},
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: value}}}
	if s.MinReplicas == 0 {
		metric = autoscalingv2.MetricSpec{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
			DescribedObject: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name},
			Metric:          autoscalingv2.MetricIdentifier{Name: MetricGPUUtilization},
			Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: value}}}
	}
	min := int32(s.MinReplicas)
	return &autoscalingv2.HorizontalPodAutoscaler{TypeMeta: metav1.TypeMeta{APIVersion: "autoscaling/v2", Kind: "HorizontalPodAutoscaler"},
		ObjectMeta: s.meta(),
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name},
			MinReplicas:    &min, MaxReplicas: int32(s.MaxReplicas), Metrics: []autoscalingv2.MetricSpec{metric}}}
}
