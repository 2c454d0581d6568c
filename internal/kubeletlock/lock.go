// Package kubeletlock takes this machine's kubelet paths for one user at a time: the
// kubelet's device manager serves its registration socket only at
// /var/lib/kubelet/device-plugins/kubelet.sock, so the real node of kube/realnode and the
// kubelet's device manager run in a test process (kube/simnode/kubeletdm) cannot run at
// once. go test runs packages side by side; each waits here for the other.
package kubeletlock

import (
	"context"
	"fmt"

	"github.com/allot-dev/allot/internal/flock"
)

// Path is the lock file: under /run, which a machine's restart empties.
const Path = "/run/allot-kubelet-paths.lock"

// Acquire waits until this process holds the machine's kubelet paths, or ctx ends. The
// lock goes with the process, however it ends.
func Acquire(ctx context.Context) (release func(), err error) {
	l, err := flock.Wait(ctx, Path)
	if err != nil {
		return nil, fmt.Errorf("waiting for the kubelet's paths (%s, held by another test process or allot up --real-nodes): %w", Path, err)
	}
	return l.Release, nil
}
