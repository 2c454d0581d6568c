package submission

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/submit"
)

// Create creates one object, or only asks the API server whether it would (dryRun: its
// validation and admission webhooks answer, nothing is stored).
func Create(ctx context.Context, client kubernetes.Interface, ns string, o runtime.Object, dryRun bool) error {
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var err error
	var kind, name string
	switch x := o.(type) {
	case *batchv1.Job:
		kind, name = "Job", x.Name
		_, err = client.BatchV1().Jobs(ns).Create(ctx, x, opts)
	case *appsv1.Deployment:
		kind, name = "Deployment", x.Name
		_, err = client.AppsV1().Deployments(ns).Create(ctx, x, opts)
	case *appsv1.StatefulSet:
		kind, name = "StatefulSet", x.Name
		_, err = client.AppsV1().StatefulSets(ns).Create(ctx, x, opts)
	case *corev1.Service:
		kind, name = "Service", x.Name
		_, err = client.CoreV1().Services(ns).Create(ctx, x, opts)
	case *corev1.Pod:
		kind, name = "Pod", x.Name
		_, err = client.CoreV1().Pods(ns).Create(ctx, x, opts)
	case *resourcev1.ResourceClaimTemplate:
		kind, name = "ResourceClaimTemplate", x.Name
		_, err = client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, x, opts)
	case *networkingv1.Ingress:
		kind, name = "Ingress", x.Name
		_, err = client.NetworkingV1().Ingresses(ns).Create(ctx, x, opts)
	case *autoscalingv2.HorizontalPodAutoscaler:
		kind, name = "HorizontalPodAutoscaler", x.Name
		_, err = client.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, x, opts)
		if apierrors.IsInvalid(err) && x.Spec.MinReplicas != nil && *x.Spec.MinReplicas == 0 {
			return fmt.Errorf("refused: %s (--replicas 0:N needs the HPAScaleToZero feature gate on the cluster's API server and controller manager; docs/inference.md)", APIMessage(err))
		}
	default:
		return fmt.Errorf("cannot create %T", o)
	}
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s %s already exists in namespace %s (allot delete %s first)", kind, name, ns, name)
	}
	if err != nil {
		return fmt.Errorf("refused: %s", APIMessage(err))
	}
	return nil
}

// APIMessage is what the API server said, without client-go's wrapping.
func APIMessage(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Message != "" {
		return st.Status().Message
	}
	return err.Error()
}

// Check refuses, before anything is created, what could never run: a name another
// workload has, objects the API server or the admission webhooks refuse (asked with a
// server-side dry run, also for one pod of a Job's or Deployment's template, whose pods
// the webhooks would otherwise refuse only once the Job exists), and a request no node of
// the cluster can hold.
func Check(ctx context.Context, cl Clients, s submit.Spec, objs []runtime.Object, knownKind bool) error {
	all, err := inspect.Workloads(ctx, cl.Client, s.Namespace, "")
	if err != nil {
		return err
	}
	for _, w := range all {
		if w.Name == s.Name {
			return fmt.Errorf("a workload named %s already exists in namespace %s: %s (%s, %s, queue %s); choose another name, or allot delete %s first",
				s.Name, s.Namespace, w.Ref(), w.Type, strings.ToLower(w.Status), w.Queue, s.Name)
		}
	}
	for _, o := range objs {
		if err := Create(ctx, cl.Client, s.Namespace, o, true); err != nil {
			return err
		}
		var t *corev1.PodTemplateSpec
		switch x := o.(type) {
		case *batchv1.Job:
			t = &x.Spec.Template
		case *appsv1.Deployment:
			t = &x.Spec.Template
		case *appsv1.StatefulSet:
			t = &x.Spec.Template
		}
		if t != nil {
			p := &corev1.Pod{ObjectMeta: *t.ObjectMeta.DeepCopy(), Spec: *t.Spec.DeepCopy()}
			p.GenerateName, p.Namespace = s.Name+"-", s.Namespace
			if err := Create(ctx, cl.Client, s.Namespace, p, true); err != nil {
				return fmt.Errorf("%w (what the webhook says of the workload's pods)", err)
			}
		}
	}
	if !knownKind {
		return nil // a kind defined on the scheduler: the CLI cannot tell its nodes
	}
	if s.ManagedBy != "" {
		// A multi-cluster manager's own nodes do not run it: the manager says, for each
		// worker cluster, why none can start it (its allot.dev/waiting).
		return nil
	}
	nodes, err := cl.nodes(ctx)
	if err != nil {
		return err
	}
	pools, err := s.Pools(submitQueue(ctx, cl.Allot, s.Queue))
	if err != nil {
		return err
	}
	// It could run where any of its pools could hold it; if none could, the first one's
	// reason stands.
	var first error
	for _, p := range pools {
		r := s.Request()
		r.Pool = p
		err := inspect.Fits(nodes, r)
		if err == nil {
			return nil
		}
		first = cmp.Or(first, err)
	}
	return first
}

// submitQueue is the queue a workload is submitted to, as the scheduler will read its
// pools; nil where it cannot be read (the webhook then judges at creation).
func submitQueue(ctx context.Context, allot versioned.Interface, name string) *v1alpha1.Queue {
	q, err := allot.AllotV1alpha1().Queues().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return q
}

// QueueExists refuses a queue the cluster does not have, naming those it has. Someone
// who may not list Queues (a tenant with Kubernetes' edit role in a namespace) is not
// refused for it: the admission webhook checks the queue of what they submit.
func QueueExists(ctx context.Context, allot versioned.Interface, name string) error {
	qs, err := inspect.Queues(ctx, allot)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(qs))
	for _, q := range qs {
		if q.Name == name {
			return nil
		}
		names = append(names, q.Name)
	}
	return fmt.Errorf("queue %q does not exist; queues: %s", name, strings.Join(names, ", "))
}

// gpusThroughDRA tells whether every GPU node a workload of the pool could run on has its
// GPUs through DRA (ResourceSlices) rather than the device plugin: then GPUs must be
// claimed. In a mixed pool the device plugin is kept (--gpu-api dra asks otherwise). memMi
// is the memory of the smallest GPU of the pool's DRA nodes, of which -g 0.5 claims half.
func gpusThroughDRA(ctx context.Context, cl Clients, pool string) (only bool, memMi int64, err error) {
	nodes, err := cl.nodes(ctx)
	if err != nil {
		return false, 0, err
	}
	draNodes, pluginNodes := 0, 0
	for _, n := range nodes {
		if n.Pool != pool || len(n.GPUs) == 0 || n.Accelerator != "" {
			continue // not an NVIDIA GPU node: other vendors' devices are not claimed through DRA here
		}
		if !n.DRA {
			pluginNodes++
			continue
		}
		draNodes++
		if n.MemoryMi > 0 && (memMi == 0 || n.MemoryMi < memMi) {
			memMi = n.MemoryMi
		}
	}
	return draNodes > 0 && pluginNodes == 0, memMi, nil
}
