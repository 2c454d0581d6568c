package realnode_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/realnode"
)

// queue makes a Queue of quota GPUs admitting namespace ns, once.
func queue(t *testing.T, name, ns string, quota int32) {
	t.Helper()
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}}
	q.Spec.GPU.Quota = quota
	q.Spec.Namespaces = []string{ns}
	if _, err := allotclient.NewForConfigOrDie(cluster.Config).AllotV1alpha1().Queues().Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// sharingPod is a pod of Allot's asking half a GPU, of busybox containers that print what
// they got.
func sharingPod(ns, name, queueName string, containers ...corev1.Container) *corev1.Pod {
	p := shellPod(ns, name, containers...)
	p.Spec.NodeName = ""
	p.Spec.SchedulerName = v1alpha1.SchedulerName
	p.Labels = map[string]string{v1alpha1.LabelQueue: queueName}
	p.Annotations = map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"}
	return p
}

// A sharing pod of two containers (the slice's and a sidecar) on a hami-core node starts
// whole under the real kubelet: every container the webhook gives the /dev/shm mount,
// whose subPathExpr reads ALLOT_SHM_DIR, must have that variable, or the kubelet refuses
// to make the container (CreateContainerConfigError: missing value for ALLOT_SHM_DIR).
// Both containers of the pod share that one /dev/shm.
//
//	real-1 (hami-core, cdi): GPU 0: nb 0.5 [main: the slice] [sidecar: no device]
func TestSharingPodWithASidecarStarts(t *testing.T) {
	need(t)
	queue(t, "team-sidecar", "sidecar", 4)
	seen := runAndRead(t, sharingPod("sidecar", "nb", "team-sidecar", script("main"), script("sidecar")), "main", "sidecar")
	for _, c := range []string{"main", "sidecar"} {
		if got := seen[c].Env["ALLOT_SHM_DIR"]; got == "" {
			t.Errorf("%s: no ALLOT_SHM_DIR (env %v)", c, seen[c].Env)
		}
	}
	if seen["main"].Env["ALLOT_SHM_DIR"] != seen["sidecar"].Env["ALLOT_SHM_DIR"] {
		t.Errorf("main's /dev/shm is %q, the sidecar's %q: one pod, one /dev/shm", seen["main"].Env["ALLOT_SHM_DIR"], seen["sidecar"].Env["ALLOT_SHM_DIR"])
	}
	if got := seen["sidecar"].Env["NVIDIA_VISIBLE_DEVICES"]; got != "void" {
		t.Errorf("sidecar's NVIDIA_VISIBLE_DEVICES is %q, want void", got)
	}
	if got := seen["sidecar"].NVIDIA(); len(got) != 0 {
		t.Errorf("sidecar sees %v", got)
	}
}

// waitGone waits until the pod is gone from the API server.
func waitGone(t *testing.T, ns, name string) {
	t.Helper()
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
}

// After a reboot the sharing root (under /run) is empty; a sharing pod the kubelet starts
// again before the agent writes the preload list gets its subPath made a directory by the
// real kubelet. An agent starting then writes the list over that directory, and pods
// started after it preload HAMi-core; before the mend its rename failed for good.
//
//	real-1 (hami-core): early 0.5 (before the list: a directory) · agent restarts · late 0.5 (the list)
func TestPreloadListWrittenOverTheKubeletsDirectory(t *testing.T) {
	need(t)
	list := filepath.Join(sharingRoot, v1alpha1.PreloadListPath)
	if err := os.Remove(list); err != nil {
		t.Fatal(err)
	}
	queue(t, "team-reboot", "reboot", 4)
	early := runAndRead(t, sharingPod("reboot", "early", "team-reboot", script("main")), "main")
	if fi, err := os.Lstat(list); err != nil || !fi.IsDir() {
		t.Fatalf("the kubelet made no directory at %s for the early pod (%v, %v): the race this test is about did not happen", list, fi, err)
	}
	t.Logf("early pod's /etc/ld.so.preload: %q", early["main"].Preload)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, closeConn, err := newAgent()
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	go func() { _ = a.Run(ctx) }()
	want := v1alpha1.HAMiCoreLibrary(sharingRoot)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(list)
		return err == nil && strings.TrimSpace(string(b)) == want, nil
	}); err != nil {
		fi, _ := os.Lstat(list)
		t.Fatalf("the restarted agent did not write the preload list over the kubelet's directory (%v): %v", fi, err)
	}
	cancel()
	late := runAndRead(t, sharingPod("reboot", "late", "team-reboot", script("main")), "main")
	if late["main"].Preload != want {
		t.Errorf("a pod started after the agent reads %q as its /etc/ld.so.preload, want %q", late["main"].Preload, want)
	}
}

// On an mps node a sharing pod sees, of the sharing root, its own GPU's MPS directory (at
// MPSClientDir, where its CUDA_MPS_PIPE_DIRECTORY points) and HAMi-core's: not the other
// GPUs' daemons, nor other pods' directories. Before, the whole root was mounted into every
// sharing pod, and a process could point CUDA_MPS_PIPE_DIRECTORY at any GPU's daemon.
//
//	real-1 (mps): GPU k's daemon dir holds marker-k; nb 0.5 [main] sees only its GPU's marker
func TestMPSClientSeesOnlyItsGPUsDaemon(t *testing.T) {
	need(t)
	ctx := context.Background()
	label := func(v string) {
		patch := `{"metadata":{"labels":{"` + v1alpha1.LabelGPUSharing + `":"` + v + `"}}}`
		if _, err := client.CoreV1().Nodes().Patch(ctx, "real-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// As the agent declares it once an MPS daemon answered (there is no driver here to run
	// one: the daemons' directories are made as the agent makes them).
	label(v1alpha1.SharingMPS)
	t.Cleanup(func() { label(v1alpha1.SharingHAMiCore) })
	for i := range 4 {
		dir := filepath.Join(v1alpha1.MPSDir(sharingRoot, machine.UUID(i)), "pipe")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "marker-"+machine.UUID(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	queue(t, "team-mps", "mps", 4)
	seen := runAndRead(t, sharingPod("mps", "nb", "team-mps", script("main"), script("side")), "main", "side")
	gpus := gpuDevices(seen["main"])
	if len(gpus) != 1 {
		t.Fatalf("the fraction sees GPUs %v", gpus)
	}
	var index int
	fmt.Sscanf(gpus[0], "nvidia%d", &index)
	own := "marker-" + machine.UUID(index)
	t.Logf("main sees under the sharing root: %v", seen["main"].Sharing)
	for _, c := range []string{"main", "side"} {
		var markers []string
		for _, f := range seen[c].Sharing {
			if strings.Contains(f, "marker-") {
				markers = append(markers, filepath.Base(f))
			}
			if strings.HasPrefix(f, "./mps/") || strings.HasPrefix(f, "./shm/") {
				t.Errorf("%s sees %s: the sharing root's mps or shm directories are mounted whole", c, f)
			}
		}
		if len(markers) != 1 || markers[0] != own {
			t.Errorf("%s sees the daemons' pipes %v, want its own GPU's alone (%s)", c, markers, own)
		}
	}
	if got, want := seen["main"].Env["CUDA_MPS_PIPE_DIRECTORY"], v1alpha1.MPSClientDir(sharingRoot)+"/pipe"; got != want {
		t.Errorf("CUDA_MPS_PIPE_DIRECTORY is %q, want %q", got, want)
	}
}

// HAMi-core laid out as HAMi lays it out: its lock directory is the node's, one for every
// sharing container (a file one pod's container leaves there, another pod's sees), so that
// processes of two containers starting at once find their host PIDs in turn; and a
// container whose image's root filesystem is read-only still gets a writable cache
// (CUDA_DEVICE_MEMORY_SHARED_CACHE, under its pod's own /dev/shm), where HAMi-core's
// default, /tmp, is not writable. Before the mend each container had a /tmp of its own
// and no cache named.
//
//	real-1 (hami-core): lock-a 0.5 [leaves a mark in /tmp/vgpulock] · lock-b 0.5 [read-only root: sees the mark, writes its cache]
func TestHAMiCoreLockAndCacheAsHAMiLaysThemOut(t *testing.T) {
	need(t)
	queue(t, "team-lock", "lock", 4)
	mark := fmt.Sprintf("allot-test-%d", time.Now().UnixNano())
	t.Cleanup(func() { _ = os.Remove(filepath.Join(v1alpha1.HAMiLockDir, mark)) })
	a := script("main")
	a.Command[2] = `touch ` + v1alpha1.HAMiLockDir + `/` + mark + `; ` + a.Command[2]
	runAndRead(t, sharingPod("lock", "lock-a", "team-lock", a), "main")
	b := script("main")
	b.Command[2] = `echo "ENV SEES_MARK=$(ls ` + v1alpha1.HAMiLockDir + ` | grep -c ` + mark + `)"; ` +
		`if : > "$CUDA_DEVICE_MEMORY_SHARED_CACHE"; then echo "ENV CACHE_WRITABLE=yes"; fi; ` + b.Command[2]
	b.SecurityContext = &corev1.SecurityContext{ReadOnlyRootFilesystem: new(bool)}
	*b.SecurityContext.ReadOnlyRootFilesystem = true
	seen := runAndRead(t, sharingPod("lock", "lock-b", "team-lock", b), "main")["main"]
	if seen.Env["SEES_MARK"] != "1" {
		t.Errorf("lock-b does not see the mark lock-a left in %s (count %q): not one directory for the node", v1alpha1.HAMiLockDir, seen.Env["SEES_MARK"])
	}
	if seen.Env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] != v1alpha1.HAMiCacheFile || seen.Env["CACHE_WRITABLE"] != "yes" {
		t.Errorf("lock-b's cache is %q (writable: %q), want %s, writable under a read-only root", seen.Env["CUDA_DEVICE_MEMORY_SHARED_CACHE"],
			seen.Env["CACHE_WRITABLE"], v1alpha1.HAMiCacheFile)
	}
}

// A sharing container whose image has an /etc/ld.so.preload of its own reads HAMi-core's
// library first and then the image's entries; its list goes with the container. Before,
// the webhook's list replaced the image's, and nothing said so.
//
//	real-1 (hami-core, cdi): nb 0.5 [main (image preloading libown-allocator.so)]: HAMi-core's, then the image's
func TestImagesOwnPreloadIsKept(t *testing.T) {
	need(t)
	queue(t, "team-preload", "preload", 4)
	p := sharingPod("preload", "nb", "team-preload", script("main"))
	p.Spec.Containers[0].Image = realnode.PreloadingImage
	seen := runAndRead(t, p, "main")
	want := v1alpha1.HAMiCoreLibrary(sharingRoot) + " " + realnode.PreloadingLibrary
	t.Logf("the container's /etc/ld.so.preload: %q", seen["main"].Preload)
	if seen["main"].Preload != want {
		t.Errorf("the container reads %q as its /etc/ld.so.preload, want HAMi-core's library, then the image's own: %q", seen["main"].Preload, want)
	}
	ctx := context.Background()
	id := ""
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cur, err := client.CoreV1().Pods("preload").Get(ctx, "nb", metav1.GetOptions{})
		if err == nil && len(cur.Status.ContainerStatuses) > 0 {
			_, id, _ = strings.Cut(cur.Status.ContainerStatuses[0].ContainerID, "://")
		}
		return id != "", nil
	}); err != nil {
		t.Fatalf("pod nb's container ID never reported: %v", err)
	}
	list := filepath.Join(sharingRoot, "preload", id)
	if _, err := os.Stat(list); err != nil {
		t.Fatalf("no list of the container's own at %s: %v", list, err)
	}
	if err := client.CoreV1().Pods("preload").Delete(ctx, "nb", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Stat(list)
		return os.IsNotExist(err), nil
	}); err != nil {
		t.Errorf("the container's list %s stayed after the container went: %v", list, err)
	}
}
