// Package flock takes a file lock for this process (an advisory flock that goes with the
// process however it ends), for the things on one machine that only one process may use at
// a time: a control plane's data directory, the kubelet's paths, a build directory.
package flock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// ErrHeld is what TryLock's error is (errors.Is) when another process holds the lock.
var ErrHeld = errors.New("held by another process")

// HeldError is TryLock's error when another process holds the lock: Holder names it
// ("process 1234", from the file, or "another process").
type HeldError struct{ Holder string }

func (e *HeldError) Error() string        { return "held by " + e.Holder }
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Lock is a lock this process holds.
type Lock struct{ f *os.File }

// Release lets the lock go.
func (l *Lock) Release() {
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
}

// TryLock takes the lock on path (made if missing) or fails at once; its holder's process
// ID is written in the file. A lock another process holds is ErrHeld, naming that process.
func TryLock(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			owner := "another process"
			if b, _ := os.ReadFile(path); len(b) > 0 {
				owner = "process " + string(b)
			}
			return nil, &HeldError{Holder: owner}
		}
		return nil, err
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprint(os.Getpid())), 0)
	return &Lock{f: f}, nil
}

// Wait takes the lock on path once it is free, or fails when ctx ends.
func Wait(ctx context.Context, path string) (*Lock, error) {
	for {
		l, err := TryLock(path)
		if !errors.Is(err, ErrHeld) {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%v: %w", err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
