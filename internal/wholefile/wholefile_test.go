package wholefile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Writers at once each leave a whole file of their own, never a mix, and no leftover;
// the mode asked is the file's.
func TestWritersAtOnceLeaveOneWholeFile(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "sub", "list")
	var wg sync.WaitGroup
	bodies := map[string]bool{}
	for i := range 8 {
		body := bytes.Repeat([]byte(fmt.Sprintf("writer %d\n", i)), 20000)
		bodies[string(body)] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Write(dst, bytes.NewReader(body), 0o755, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, err := os.ReadFile(dst)
	if err != nil || !bodies[string(got)] {
		t.Fatalf("the file is not one writer's whole: %d bytes, %v", len(got), err)
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", fi.Mode().Perm())
	}
	if left, _ := os.ReadDir(filepath.Dir(dst)); len(left) != 1 {
		t.Errorf("left in the directory: %v", left)
	}
}
