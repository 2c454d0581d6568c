// Package wholefile writes a file whole: a reader (a pod's mount, a hook, the kubelet)
// never sees half of it. The data goes to a file of a name of its own in the same
// directory first, then is renamed over the destination, so that two writers at once (a
// DaemonSet's new pod beside the one it replaces, each perhaps pid 1 in its own
// namespace) never rename each other's halves.
package wholefile

import (
	"io"
	"os"
	"path/filepath"
)

// Write writes in to dst with mode, making dst's directory if it is missing. before, if
// not nil, runs once the data is written and just before the rename (what must be cleared
// from dst's place).
func Write(dst string, in io.Reader, mode os.FileMode, before func() error) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := out.Name()
	defer os.Remove(tmp) // gone once renamed; left by a failure, not kept
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(mode); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if before != nil {
		if err := before(); err != nil {
			return err
		}
	}
	return os.Rename(tmp, dst)
}
