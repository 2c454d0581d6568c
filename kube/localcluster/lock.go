package localcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/allot-dev/allot/internal/flock"
)

// ErrDataDirInUse is returned when another control plane runs on the same data directory.
var ErrDataDirInUse = errors.New("data directory in use")

// lockDir takes dir for this process, with an advisory lock on a file of its own. etcd
// locks its write-ahead log too, but it waits on that lock for ever, deaf to Ctrl-C: a
// second `allot up` on the same directory would hang after "starting etcd". The lock
// goes with the process, however it ends.
func lockDir(dir string) (*flock.Lock, error) {
	l, err := flock.TryLock(filepath.Join(dir, "allot-up.lock"))
	if held := (*flock.HeldError)(nil); errors.As(err, &held) {
		return nil, fmt.Errorf("%w: %s holds %s (another allot up, or a test's cluster); stop it, or give this one a directory of its own with --data-dir",
			ErrDataDirInUse, held.Holder, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("locking the data directory %s: %w", dir, err)
	}
	return l, nil
}

// CheckDataDir says whether dir is free for a control plane, before anything else is set
// up in it (Start takes it for good).
func CheckDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	l, err := lockDir(dir)
	if err != nil {
		return err
	}
	l.Release()
	return nil
}
