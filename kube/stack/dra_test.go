package stack_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/stack"
)

// Pods that ask for GPUs through DRA ResourceClaims, on simulated nodes that publish their
// GPUs as NVIDIA's DRA driver does (simnode/dra.go), with the resource claim controller of
// kube-controller-manager making claims from templates and freeing them.

func startDRA(t *testing.T, specs ...simnode.Spec) *kubetest.Env {
	t.Helper()
	e := kubetest.StartNodes(t, specs...)
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return e
}

// claimTemplate makes a ResourceClaimTemplate of count whole GPUs, with CEL selectors.
func claimTemplate(t *testing.T, e *kubetest.Env, name string, count int64, selectors ...string) {
	t.Helper()
	e.ClaimTemplate(t, name, claimSpec(count, selectors...))
}

func claimSpec(count int64, selectors ...string) resourceapi.ResourceClaimSpec {
	return kubetest.DeviceClaim(simnode.DRAClass, count, selectors...)
}

// claimOf is the ResourceClaim a pod's claim "gpu" resolved to, or nil.
func claimOf(t *testing.T, e *kubetest.Env, p *corev1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	name := ""
	for _, pc := range p.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			name = *pc.ResourceClaimName
		}
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			name = *s.ResourceClaimName
		}
	}
	if name == "" {
		return nil
	}
	c, err := e.Client.ResourceV1().ResourceClaims(p.Namespace).Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return c
}

// devicesOf lists a claim's allocated devices as pool/device.
func devicesOf(c *resourceapi.ResourceClaim) []string {
	if c == nil || c.Status.Allocation == nil {
		return nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		out = append(out, r.Pool+"/"+r.Device)
	}
	sort.Strings(out)
	return out
}

// noDeviceTwice fails the test if any device is in two claims' allocations.
func noDeviceTwice(t *testing.T, e *kubetest.Env) {
	t.Helper()
	l, err := e.Client.ResourceV1().ResourceClaims("").List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holder := map[string]string{}
	for _, c := range l.Items {
		for _, d := range devicesOf(&c) {
			if h, ok := holder[d]; ok {
				t.Fatalf("device %s is allocated to both %s and %s", d, h, c.Name)
			}
			holder[d] = c.Name
		}
	}
}

func waitingReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Message
		}
	}
	return ""
}

// One DRA node, four GPUs:
//
//	dgx-1 [gpu-0 gpu-1 gpu-2 gpu-3]   one: 1 GPU from a template   pair-a, pair-b: one shared claim
//	                                   huge: 1 GPU with ≥ 100Gi of memory (no such GPU)
//
// team-a may hold at most 2 GPUs: the template pod's and the shared claim's, counted once;
// huge is team-b's.
func TestDRAClaimsAreAllocatedCountedAndExplained(t *testing.T) {
	e := startDRA(t, simnode.Spec{Prefix: "dgx", Count: 1, GPUs: 4, DRA: true})
	e.Queue(t, "team-a", 0, map[string]any{"gpu": map[string]any{"quota": 0, "limit": 2}})
	claimTemplate(t, e, "one-gpu", 1)
	claimTemplate(t, e, "big-gpu", 1, `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("100Gi")) >= 0`)
	shared := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "default"}, Spec: claimSpec(1)}
	if _, err := e.Client.ResourceV1().ResourceClaims("default").Create(e.Ctx, shared, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.MustPod(t, kubetest.PodSpec{Name: "one", Queue: "team-a", Claims: kubetest.FromTemplate("one-gpu")})
	e.WaitFor(t, "the template pod runs", func() (bool, string) {
		p := e.Pods(t, "default")["one"]
		return kubetest.Running(p), fmt.Sprint(p.Status.Phase, " ", waitingReason(p))
	})
	one := e.Pods(t, "default")["one"]
	c := claimOf(t, e, one)
	if c == nil || c.Status.Allocation == nil {
		t.Fatalf("the running pod's claim is not allocated: %+v", c)
	}
	if got := devicesOf(c); len(got) != 1 || !strings.HasPrefix(got[0], "dgx-1/gpu-") {
		t.Fatalf("the claim holds %v, want one GPU of dgx-1", got)
	}
	if len(c.Status.ReservedFor) != 1 || c.Status.ReservedFor[0].UID != one.UID {
		t.Fatalf("the claim is reserved for %+v, want the pod", c.Status.ReservedFor)
	}
	if !strings.Contains(strings.Join(c.Finalizers, ","), resourceapi.Finalizer) {
		t.Fatalf("the claim has no %s finalizer: %v", resourceapi.Finalizer, c.Finalizers)
	}
	if want := strings.TrimPrefix(devicesOf(c)[0], "dgx-1/gpu-"); one.Annotations[v1alpha1.AnnotationGPUs] != want {
		t.Errorf("the pod's %s is %q, its claim holds gpu-%s", v1alpha1.AnnotationGPUs, one.Annotations[v1alpha1.AnnotationGPUs], want)
	}

	// Two pods share one claim: one GPU against the queue's limit of 2, so both run
	// beside the template pod; counted twice, the second would wait.
	for _, name := range []string{"pair-a", "pair-b"} {
		e.MustPod(t, kubetest.PodSpec{Name: name, Queue: "team-a", Claims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("shared")}}})
	}
	e.WaitFor(t, "both pods of the shared claim run", func() (bool, string) {
		pods := e.Pods(t, "default")
		return kubetest.Running(pods["pair-a"]) && kubetest.Running(pods["pair-b"]),
			waitingReason(pods["pair-a"]) + " | " + waitingReason(pods["pair-b"])
	})
	sc, err := e.Client.ResourceV1().ResourceClaims("default").Get(e.Ctx, "shared", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(devicesOf(sc)) != 1 || len(sc.Status.ReservedFor) != 2 {
		t.Fatalf("the shared claim holds %v for %d pods, want one device for two", devicesOf(sc), len(sc.Status.ReservedFor))
	}
	noDeviceTwice(t, e)

	// A claim no node can satisfy waits, saying what it asks and what the nodes have.
	e.Queue(t, "team-b", 1, nil)
	e.MustPod(t, kubetest.PodSpec{Name: "huge", Queue: "team-b", Claims: kubetest.FromTemplate("big-gpu")})
	e.WaitFor(t, "the unsatisfiable claim waits with its reason", func() (bool, string) {
		r := waitingReason(e.Pods(t, "default")["huge"])
		return strings.Contains(r, `memory.compareTo(quantity("100Gi")) >= 0`) && strings.Contains(r, "no node has one"), r
	})
	if kubetest.Bound(e.Pods(t, "default")["huge"]) {
		t.Fatal("the unsatisfiable pod was bound")
	}

	// The template pod goes: its claim is freed (deleted with it), and its GPU taken by
	// the next pod, as the queue's limit now allows.
	if err := e.Client.CoreV1().Pods("default").Delete(e.Ctx, "one", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.MustPod(t, kubetest.PodSpec{Name: "next", Queue: "team-a", Claims: kubetest.FromTemplate("one-gpu")})
	e.WaitFor(t, "the next pod runs once the first is gone", func() (bool, string) {
		p := e.Pods(t, "default")["next"]
		return kubetest.Running(p), waitingReason(p)
	})
	e.WaitFor(t, "the gone pod's claim is deleted", func() (bool, string) {
		_, err := e.Client.ResourceV1().ResourceClaims("default").Get(e.Ctx, c.Name, metav1.GetOptions{})
		return err != nil, fmt.Sprint(err)
	})
	noDeviceTwice(t, e)
}

// Two DRA nodes of two GPUs; gangs of one-GPU claims:
//
//	first (3 pods) runs whole; second (4 pods) fits only in 4 free GPUs: waits whole,
//	no member bound and no claim of it allocated.
func TestDRAGangStartsWholeOrWaitsWhole(t *testing.T) {
	e := startDRA(t, simnode.Spec{Prefix: "dgx", Count: 2, GPUs: 2, DRA: true})
	e.Queue(t, "team-a", 4, nil)
	claimTemplate(t, e, "one-gpu", 1)
	gang := func(name string, n int) {
		if err := e.CreatePodGroup(e.Ctx, name, "team-a", n); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("%s-%d", name, i), Queue: "team-a", Claims: kubetest.FromTemplate("one-gpu"),
				Labels: map[string]string{v1alpha1.LabelPodGroup: name}})
		}
	}
	gang("first", 3)
	e.WaitFor(t, "the first gang runs whole", func() (bool, string) {
		n := e.Count(t, "default", func(p *corev1.Pod) bool { return strings.HasPrefix(p.Name, "first-") && kubetest.Running(p) })
		return n == 3, fmt.Sprint(n)
	})
	gang("second", 4)
	time.Sleep(3 * time.Second) // cycles enough to bind a part, were one ever bound
	for name, p := range e.Pods(t, "default") {
		if strings.HasPrefix(name, "second-") {
			if kubetest.Bound(p) {
				t.Fatalf("%s of the waiting gang was bound to %s", name, p.Spec.NodeName)
			}
			if c := claimOf(t, e, p); c != nil && c.Status.Allocation != nil {
				t.Fatalf("%s's claim was allocated %v while its gang waits", name, devicesOf(c))
			}
		}
	}
	// Once the first gang goes, the second starts whole.
	for i := 0; i < 3; i++ {
		if err := e.Client.CoreV1().Pods("default").Delete(e.Ctx, fmt.Sprintf("first-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.WaitFor(t, "the second gang runs whole", func() (bool, string) {
		n := e.Count(t, "default", func(p *corev1.Pod) bool { return strings.HasPrefix(p.Name, "second-") && kubetest.Running(p) })
		return n == 4, fmt.Sprint(n, " ", waitingReason(e.Pods(t, "default")["second-0"]))
	})
	noDeviceTwice(t, e)
}

// One DRA node of two GPUs; team-a (quota 1) borrows both, then team-b (quota 1) asks
// for one: a team-a pod is reclaimed, and team-b's pod gets the very GPU it held, once the
// claim holding it is freed.
func TestDRAReclaimGivesTheVictimsDevice(t *testing.T) {
	e := startDRA(t, simnode.Spec{Prefix: "dgx", Count: 1, GPUs: 2, DRA: true})
	e.Queue(t, "team-a", 1, nil)
	e.Queue(t, "team-b", 1, nil)
	claimTemplate(t, e, "one-gpu", 1)
	for _, name := range []string{"a-1", "a-2"} {
		e.MustPod(t, kubetest.PodSpec{Name: name, Queue: "team-a", Claims: kubetest.FromTemplate("one-gpu")})
	}
	e.WaitFor(t, "team-a borrows both GPUs", func() (bool, string) {
		n := e.Count(t, "default", func(p *corev1.Pod) bool { return strings.HasPrefix(p.Name, "a-") && kubetest.Running(p) })
		return n == 2, fmt.Sprint(n)
	})
	held := map[string]string{} // device → pod
	for _, name := range []string{"a-1", "a-2"} {
		for _, d := range devicesOf(claimOf(t, e, e.Pods(t, "default")[name])) {
			held[d] = name
		}
	}
	e.MustPod(t, kubetest.PodSpec{Name: "b-1", Queue: "team-b", Claims: kubetest.FromTemplate("one-gpu")})
	e.WaitFor(t, "team-b's pod runs", func() (bool, string) {
		p := e.Pods(t, "default")["b-1"]
		return kubetest.Running(p), waitingReason(p)
	})
	pods := e.Pods(t, "default")
	got := devicesOf(claimOf(t, e, pods["b-1"]))
	if len(got) != 1 {
		t.Fatalf("b-1 holds %v", got)
	}
	victim := held[got[0]]
	if victim == "" {
		t.Fatalf("b-1 holds %s, which no team-a pod held (%v)", got[0], held)
	}
	if p, ok := pods[victim]; ok && p.DeletionTimestamp == nil {
		t.Fatalf("b-1 holds %s, the device of %s, which still runs", got[0], victim)
	}
	// One pod was reclaimed, not two: team-a keeps its quota's GPU.
	time.Sleep(2 * time.Second)
	if n := e.Count(t, "default", func(p *corev1.Pod) bool {
		return strings.HasPrefix(p.Name, "a-") && kubetest.Running(p) && p.DeletionTimestamp == nil
	}); n != 1 {
		t.Fatalf("%d of team-a's pods run after the reclaim, want 1 (its quota)", n)
	}
	noDeviceTwice(t, e)
}

// A device-plugin node and a DRA node, two GPUs each, under one pair of queues of quota 2:
// team-a borrows all four (two plugin pods, two DRA pods); team-b's two DRA pods reclaim
// the DRA node's GPUs from it. Fair share counts both kinds of GPU alike.
func TestDRAAndPluginNodesShareOneQuota(t *testing.T) {
	e := startDRA(t, simnode.Spec{Prefix: "plug", Count: 1, GPUs: 2}, simnode.Spec{Prefix: "dra", Count: 1, GPUs: 2, DRA: true})
	e.Queue(t, "team-a", 2, nil)
	e.Queue(t, "team-b", 2, nil)
	claimTemplate(t, e, "one-gpu", 1)
	for i := 1; i <= 2; i++ {
		e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("a-plugin-%d", i), Queue: "team-a", GPUs: 1})
		e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("a-dra-%d", i), Queue: "team-a", Claims: kubetest.FromTemplate("one-gpu")})
	}
	e.WaitFor(t, "team-a borrows all four GPUs, each kind on its node", func() (bool, string) {
		pods := e.Pods(t, "default")
		var on []string
		for name, p := range pods {
			if kubetest.Running(p) {
				on = append(on, name+"@"+p.Spec.NodeName)
			}
		}
		sort.Strings(on)
		return len(on) == 4, fmt.Sprint(on)
	})
	for name, p := range e.Pods(t, "default") {
		if strings.Contains(name, "-plugin-") != (p.Spec.NodeName == "plug-1") {
			t.Fatalf("%s runs on %s", name, p.Spec.NodeName)
		}
	}
	for i := 1; i <= 2; i++ {
		e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("b-dra-%d", i), Queue: "team-b", Claims: kubetest.FromTemplate("one-gpu")})
	}
	e.WaitFor(t, "team-b holds its quota on the DRA node, team-a keeps the plugin node", func() (bool, string) {
		running := map[string]int{}
		for name, p := range e.Pods(t, "default") {
			if kubetest.Running(p) && p.DeletionTimestamp == nil {
				running[name[:strings.LastIndex(name, "-")]]++
			}
		}
		return running["b-dra"] == 2 && running["a-plugin"] == 2 && running["a-dra"] == 0, fmt.Sprint(running)
	})
	noDeviceTwice(t, e)
}

// Churn on two DRA nodes of four GPUs: pods of one or two GPUs come and go at random in
// two queues (a seeded sequence). At every step no device is in two claims' allocations,
// no pod was refused by its kubelet for a device prepared twice, and at the end, with
// every pod gone, every claim is freed.
func TestDRAChurnNeverAllocatesADeviceTwice(t *testing.T) {
	e := startDRA(t, simnode.Spec{Prefix: "dgx", Count: 2, GPUs: 4, DRA: true})
	e.Queue(t, "team-a", 4, nil)
	e.Queue(t, "team-b", 4, nil)
	claimTemplate(t, e, "one-gpu", 1)
	claimTemplate(t, e, "two-gpus", 2)
	rng := rand.New(rand.NewPCG(7, 38))
	made := 0
	for step := 0; step < 40; step++ {
		pods := e.Pods(t, "default")
		if len(pods) > 0 && rng.IntN(3) == 0 {
			names := make([]string, 0, len(pods))
			for n := range pods {
				names = append(names, n)
			}
			sort.Strings(names)
			victim := names[rng.IntN(len(names))]
			_ = e.Client.CoreV1().Pods("default").Delete(e.Ctx, victim, metav1.DeleteOptions{})
		} else {
			made++
			tpl := []string{"one-gpu", "two-gpus"}[rng.IntN(2)]
			q := []string{"team-a", "team-b"}[rng.IntN(2)]
			e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("p-%d", made), Queue: q, Claims: kubetest.FromTemplate(tpl)})
		}
		time.Sleep(time.Duration(50+rng.IntN(300)) * time.Millisecond)
		noDeviceTwice(t, e)
		for name, p := range e.Pods(t, "default") {
			// A pod deleted (here, or evicted) reports its end as Failed before it goes, as
			// on a kubelet: only a pod failed while not stopping is a refusal.
			if p.Status.Phase == corev1.PodFailed && p.DeletionTimestamp == nil {
				t.Fatalf("step %d: %s failed on %s: %s %s", step, name, p.Spec.NodeName, p.Status.Reason, p.Status.Message)
			}
		}
	}
	e.WaitFor(t, "pods run on every GPU while enough wait", func() (bool, string) {
		noDeviceTwice(t, e)
		held := 0
		l, _ := e.Client.ResourceV1().ResourceClaims("default").List(e.Ctx, metav1.ListOptions{})
		for _, c := range l.Items {
			held += len(devicesOf(&c))
		}
		waiting := e.Count(t, "default", func(p *corev1.Pod) bool { return !kubetest.Bound(p) })
		return held == 8 || waiting == 0, fmt.Sprint(held, " held, ", waiting, " waiting")
	})
	if err := e.Client.CoreV1().Pods("default").DeleteCollection(e.Ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "every claim is freed once its pods are gone", func() (bool, string) {
		l, err := e.Client.ResourceV1().ResourceClaims("default").List(e.Ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for _, c := range l.Items {
			if c.Status.Allocation != nil {
				left = append(left, c.Name)
			}
		}
		return len(left) == 0, fmt.Sprint("still allocated: ", left)
	})
}

// One DRA node of two GPUs, GPU 0 in MIG mode as seven 1g.10gb devices, GPU 1 whole:
//
//	dgx-1 [gpu-0: mig ×7 (team-a's seven 1g pods)] [gpu-1: whole (team-b's pod)]
//
// Each MIG claim counts 1/7 of a GPU against its queue: seven fit team-a's limit of one
// GPU, and a whole GPU more does not. The GPU in MIG mode is never given whole.
func TestDRAMIGClaimsCountTheirPartOfAGPU(t *testing.T) {
	e := startDRA(t, simnode.Spec{Prefix: "dgx", Count: 1, GPUs: 2, DRA: true, MIGGPUs: 1})
	e.Queue(t, "team-a", 0, map[string]any{"gpu": map[string]any{"quota": 0, "limit": 1}})
	e.Queue(t, "team-b", 1, nil)
	e.ClaimTemplate(t, "one-mig", kubetest.DeviceClaim(simnode.MIGClass, 1))
	claimTemplate(t, e, "one-gpu", 1)
	for i := 1; i <= 7; i++ {
		e.MustPod(t, kubetest.PodSpec{Name: fmt.Sprintf("mig-%d", i), Queue: "team-a", Claims: kubetest.FromTemplate("one-mig")})
	}
	e.WaitFor(t, "seven MIG pods of team-a run", func() (bool, string) {
		n := e.Count(t, "default", func(p *corev1.Pod) bool { return strings.HasPrefix(p.Name, "mig-") && kubetest.Running(p) })
		return n == 7, fmt.Sprint(n, " ", waitingReason(e.Pods(t, "default")["mig-7"]))
	})
	for name, p := range e.Pods(t, "default") {
		if d := devicesOf(claimOf(t, e, p)); len(d) != 1 || !strings.HasPrefix(d[0], "dgx-1/gpu-0-mig-") {
			t.Fatalf("%s holds %v, want one MIG device of gpu-0", name, d)
		}
	}
	e.WaitFor(t, "team-a's status counts seven sevenths of a GPU", func() (bool, string) {
		q, err := e.Allot.AllotV1alpha1().Queues().Get(e.Ctx, "team-a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := q.Status.Allocated[v1alpha1.GPUResource]
		return got.MilliValue() == 994, got.String()
	})
	e.MustPod(t, kubetest.PodSpec{Name: "a-whole", Queue: "team-a", Claims: kubetest.FromTemplate("one-gpu")})
	e.MustPod(t, kubetest.PodSpec{Name: "b-whole", Queue: "team-b", Claims: kubetest.FromTemplate("one-gpu")})
	e.WaitFor(t, "team-b's pod runs on gpu-1, team-a's waits at its limit", func() (bool, string) {
		pods := e.Pods(t, "default")
		r := waitingReason(pods["a-whole"])
		return kubetest.Running(pods["b-whole"]) && strings.Contains(r, "limit"), r + " | " + waitingReason(pods["b-whole"])
	})
	if d := devicesOf(claimOf(t, e, e.Pods(t, "default")["b-whole"])); len(d) != 1 || d[0] != "dgx-1/gpu-1" {
		t.Fatalf("b-whole holds %v, want dgx-1/gpu-1", d)
	}
	e.MustPod(t, kubetest.PodSpec{Name: "b-second", Queue: "team-b", Claims: kubetest.FromTemplate("one-gpu")})
	time.Sleep(2 * time.Second)
	if p := e.Pods(t, "default")["b-second"]; kubetest.Bound(p) {
		t.Fatalf("b-second was bound to %s: the GPU in MIG mode was given whole", p.Spec.NodeName)
	}
	noDeviceTwice(t, e)
}

// A tenant with Kubernetes' edit role in its namespace cannot change what its claims hold:
// it may not write a claim's status (its allocation and reservedFor are the scheduler's), a
// claim's spec is fixed once made, and a claim made with a status has none. The books stay
// as allocated.
func TestDRATenantCannotRewriteItsClaims(t *testing.T) {
	e := startDRA(t, simnode.Spec{Prefix: "dgx", Count: 1, GPUs: 4, DRA: true})
	alice := tenant(t, e)
	e.Queue(t, "team-a", 0, map[string]any{"gpu": map[string]any{"quota": 0, "limit": 1}})
	mine := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: "ml"}, Spec: claimSpec(1)}
	if _, err := e.Client.ResourceV1().ResourceClaims("ml").Create(e.Ctx, mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.MustPod(t, kubetest.PodSpec{Name: "train", Namespace: "ml", Queue: "team-a", Claims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("mine")}}})
	e.WaitFor(t, "alice's pod runs on its claim", func() (bool, string) {
		p := e.Pods(t, "ml")["train"]
		return kubetest.Running(p), waitingReason(p)
	})
	held, err := alice.ResourceV1().ResourceClaims("ml").Get(e.Ctx, "mine", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("alice cannot read her claim: %v", err)
	}
	before := devicesOf(held)
	// Widen the allocation to every GPU of the node.
	forged := held.DeepCopy()
	forged.Status.Allocation.Devices.Results = nil
	for g := 0; g < 4; g++ {
		forged.Status.Allocation.Devices.Results = append(forged.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "gpu", Driver: simnode.DRADriver, Pool: "dgx-1", Device: fmt.Sprintf("gpu-%d", g)})
	}
	if _, err := alice.ResourceV1().ResourceClaims("ml").UpdateStatus(e.Ctx, forged, metav1.UpdateOptions{}); err == nil {
		t.Fatal("alice rewrote her claim's allocation")
	}
	// Ask for more on the claim she holds.
	more := held.DeepCopy()
	more.Spec.Devices.Requests[0].Exactly.Count = 4
	if _, err := alice.ResourceV1().ResourceClaims("ml").Update(e.Ctx, more, metav1.UpdateOptions{}); err == nil {
		t.Fatal("alice changed her claim's count after it was allocated")
	}
	// A new claim that says it is allocated already.
	pre := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "pre", Namespace: "ml"}, Spec: claimSpec(1),
		Status: resourceapi.ResourceClaimStatus{Allocation: forged.Status.Allocation}}
	if c, err := alice.ResourceV1().ResourceClaims("ml").Create(e.Ctx, pre, metav1.CreateOptions{}); err == nil && c.Status.Allocation != nil {
		t.Fatal("a claim was created with an allocation")
	}
	after, err := e.Client.ResourceV1().ResourceClaims("ml").Get(e.Ctx, "mine", metav1.GetOptions{})
	if err != nil || strings.Join(devicesOf(after), ",") != strings.Join(before, ",") {
		t.Fatalf("the claim holds %v after alice's tries, %v before (%v)", devicesOf(after), before, err)
	}
	e.WaitFor(t, "team-a's books stay at one GPU", func() (bool, string) {
		q, err := e.Allot.AllotV1alpha1().Queues().Get(e.Ctx, "team-a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := q.Status.Allocated[v1alpha1.GPUResource]
		return got.Value() == 1, got.String()
	})
	noDeviceTwice(t, e)
}

// One DRA node of two 80Gi GPUs that claims may share (consumable capacity), fractions
// asked as memory:
//
//	dgx-1 [gpu-0: half-a 40Gi + half-b 40Gi] [gpu-1: whole]
//
// The two halves share one GPU, each holding its part (the allocation's share and consumed
// memory), and count half a GPU each: team-a's limit of 1 takes both, a third half waits.
// A whole-GPU claim takes the other GPU, never the shared one.
func TestDRAFractionsShareAGPUByMemory(t *testing.T) {
	e := startDRA(t, simnode.Spec{Prefix: "dgx", Count: 1, GPUs: 2, DRA: true, DRAShared: true})
	e.Queue(t, "team-a", 0, map[string]any{"gpu": map[string]any{"quota": 0, "limit": 1}})
	e.Queue(t, "team-b", 1, nil)
	half := claimSpec(1)
	half.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{
		Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("40Gi")}}
	e.ClaimTemplate(t, "half", half)
	claimTemplate(t, e, "one-gpu", 1)
	for _, name := range []string{"half-a", "half-b"} {
		e.MustPod(t, kubetest.PodSpec{Name: name, Queue: "team-a", Claims: kubetest.FromTemplate("half")})
	}
	e.WaitFor(t, "both halves run", func() (bool, string) {
		pods := e.Pods(t, "default")
		return kubetest.Running(pods["half-a"]) && kubetest.Running(pods["half-b"]), waitingReason(pods["half-a"]) + " | " + waitingReason(pods["half-b"])
	})
	pods := e.Pods(t, "default")
	a, b := claimOf(t, e, pods["half-a"]), claimOf(t, e, pods["half-b"])
	if da, db := devicesOf(a), devicesOf(b); len(da) != 1 || len(db) != 1 || da[0] != db[0] {
		t.Fatalf("the halves hold %v and %v, want one GPU", da, db)
	}
	for _, c := range []*resourceapi.ResourceClaim{a, b} {
		r := c.Status.Allocation.Devices.Results[0]
		if r.ShareID == nil || func() int64 { q := r.ConsumedCapacity["memory"]; return q.Value() }() != 40<<30 {
			t.Fatalf("claim %s's allocation has share %v and consumes %v, want its own share of 40Gi", c.Name, r.ShareID, r.ConsumedCapacity)
		}
	}
	e.WaitFor(t, "team-a's books hold one GPU for the two halves", func() (bool, string) {
		q, err := e.Allot.AllotV1alpha1().Queues().Get(e.Ctx, "team-a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := q.Status.Allocated[v1alpha1.GPUResource]
		return got.MilliValue() == 1000, got.String()
	})
	e.MustPod(t, kubetest.PodSpec{Name: "half-c", Queue: "team-a", Claims: kubetest.FromTemplate("half")})
	e.MustPod(t, kubetest.PodSpec{Name: "whole", Queue: "team-b", Claims: kubetest.FromTemplate("one-gpu")})
	e.WaitFor(t, "the whole GPU claim runs on the other GPU, the third half waits at the limit", func() (bool, string) {
		pods := e.Pods(t, "default")
		r := waitingReason(pods["half-c"])
		return kubetest.Running(pods["whole"]) && strings.Contains(r, "limit"), r + " | " + waitingReason(pods["whole"])
	})
	if d := devicesOf(claimOf(t, e, e.Pods(t, "default")["whole"])); len(d) != 1 || d[0] == devicesOf(a)[0] {
		t.Fatalf("the whole claim holds %v, beside the halves on %v", d, devicesOf(a))
	}
}
