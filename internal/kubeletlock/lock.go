// Package kubeletlock takes this machine's kubelet paths for one user at a time: the
// kubelet's device manager serves its registration socket only at
// /var/lib/kubelet/device-plugins/kubelet.sock, so the real node of kube/realnode and the
// kubelet's device manager run in a test process (kube/simnode/kubeletdm) cannot run at
// once. go test runs packages side by side; each waits here for the other.
package kubeletlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Path is the lock file: under /run, which a machine's restart empties.
const Path = "/run/allot-kubelet-paths.lock"

// Acquire waits until this process holds the machine's kubelet paths, or ctx ends. The
// lock goes with the process, however it ends.
func Acquire(ctx context.Context) (release func(), err error) {
	f, err := os.OpenFile(Path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the kubelet's paths (%s): %w", Path, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			_ = f.Truncate(0)
			_, _ = f.WriteAt([]byte(fmt.Sprint(os.Getpid())), 0)
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking the kubelet's paths (%s): %w", Path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the kubelet's paths (%s, held by another test process or allot up --real-nodes): %w", Path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
