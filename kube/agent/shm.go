package agent

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// A sharing container's /dev/shm is a subdirectory of the sharing root's shm directory,
// the one the bind names (v1alpha1.ShmDir): on an MPS node the one the MPS daemons have
// too, since an MPS server and its clients talk through POSIX shared memory; elsewhere one
// of the pod's own. The kubelet makes each subdirectory with the mode of the directory
// above it, so that directory is kept as /dev/shm is: anyone may write, no one may remove
// what another wrote (the sticky bit). The kubelet does not remove what it made for a
// subPath, so the agent removes a pod's directory once the pod is gone.

// shmMode is /dev/shm's own mode.
const shmMode = fs.ModeSticky | 0o777

// shmGrace is how long a pod's directory is kept without the pod being known: the kubelet
// may make it for a pod the agent's watch has not delivered yet.
const shmGrace = 2 * time.Minute

// prepareShm makes the shm directory and the MPS daemons' one under it, each as /dev/shm is.
func prepareShm(root string) error {
	for _, dir := range []string{v1alpha1.ShmDir(root), filepath.Join(v1alpha1.ShmDir(root), v1alpha1.ShmMPS)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		// Chmod, not the mode given to MkdirAll: the process's umask takes from that, and
		// a directory the kubelet made first (DirectoryOrCreate) is 0755.
		if err := os.Chmod(dir, shmMode); err != nil {
			return err
		}
	}
	return nil
}

// sweepShm removes the /dev/shm directories of pods no longer on the node.
func (a *Agent) sweepShm(pods []any) {
	if a.opts.SharingRoot == "" {
		return
	}
	here := map[string]bool{}
	for _, o := range pods {
		here[v1alpha1.ShmPodDir(string(o.(*corev1.Pod).UID))] = true
	}
	dir := v1alpha1.ShmDir(a.opts.SharingRoot)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			slog.Warn("allot agent: shared-memory directories", "dir", dir, "err", err)
		}
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), v1alpha1.ShmPodDir("")) || here[e.Name()] {
			continue
		}
		if info, err := e.Info(); err != nil || a.opts.Now().Sub(info.ModTime()) < shmGrace {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			slog.Warn("allot agent: removing a gone pod's /dev/shm", "dir", filepath.Join(dir, e.Name()), "err", err)
		}
	}
}
