package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// The shared-memory directories of a node, after the agent looked (now):
//
//	shm/mps          the MPS daemons'             kept
//	shm/pod-here     a pod on the node            kept
//	shm/pod-gone     a pod deleted 10 minutes ago removed
//	shm/pod-new      made by the kubelet 30 s ago for a pod the agent has not seen yet: kept
func TestGonePodsSharedMemoryIsRemoved(t *testing.T) {
	root := t.TempDir()
	if err := prepareShm(root); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for name, age := range map[string]time.Duration{"pod-here": time.Hour, "pod-gone": 10 * time.Minute, "pod-new": 30 * time.Second, "mps": time.Hour} {
		dir := filepath.Join(v1alpha1.ShmDir(root), name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+"/torch_1234", []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(dir, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	a := &Agent{opts: Options{SharingRoot: root, Now: func() time.Time { return now }}}
	a.sweepShm([]any{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nb", UID: types.UID("here")}}})
	left, _ := filepath.Glob(v1alpha1.ShmDir(root) + "/*")
	for i := range left {
		left[i] = filepath.Base(left[i])
	}
	if strings.Join(left, " ") != "mps pod-here pod-new" {
		t.Errorf("left %v, want mps pod-here pod-new", left)
	}
}

// The directories are as /dev/shm is whatever the umask, and whoever made them first (the
// kubelet makes a missing hostPath directory 0755).
func TestSharedMemoryDirectoriesAreLikeDevShm(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(v1alpha1.ShmDir(root), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := prepareShm(root); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{v1alpha1.ShmDir(root), v1alpha1.ShmDir(root) + "/" + v1alpha1.ShmMPS} {
		info, err := os.Stat(dir)
		if err != nil || info.Mode() != os.ModeDir|shmMode {
			t.Errorf("%s: %v (%v), want drwxrwxrwt", dir, info.Mode(), err)
		}
	}
}

// mps-host refuses to start daemons whose /dev/shm is not the one sharing pods are given:
// their clients could not reach them.
func TestMPSHostChecksItsSharedMemory(t *testing.T) {
	root := t.TempDir()
	h := MPSHost{SharingRoot: root, Shm: t.TempDir()}
	if err := h.checkShm(); err == nil || !strings.Contains(err.Error(), "is not "+root+"/shm/mps") {
		t.Errorf("another /dev/shm: %v, want a refusal naming %s/shm/mps", err, root)
	}
	// As the chart mounts it: the same directory, seen at another path.
	if err := os.Symlink(root+"/shm/mps", root+"/dev-shm"); err != nil {
		t.Fatal(err)
	}
	h.Shm = root + "/dev-shm"
	if err := h.checkShm(); err != nil {
		t.Errorf("the sharing root's shm/mps: %v", err)
	}
}
