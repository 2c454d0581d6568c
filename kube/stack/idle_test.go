package stack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/control"
	"github.com/allot-dev/allot/kube/idle"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/stack"
	"github.com/allot-dev/allot/kube/submit"
)

// submitBusy creates what allot submit makes of s, its pods keeping their GPUs busy at
// percent on the simulated nodes.
func submitBusy(t *testing.T, e *kubetest.Env, s submit.Spec, percent int) {
	t.Helper()
	objs, err := s.Objects()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		switch x := o.(type) {
		case *appsv1.StatefulSet:
			x.Spec.Template.Annotations[simnode.AnnotationUtilization] = fmt.Sprint(percent)
			_, err = e.Client.AppsV1().StatefulSets(x.Namespace).Create(e.Ctx, x, metav1.CreateOptions{})
		case *appsv1.Deployment:
			x.Spec.Template.Annotations[simnode.AnnotationUtilization] = fmt.Sprint(percent)
			_, err = e.Client.AppsV1().Deployments(x.Namespace).Create(e.Ctx, x, metav1.CreateOptions{})
		default:
			t.Fatalf("%s: unexpected %T", s.Name, o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestIdleWorkloadsAreStoppedAndResumed: in a queue with idleTimeout {interactive: 2s,
// inference: 2s}, a notebook whose GPU stays at 0% is suspended (its pod gone, its
// StatefulSet kept, an Event and allot describe's mark saying why) and allot resume brings
// it back; a notebook at 80% runs on; an idle inference Deployment is scaled to zero and
// resumed to its replicas; a bare notebook pod is told it cannot be suspended, and runs on.
func TestIdleWorkloadsAreStoppedAndResumed(t *testing.T) {
	e := kubetest.Start(t, 1, 4)
	if _, err := stack.LocalWith(e.Ctx, e.Cluster.Config, e.Cluster.Config, e.Dir, "", stack.Options{
		Scheduler: scheduler.Options{Interval: 200 * time.Millisecond}, Idle: idle.Options{Tick: 200 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team-a", 4, map[string]any{"idleTimeout": map[string]any{"interactive": "2s", "inference": "2s"}})
	base := submit.Spec{Namespace: "default", Queue: "team-a", Image: "jupyter", GPUs: "1"}
	nbIdle, nbBusy, serve := base, base, base
	nbIdle.Name, nbIdle.Interactive = "nb-idle", true
	nbBusy.Name, nbBusy.Interactive = "nb-busy", true
	serve.Name, serve.Inference = "serve", true
	submitBusy(t, e, nbIdle, 0)
	submitBusy(t, e, nbBusy, 80)
	submitBusy(t, e, serve, 0)
	// A notebook made by hand as a bare pod: nothing would make it again, so it is only told.
	e.MustPod(t, kubetest.PodSpec{Name: "bare-nb", Queue: "team-a", GPUs: 1, Labels: map[string]string{v1alpha1.LabelClass: v1alpha1.ClassInteractive},
		Annotations: map[string]string{simnode.AnnotationUtilization: "0"}})
	e.WaitFor(t, "all four running", func() (bool, string) { return e.Count(t, "default", kubetest.Running) == 4, "" })
	running := time.Now()

	sts := e.Client.AppsV1().StatefulSets("default")
	deps := e.Client.AppsV1().Deployments("default")
	e.WaitFor(t, "the idle notebook suspended, its pod gone", func() (bool, string) {
		st, err := sts.Get(e.Ctx, "nb-idle", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		_, pod := e.Pods(t, "default")["nb-idle-0"]
		return *st.Spec.Replicas == 0 && !pod, fmt.Sprintf("replicas %d, pod there: %v", *st.Spec.Replicas, pod)
	})
	e.WaitFor(t, "the idle Deployment scaled to zero", func() (bool, string) {
		d, err := deps.Get(e.Ctx, "serve", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return *d.Spec.Replicas == 0, fmt.Sprintf("replicas %d", *d.Spec.Replicas)
	})
	e.WaitFor(t, "Events say why", func() (bool, string) {
		ev := strings.Join(append(e.Events(t, "default", "nb-idle"), e.Events(t, "default", "serve")...), "\n")
		return strings.Contains(ev, "IdleTimeout: suspended after") && strings.Contains(ev, "IdleTimeout: scaled to zero after") &&
			strings.Contains(ev, "under 5% utilisation: queue team-a's idleTimeout.interactive is 2s"), ev
	})

	e.WaitFor(t, "the bare pod told, not stopped", func() (bool, string) {
		ev := strings.Join(e.Events(t, "default", "bare-nb"), "\n")
		return strings.Contains(ev, "IdleTimeoutNotStoppable: every GPU it holds has been under 5% utilisation for") &&
			strings.Contains(ev, "a bare Pod cannot be suspended"), ev
	})
	if !kubetest.Running(e.Pods(t, "default")["bare-nb"]) {
		t.Fatal("the bare notebook was stopped")
	}

	// The workload is kept, and allot list and describe say why it stopped.
	ws, err := inspect.Workloads(e.Ctx, e.Client, "default", "")
	if err != nil {
		t.Fatal(err)
	}
	w, err := inspect.Pick(ws, "default", "nb-idle")
	if err != nil {
		t.Fatal(err)
	}
	if w.Status != "Suspended" || w.Type != "interactive" || w.IdleSuspended == nil ||
		!strings.HasPrefix(w.IdleSuspended.Sentence(), "suspended after 2s idle (GPU utilisation under 5%, queue team-a's idleTimeout)") {
		t.Fatalf("nb-idle: status %s, type %s, idle mark %+v", w.Status, w.Type, w.IdleSuspended)
	}

	// The busy notebook has run longer than the timeout and runs on.
	if time.Since(running) < 2*time.Second {
		t.Fatal("the busy notebook was not watched past the timeout")
	}
	if st, err := sts.Get(e.Ctx, "nb-busy", metav1.GetOptions{}); err != nil || *st.Spec.Replicas != 1 || !kubetest.Running(e.Pods(t, "default")["nb-busy-0"]) {
		t.Fatalf("the busy notebook was stopped: %v", err)
	}
	if b, _ := inspect.Pick(ws, "default", "nb-busy"); b == nil || b.IdleSince != nil {
		t.Fatalf("the busy notebook is shown idle: %+v", b)
	}
	// Nothing is written on a bare pod (the scheduler may not patch pods): it is told by its
	// Event alone, and shows no IDLE.
	if b, _ := inspect.Pick(ws, "default", "bare-nb"); b == nil || b.IdleSince != nil {
		t.Fatalf("the bare notebook: %+v, want it listed with no idle mark", b)
	}

	// allot resume brings both back (and they are idle again, so may be stopped again later).
	ctl := control.Clients{Client: e.Client, Allot: e.Allot, Dyn: e.Dyn,
		Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(e.Client.Discovery()))}
	for _, name := range []string{"nb-idle", "serve"} {
		w, err := inspect.Find(e.Ctx, e.Client, "default", name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ctl.Suspend(e.Ctx, w, true); err != nil {
			t.Fatalf("resume %s: %v", name, err)
		}
	}
	e.WaitFor(t, "the notebook's pod made again and running", func() (bool, string) {
		return kubetest.Running(e.Pods(t, "default")["nb-idle-0"]), ""
	})
	e.WaitFor(t, "the Deployment's pod running again", func() (bool, string) {
		for name, p := range e.Pods(t, "default") {
			if strings.HasPrefix(name, "serve-") && kubetest.Running(p) {
				return true, ""
			}
		}
		return false, ""
	})
}

// TestTimeLimitSuspendsSubmittedNotebook: a notebook allot submit made (a StatefulSet of
// one) past its queue's interactiveTimeLimit is suspended, not left to the StatefulSet to
// make again; allot resume starts it again.
func TestTimeLimitSuspendsSubmittedNotebook(t *testing.T) {
	e := start(t, 1, 2)
	e.Queue(t, "team-a", 2, map[string]any{"interactiveTimeLimit": "2s"})
	submitBusy(t, e, submit.Spec{Name: "nb", Namespace: "default", Queue: "team-a", Image: "jupyter", GPUs: "1", Interactive: true}, 90)
	e.WaitFor(t, "the notebook running", func() (bool, string) { return kubetest.Running(e.Pods(t, "default")["nb-0"]), "" })
	e.WaitFor(t, "the notebook suspended, its pod gone", func() (bool, string) {
		st, err := e.Client.AppsV1().StatefulSets("default").Get(e.Ctx, "nb", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		_, pod := e.Pods(t, "default")["nb-0"]
		return *st.Spec.Replicas == 0 && !pod, fmt.Sprintf("replicas %d, pod there: %v", *st.Spec.Replicas, pod)
	})
	w, err := inspect.Find(e.Ctx, e.Client, "default", "nb")
	if err != nil || w.Status != "Suspended" {
		t.Fatalf("the notebook is not kept suspended: %+v %v", w, err)
	}
	ev := strings.Join(e.Events(t, "default", "nb-0"), "\n")
	if !strings.Contains(ev, "InteractiveTimeLimit: stopped after") || !strings.Contains(ev, "StatefulSet nb suspended") {
		t.Fatalf("events: %s", ev)
	}
}

// TestIdleFromTheAgentsReports: on nodes with the real agent (utilisation read from the
// simulated GPUs through NVML and carried on the agent's Lease), an idle notebook is
// suspended and a busy one runs on.
func TestIdleFromTheAgentsReports(t *testing.T) {
	e, _ := kubetest.StartWithAgents(t, 1, 2, "")
	if _, err := stack.LocalWith(e.Ctx, e.Cluster.Config, e.Cluster.Config, e.Dir, "", stack.Options{
		Scheduler: scheduler.Options{Interval: 200 * time.Millisecond}, Idle: idle.Options{Tick: 200 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	e.Queue(t, "team-a", 2, map[string]any{"idleTimeout": map[string]any{"interactive": "3s"}})
	base := submit.Spec{Namespace: "default", Queue: "team-a", Image: "jupyter", GPUs: "1", Interactive: true}
	nbIdle, nbBusy := base, base
	nbIdle.Name, nbBusy.Name = "nb-idle", "nb-busy"
	submitBusy(t, e, nbIdle, 0)
	submitBusy(t, e, nbBusy, 80)
	e.WaitFor(t, "both running", func() (bool, string) { return e.Count(t, "default", kubetest.Running) == 2, "" })
	// From when the idle notebook's pod started (the kubelet's time), not from when this
	// test saw it running, which on a loaded machine can be seconds later.
	var running time.Time
	for name, p := range e.Pods(t, "default") {
		if strings.HasPrefix(name, "nb-idle") && p.Status.StartTime != nil {
			running = p.Status.StartTime.Time
		}
	}
	if running.IsZero() {
		t.Fatal("the idle notebook's pod has no start time")
	}
	e.WaitFor(t, "the idle notebook suspended", func() (bool, string) {
		st, err := e.Client.AppsV1().StatefulSets("default").Get(e.Ctx, "nb-idle", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return *st.Spec.Replicas == 0, fmt.Sprintf("replicas %d", *st.Spec.Replicas)
	})
	if time.Since(running) < 3*time.Second {
		t.Fatal("the busy notebook was not watched past the timeout")
	}
	if st, err := e.Client.AppsV1().StatefulSets("default").Get(e.Ctx, "nb-busy", metav1.GetOptions{}); err != nil || *st.Spec.Replicas != 1 {
		t.Fatalf("the busy notebook was stopped: %v", err)
	}
}

// TestQueueIdleFieldsAreChecked: the API server refuses an idleTimeout it could not read or
// under 1s, and an idleThreshold outside 1 to 100, naming the field and what it takes.
func TestQueueIdleFieldsAreChecked(t *testing.T) {
	e := kubetest.Start(t, 1, 1)
	queues := e.Dyn.Resource(kubetest.Queues)
	for i, c := range []struct {
		spec map[string]any
		want string // "" for accepted
	}{
		{map[string]any{"idleTimeout": map[string]any{"interactive": "soon"}}, "idleTimeout.interactive must be a duration of at least 1s, such as 30m, 2h or 1h30m"},
		{map[string]any{"idleTimeout": map[string]any{"inference": "500ms"}}, "idleTimeout.inference must be a duration of at least 1s"},
		{map[string]any{"idleThreshold": int64(0)}, "idleThreshold must be a percentage of GPU utilisation from 1 to 100"},
		{map[string]any{"idleThreshold": int64(101)}, "idleThreshold must be a percentage of GPU utilisation from 1 to 100"},
		{map[string]any{"idleTimeout": map[string]any{"interactive": "2h", "inference": "1s"}, "idleThreshold": int64(10)}, ""},
	} {
		spec := map[string]any{"gpu": map[string]any{"quota": int64(1)}}
		for k, v := range c.spec {
			spec[k] = v
		}
		q := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "allot.dev/v1alpha1", "kind": "Queue",
			"metadata": map[string]any{"name": fmt.Sprintf("q%d", i)}, "spec": spec}}
		_, err := queues.Create(e.Ctx, q, metav1.CreateOptions{})
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v: got %v, want %q", c.spec, err, c.want)
		}
	}
}
