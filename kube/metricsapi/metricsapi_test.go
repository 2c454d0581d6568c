package metricsapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"

	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/stack"
	"github.com/allot-dev/allot/kube/submit"
)

// inference submits an inference service as allot submit does, its pods keeping their GPUs
// util percent busy (the simulated kubelet reports it as the node's agent would).
func inference(t *testing.T, e *kubetest.Env, name, replicas string, util int) {
	t.Helper()
	lo, hi, err := submit.ParseReplicas(replicas)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := submit.Spec{Name: name, Namespace: "default", Queue: "serving", Image: "vllm/vllm-openai", GPUs: "1", Inference: true,
		MinReplicas: lo, MaxReplicas: hi, TargetGPUUtilization: 70}.Objects()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		switch x := o.(type) {
		case *appsv1.Deployment:
			x.Spec.Template.Annotations[simnode.AnnotationUtilization] = fmt.Sprint(util)
			if _, err := e.Client.AppsV1().Deployments("default").Create(e.Ctx, x, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case *autoscalingv2.HorizontalPodAutoscaler:
			if lo == 0 {
				// Upstream waits five minutes of low readings before scaling down; the test
				// does not.
				zero := int32(0)
				x.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &zero}}
			}
			if _, err := e.Client.AutoscalingV2().HorizontalPodAutoscalers("default").Create(e.Ctx, x, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("inference made %T", o)
		}
	}
}

// waitLong polls cond for up to three minutes: an autoscaler acts every few seconds, on
// readings the agents report every ten.
func waitLong(t *testing.T, e *kubetest.Env, what string, cond func() (bool, string)) {
	t.Helper()
	last := ""
	err := wait.PollUntilContextTimeout(e.Ctx, 500*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		ok, msg := cond()
		last = msg
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %s)", what, err, last)
	}
}

// TestGPUUtilizationAutoscaling: the embedded cluster's aggregator serves the scheduler's
// custom metrics API; a Deployment whose pods keep their GPUs 90% busy reads 90 there, and
// the real HorizontalPodAutoscaler controller scales it up to its maximum of 4 and no
// further; one idle, allowed to rest at zero (--replicas 0:2), goes to zero.
func TestGPUUtilizationAutoscaling(t *testing.T) {
	// As on allot up: each node's GPUs on NVML's mock, read by the real agent, which
	// reports their load on its Lease.
	e, _ := kubetest.StartWithAgents(t, 2, 8, "")
	// Readings count once a pod has run 2s (the default is minutes: a server loading its
	// model reads idle).
	if _, err := stack.LocalWith(e.Ctx, e.Cluster.Config, e.Cluster.Config, e.Dir, "",
		stack.Options{Scheduler: scheduler.Options{Interval: 200 * time.Millisecond}, CustomMetricsWarmup: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "serving", 16, nil)
	inference(t, e, "llm", "1:4", 90)
	inference(t, e, "idle", "0:2", 0)

	// The metric, through the API server: per pod, and for the Deployment.
	rest := e.Client.CoreV1().RESTClient()
	read := func(path string) (cmv1beta2.MetricValueList, error) {
		var l cmv1beta2.MetricValueList
		b, err := rest.Get().AbsPath(path).DoRaw(e.Ctx)
		if err == nil {
			err = json.Unmarshal(b, &l)
		}
		return l, err
	}
	waitLong(t, e, "llm's pods read 90 at the custom metrics API", func() (bool, string) {
		l, err := read("/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/gpu-utilization")
		if err != nil {
			return false, err.Error()
		}
		for _, v := range l.Items {
			if v.DescribedObject.Kind == "Pod" && v.Value.MilliValue() == 90_000 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", l.Items)
	})
	if l, err := read("/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/deployments.apps/llm/gpu-utilization"); err != nil ||
		len(l.Items) != 1 || l.Items[0].Value.MilliValue() != 90_000 {
		t.Fatalf("llm's Deployment: %v %+v", err, l.Items)
	}
	if _, err := read("/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/no-such-metric"); err == nil {
		t.Fatal("an unknown metric was answered")
	}

	most := int32(0)
	waitLong(t, e, "llm scaled up to its maximum of 4", func() (bool, string) {
		d, err := e.Client.AppsV1().Deployments("default").Get(e.Ctx, "llm", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		most = max(most, *d.Spec.Replicas)
		return *d.Spec.Replicas == 4 && d.Status.ReadyReplicas == 4, fmt.Sprintf("replicas %d, ready %d", *d.Spec.Replicas, d.Status.ReadyReplicas)
	})
	waitLong(t, e, "idle scaled to zero", func() (bool, string) {
		d, err := e.Client.AppsV1().Deployments("default").Get(e.Ctx, "idle", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		h, _ := e.Client.AutoscalingV2().HorizontalPodAutoscalers("default").Get(e.Ctx, "idle", metav1.GetOptions{})
		return *d.Spec.Replicas == 0, fmt.Sprintf("replicas %d; autoscaler %+v", *d.Spec.Replicas, h.Status.Conditions)
	})
	// With four pods at 90 the autoscaler wants more than its maximum and says it holds at 4.
	waitLong(t, e, "llm's autoscaler limited at 4", func() (bool, string) {
		h, err := e.Client.AutoscalingV2().HorizontalPodAutoscalers("default").Get(e.Ctx, "llm", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range h.Status.Conditions {
			if c.Type == autoscalingv2.ScalingLimited && c.Status == "True" && c.Reason == "TooManyReplicas" {
				return h.Status.DesiredReplicas == 4, fmt.Sprintf("desired %d", h.Status.DesiredReplicas)
			}
		}
		return false, fmt.Sprintf("%+v", h.Status.Conditions)
	})
	d, err := e.Client.AppsV1().Deployments("default").Get(e.Ctx, "llm", metav1.GetOptions{})
	if err != nil || *d.Spec.Replicas != 4 || most > 4 {
		t.Fatalf("llm past its maximum: %v replicas %d, most seen %d", err, *d.Spec.Replicas, most)
	}
}
