package nriplugin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// A sharing container with the webhook's preload mount is given a list of its own in its
// place (the node's, then the image's own, which the hook appends from the root
// filesystem the runtime's state names); a container of a pod the scheduler did not bind
// as sharing, or without that mount, is left alone. The list goes with the container.
func TestImagesOwnPreloadKept(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "hami-core"), 0o755); err != nil {
		t.Fatal(err)
	}
	lib := v1alpha1.HAMiCoreLibrary(root)
	if err := os.WriteFile(filepath.Join(root, v1alpha1.PreloadListPath), []byte(lib+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &plugin{opts: Options{SharingRoot: root}}
	sharing := &api.PodSandbox{Namespace: "team-a", Name: "nb", Annotations: map[string]string{v1alpha1.AnnotationGPUEnvPrefix + "ALLOT_GPU_SHARING": "hami-core"}}
	mounted := &api.Container{Id: "c1", Name: "main", Mounts: []*api.Mount{{Destination: preloadPath, Source: "/var/lib/kubelet/pods/x/volume-subpaths/allot-gpu-sharing/main/2"}}}

	for _, c := range []struct {
		name string
		pod  *api.PodSandbox
		ctr  *api.Container
	}{
		{"a pod not bound as sharing", &api.PodSandbox{Namespace: "team-a", Name: "plain"}, mounted},
		{"a container without the mount", sharing, &api.Container{Id: "c0", Name: "side"}},
	} {
		adjust, _, err := p.CreateContainer(context.Background(), c.pod, c.ctr)
		if err != nil || len(adjust.GetMounts()) != 0 || adjust.GetHooks() != nil {
			t.Errorf("%s: adjusted %v, %v; want nothing", c.name, adjust, err)
		}
	}

	adjust, _, err := p.CreateContainer(context.Background(), sharing, mounted)
	if err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(root, preloadDir, "c1")
	var removed, added bool
	for _, m := range adjust.GetMounts() {
		removed = removed || m.GetDestination() == api.MarkForRemoval(preloadPath)
		added = added || (m.GetDestination() == preloadPath && m.GetSource() == list)
	}
	hooks := adjust.GetHooks().GetCreateRuntime()
	if !removed || !added || len(hooks) != 1 {
		t.Fatalf("adjustment: mounts %v, createRuntime hooks %v; want the webhook's mount replaced by %s and one hook", adjust.GetMounts(), hooks, list)
	}

	// The runtime runs the hook with the container's state on stdin, as runc writes it.
	bundle := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bundle, "rootfs", "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "rootfs", "etc", "ld.so.preload"), []byte("/usr/lib/libjemalloc.so.2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := hooks[0]
	cmd := exec.Command(h.GetPath(), h.GetArgs()[1:]...)
	cmd.Env = h.GetEnv()
	cmd.Stdin = strings.NewReader(`{"ociVersion":"1.2.1","id":"c1","status":"creating","pid":4242,"bundle":"` + bundle + `","annotations":{"io.kubernetes.cri.container-name":"main"}}`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the hook: %v\n%s", err, out)
	}
	got, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	if want := lib + "\n/usr/lib/libjemalloc.so.2\n"; string(got) != want {
		t.Errorf("the container's list: %q, want %q", got, want)
	}

	// An image whose /etc is a link would have the hook, which runs on the host, read a
	// host path: nothing is appended.
	linked := t.TempDir()
	hostDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostDir, "ld.so.preload"), []byte("/host/secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(linked, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostDir, filepath.Join(linked, "rootfs", "etc")); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(h.GetPath(), h.GetArgs()[1:]...)
	cmd.Env = h.GetEnv()
	cmd.Stdin = strings.NewReader(`{"ociVersion":"1.2.1","id":"c1","status":"creating","pid":4242,"bundle":"` + linked + `"}`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the hook: %v\n%s", err, out)
	}
	if after, _ := os.ReadFile(list); string(after) != string(got) {
		t.Errorf("through an image's /etc linked to a host directory, the list became %q", after)
	}

	if _, err := p.StopContainer(context.Background(), sharing, mounted); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(list); !os.IsNotExist(err) {
		t.Errorf("the list stayed after the container stopped: %v", err)
	}
}
