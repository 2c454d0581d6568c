package realnode_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/realnode"
	"github.com/allot-dev/allot/kube/submit"
)

// python is Debian's, with its python3-torch (CPU), which the workers run from the node's
// /usr (hack/test-deps.sh installs it for the real node's tests).
const python = "/usr/bin/python3"

// An elastic training job on the real node, with the real Job controller and torchrun's
// own c10d rendezvous, its processes in real containers:
//
//	real-1 (4 GPUs)   elastic-a (quota 1): ddp, allot submit --workers 1:2, 1 GPU a worker
//	                  elastic-b (quota 3): a gang of 3 × 1 GPU, comes and goes
//
// ddp starts with one worker beside elastic-b's gang. The gang ends: ddp is grown to two,
// torchrun forms the group again and training goes on from its last step with two. The
// gang comes again and takes its quota back: ddp's count is lowered first, the Job
// controller stops worker 1 (no pod of ddp is evicted), torchrun forms the group again
// with one, and training goes on from its last step. The gang ends again: ddp grows back to
// two. The steps and group sizes are the training loop's own log.
func TestElasticTrainingOnTheRealNode(t *testing.T) {
	needTorch(t)
	const ns = "elastic"
	work := trainingDir(t)
	ddp := submit.Spec{Name: "ddp", Namespace: ns, Queue: ns + "-a", Image: realnode.BusyboxImage, GPUs: "1", Workers: 2, MinWorkers: 1,
		HostPaths: torchHostPaths(work), Command: torchCommand("JOB_COMPLETION_INDEX"),
		// The first worker's rendezvous is on loopback (the pods share the node's network,
		// below), as the node has no cluster DNS for NAME-0.NAME.
		Env: append(torchEnv(), "PET_RDZV_ENDPOINT=127.0.0.1:29517", "PET_MAX_RESTARTS=20")}
	elasticRun(t, ns, "ddp", "job-name=ddp", "batch.kubernetes.io/job-completion-index", func() {
		// The pods share the node's network (no cluster DNS here), and so its hostname;
		// torchrun names each agent by hostname and pid, and two agents each pid 1 of its
		// own container, or a worker made again at the pid of the one before it, would be
		// one to the rendezvous: in the node's pid namespace each has a pid of its own.
		create(t, ns, ddp, func(j *batchv1.Job) { j.Spec.Template.Spec.HostNetwork, j.Spec.Template.Spec.HostPID = true, true })
	})
}

// elasticRun is the scenario of the elastic training tests, in namespace ns with queues
// NS-a (quota 1) and NS-b (quota 3): NS-b's gang of three runs first, start makes NS-a's
// workload (name; its pods chosen by selector, numbered by the label
// index), which starts with one worker; the gang goes, comes again and goes again, and the
// workload's first worker's log must show groups of one, two, one and two, each training
// on from the last step of the one before, with none of the workload's pods evicted.
func elasticRun(t *testing.T, ns, name, selector, index string, start func()) {
	ctx := context.Background()
	begun := time.Now()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	queue(t, ns+"-a", ns, 1)
	queue(t, ns+"-b", ns, 3)
	// NS-b's gang first, running: the workload then starts with the one GPU left.
	infer := submit.Spec{Name: "infer", Namespace: ns, Queue: ns + "-b", Image: realnode.BusyboxImage, GPUs: "1", Workers: 3,
		Command: []string{"sleep", "3600"}}
	// sleep, pid 1 of its container, leaves on SIGKILL only: no grace to wait out.
	noGrace := func(j *batchv1.Job) { j.Spec.Template.Spec.TerminationGracePeriodSeconds = new(int64) }
	create(t, ns, infer, noGrace)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		running := 0
		for _, state := range podNames(t, ns, "job-name=infer") {
			if strings.HasPrefix(state, string(corev1.PodRunning)) {
				running++
			}
		}
		return running == 3, nil
	})
	if err != nil {
		t.Fatalf("%s-b's gang never ran: %v; %v", ns, err, podNames(t, ns, "job-name=infer"))
	}
	start()

	// What a worker printed; worker 0 is never removed (the highest indexes go first).
	logOf := func(i int) string { return firstLog(t, ns, fmt.Sprintf("%s,%s=%d", selector, index, i)) }
	waitGroup := groupWatch(t, begun, logOf, func() string {
		pg, err := allotclient.NewForConfigOrDie(cluster.Config).AllotV1alpha1().PodGroups(ns).Get(ctx, name, metav1.GetOptions{})
		group := fmt.Sprint(err)
		if err == nil {
			group = fmt.Sprintf("minMember %d, elastic %+v, labels %v, status %+v", pg.Spec.MinMember, pg.Spec.Elastic, pg.Labels, pg.Status)
		}
		return fmt.Sprintf("%s's Events: %s\nits PodGroup: %s\npods: %v", name, events(ns, name), group, podNames(t, ns, selector))
	})
	first := waitGroup(name+" starts with one worker, "+ns+"-b's gang holding the other GPUs", 1)
	bg := metav1.DeletePropagationBackground
	if err := client.BatchV1().Jobs(ns).Delete(ctx, "infer", metav1.DeleteOptions{PropagationPolicy: &bg, GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	grown := waitGroup(name+" grown to two workers once the gang is gone", 2)
	if grown <= first {
		t.Errorf("the group of two started at step %d, not after the one worker's steps (from %d)", grown, first)
	}
	infer.Name = "infer-again"
	create(t, ns, infer, noGrace)
	shrunk := waitGroup(name+" scaled down to one worker when "+ns+"-b's gang comes again", 1)
	if shrunk <= grown {
		t.Errorf("the group of one started at step %d, not after the two workers' steps (from %d)", shrunk, grown)
	}
	// Its pods' Evictions, the one removed included (gone from the list by now): its
	// count was lowered first, and its controller should have stopped it.
	evictions, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Evicted"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evictions.Items {
		if strings.HasPrefix(ev.InvolvedObject.Name, name+"-") {
			t.Errorf("%s's pod %s was evicted: %s", name, ev.InvolvedObject.Name, ev.Message)
		}
	}
	if err := client.BatchV1().Jobs(ns).Delete(ctx, "infer-again", metav1.DeleteOptions{PropagationPolicy: &bg, GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	again := waitGroup(name+" grown back to two workers once that gang is gone too", 2)
	if again <= shrunk {
		t.Errorf("the second group of two started at step %d, not after the one worker's steps (from %d)", again, shrunk)
	}
	t.Logf("%s's Events:\n%s", name, events(ns, name))
	t.Logf("worker 0's log, where its group changed:\n%s", changes(logOf(0)))
}

// firstLog is what the first pod the selector chooses printed ("" with none).
func firstLog(t *testing.T, ns, selector string) string {
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil || len(pods.Items) == 0 {
		return ""
	}
	p := &pods.Items[0]
	out, _ := realnode.ContainerLog(p, p.Spec.Containers[0].Name)
	return out
}

// groupWatch follows an elastic training run by its first worker's log (logOf(0); the
// highest indexes are removed first, so worker 0 stays): the returned function waits
// until worker 0 is in a group of the size given that started after the last one it saw,
// and has trained in it, and returns the step the group started from. detail says what
// else to show when it does not come.
func groupWatch(t *testing.T, begun time.Time, logOf func(index int) string, detail func() string) func(what string, size int) int {
	// The rendezvous gives the ranks: worker 0 is rank 0 or rank 1 of a group of two.
	started := regexp.MustCompile(`rank \d+ of (\d+): from step (\d+)`)
	groups := func() [][2]int { // (group size, first step) of each group worker 0 was in
		var out [][2]int
		for _, m := range started.FindAllStringSubmatch(logOf(0), -1) {
			size, _ := strconv.Atoi(m[1])
			step, _ := strconv.Atoi(m[2])
			out = append(out, [2]int{size, step})
		}
		return out
	}
	seen := 0
	return func(what string, size int) int {
		t.Helper()
		var last [2]int
		err := wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
			g := groups()
			if len(g) <= seen {
				return false, nil
			}
			last = g[len(g)-1]
			trained := regexp.MustCompile(fmt.Sprintf(`step %d world %d rank \d+`, last[1]+2, size))
			return last[0] == size && trained.MatchString(logOf(0)), nil
		})
		if err != nil {
			t.Fatalf("%s: %v; worker 0's groups %v; its log ends:\n%s\nworker 1's:\n%s\n%s", what, err, groups(), tail(logOf(0), 15), tail(logOf(1), 30), detail())
		}
		seen = len(groups())
		t.Logf("%s: worker 0 in a group of %d from step %d (%s into the test)", what, size, last[1], time.Since(begun).Round(time.Second))
		return last[1]
	}
}

// needTorch skips the test, loudly, where the real node cannot run it or the node's Python
// has no torch.
func needTorch(t *testing.T) {
	t.Helper()
	need(t)
	if out, err := exec.Command(python, "-c", "import torch.distributed.run").CombinedOutput(); err != nil {
		msg := fmt.Sprintf("ELASTIC TRAINING RUN NOT RUN: %s cannot import torch (%v: %s); apt-get install python3-torch", python, err, strings.TrimSpace(string(out)))
		fmt.Fprintln(os.Stderr, msg)
		t.Skip(msg)
	}
}

// trainingDir is a directory of the node the workers share: the training loop
// (testdata/elastic_train.py as train.py), the PyTorchJob's launcher
// (testdata/elastic_launch.py as launch.py) and the checkpoint.
func trainingDir(t *testing.T) string {
	t.Helper()
	work := t.TempDir()
	for from, to := range map[string]string{"elastic_train.py": "train.py", "elastic_launch.py": "launch.py"} {
		script, err := os.ReadFile(filepath.Join("testdata", from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, to), script, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return work
}

// torchHostPaths give a worker Python and torch from the node's /usr (the busybox image
// has neither), with the alternatives its BLAS library is chosen by, and the shared work
// directory.
func torchHostPaths(work string) []string {
	return []string{"/usr:/usr:ro", "/lib:/lib:ro", "/lib64:/lib64:ro", "/etc/alternatives:/etc/alternatives:ro", work + ":/work"}
}

// torchEnv is each worker's environment, for torchrun, but for its rendezvous's endpoint
// and how often its group may be formed again.
func torchEnv() []string {
	return []string{
		"LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu", "TMPDIR=/work", "HOME=/work", "CKPT=/work",
		// Notice a change of membership within a second, and start a group without waiting the
		// default 30 s for more than the minimum.
		"PET_MONITOR_INTERVAL=1",
		// Debian's torch 1.13 under Python 3.11 reads its default "no redirect" ("0") as
		// nothing (enum.Flag no longer lists a zero member) and stops. A mapping naming only
		// local rank 1 leaves rank 0, the only one, at the default it fills in itself: its
		// output straight to the container's (a tee would reach the log tens of seconds late).
		"PET_TEE=1:1", "PET_REDIRECTS=1:1",
	}
}

// torchCommand runs torchrun on the training loop, the worker's index in the variable
// named. On loopback every worker would take the endpoint for its own host and try to
// serve the rendezvous (torchrun guesses by the endpoint's name): worker 0 serves it
// (is_host), as the one named NAME-0.NAME would.
func torchCommand(indexVar string) []string {
	return []string{"sh", "-c", `host=0; [ "${` + indexVar + `:-0}" = 0 ] && host=1
export PET_RDZV_CONF="is_host=$host,last_call_timeout=1"
exec ` + python + ` -m torch.distributed.run /work/train.py`}
}

// create makes what allot submit makes of spec (a Job and its Service), the Job changed
// first where change is given.
func create(t *testing.T, ns string, spec submit.Spec, change func(*batchv1.Job)) {
	t.Helper()
	objs, err := spec.Objects()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.Service:
			_, err = client.CoreV1().Services(ns).Create(ctx, o, metav1.CreateOptions{})
		case *batchv1.Job:
			// The node's images are imported: none can be pulled.
			for i := range o.Spec.Template.Spec.Containers {
				o.Spec.Template.Spec.Containers[i].ImagePullPolicy = corev1.PullNever
			}
			if change != nil {
				change(o)
			}
			_, err = client.BatchV1().Jobs(ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("allot submit made a %T", runtime.Object(o))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	name := spec.Name
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		_ = client.BatchV1().Jobs(ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &bg, GracePeriodSeconds: new(int64)})
		_ = client.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// changes keeps, of a training log, the lines where the group changed and the last step
// before each.
func changes(log string) string {
	var out []string
	last := ""
	for _, l := range strings.Split(log, "\n") {
		switch {
		case strings.Contains(l, "from step"):
			if last != "" {
				out = append(out, "  "+last)
			}
			out = append(out, "  "+strings.TrimSpace(l))
		case strings.HasPrefix(l, "step "):
			last = strings.TrimSpace(l)
		}
	}
	return strings.Join(out, "\n")
}

// podNames are the namespace's pods that the label selector chooses, not being deleted,
// with the state of each (realnode.PodState: its phase first).
func podNames(t *testing.T, ns, selector string) map[string]string {
	t.Helper()
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil {
			out[p.Name] = realnode.PodState(p)
		}
	}
	return out
}
