package localcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrDataDirInUse is returned when another control plane runs on the same data directory.
var ErrDataDirInUse = errors.New("data directory in use")

// lockDir takes dir for this process, with an advisory lock on a file of its own. etcd
// locks its write-ahead log too, but it waits on that lock for ever, deaf to Ctrl-C: a
// second `allot up` on the same directory would hang after "starting etcd". The lock
// goes with the process, however it ends.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "allot-up.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			owner := "another process"
			if b, _ := os.ReadFile(path); len(b) > 0 {
				owner = "process " + string(b)
			}
			return nil, fmt.Errorf("%w: %s holds %s (another allot up, or a test's cluster); stop it, or give this one a directory of its own with --data-dir: %w",
				ErrDataDirInUse, owner, dir, err)
		}
		return nil, fmt.Errorf("locking the data directory %s: %w", dir, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprint(os.Getpid())), 0)
	return f, nil
}

// CheckDataDir says whether dir is free for a control plane, before anything else is set
// up in it (Start takes it for good).
func CheckDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := lockDir(dir)
	if err != nil {
		return err
	}
	return f.Close()
}
