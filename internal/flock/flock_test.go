package flock

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A lock one process holds is refused to another, naming the holder, and taken by a
// waiter once released. (flock is per open file: a second open in this process stands for
// another process, as a child process would.)
func TestLockIsOneHoldersAtATime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	a, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TryLock(path); !errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), "process ") {
		t.Fatalf("a second TryLock: %v, want ErrHeld naming the holder", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Wait(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a held lock: %v, want the deadline", err)
	}
	go func() { time.Sleep(100 * time.Millisecond); a.Release() }()
	b, err := Wait(context.Background(), path)
	if err != nil {
		t.Fatalf("Wait after the release: %v", err)
	}
	b.Release()
	if _, err := exec.LookPath("flock"); err == nil {
		// And against another process: util-linux's flock(1) holding the same file.
		cmd := exec.Command("flock", "--nonblock", path, "true")
		l, _ := TryLock(path)
		if err := cmd.Run(); err == nil {
			t.Error("another process took the lock this one holds")
		}
		l.Release()
	}
	_ = os.Remove(path)
}
