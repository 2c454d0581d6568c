package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	kubeletutil "k8s.io/cri-client/pkg/util"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
)

// The kubelet makes its pod-resources directory root's own with mode 0750 (kubelet.go's
// setupDataDirs, and cri-client's CreateListener that makes the socket). An agent running
// as the image's nonroot user (65532, the chart's identity before) cannot reach the socket
// and must say why instead of marking the node; uid 0 with every capability dropped (the
// chart's identity now) can. The socket here is the kubelet's own: made by the listener
// code it uses, served by its PodResources v1 server.

const childEnv = "ALLOT_AGENT_IDENTITY_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "mps-control":
		mpsControlMain()
	case "mps-daemon":
		mpsDaemonMain()
	case "check":
		// As the agent starts: dial, ask once, explain.
		socket := os.Getenv("SOCKET")
		c, closeConn, err := DialPodResources(socket)
		if err == nil {
			err = CheckPodResources(context.Background(), c, socket)
			closeConn()
		}
		fmt.Println(result(err))
	case "connect-without-capabilities":
		// connect(2) is checked against the calling thread's credentials: drop every
		// capability on this thread, then connect from it.
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var none [2]unix.CapUserData
		if err := unix.Capset(&hdr, &none[0]); err != nil {
			fmt.Println("capset:", err)
			os.Exit(0)
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err == nil {
			err = unix.Connect(fd, &unix.SockaddrUnix{Name: os.Getenv("SOCKET")})
			unix.Close(fd)
		}
		fmt.Println(result(err))
	}
	os.Exit(0)
}

func result(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

// kubeletSocket serves the kubelet's PodResources API as the kubelet does, under a
// directory the kubelet's code makes.
func kubeletSocket(t *testing.T) string {
	t.Helper()
	root := openTempDir(t) // as /var/lib, the kubelet's parent
	socket := filepath.Join(root, "kubelet", "pod-resources", "kubelet.sock")
	if err := os.MkdirAll(filepath.Join(root, "kubelet"), 0o750); err != nil { // setupDataDirs' root dir
		t.Fatal(err)
	}
	servePodResources(t, socket, noPods{}, noDevices{})
	for _, d := range []string{filepath.Join(root, "kubelet"), filepath.Dir(socket)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o750 {
			t.Fatalf("%s: %v %v, want the kubelet's 0750", d, fi.Mode(), err)
		}
	}
	return socket
}

// openTempDir is a temporary directory any user may enter (t.TempDir's parent is 0700).
func openTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// servePodResources serves the kubelet's PodResources v1 server on socket, made by the
// kubelet's own listener code, with these pods and devices, until the test ends.
func servePodResources(t *testing.T, socket string, pods podresources.PodsProvider, devices podresources.DevicesProvider) {
	t.Helper()
	l, err := kubeletutil.CreateListener("unix://" + socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, podresources.NewV1PodResourcesServer(context.Background(), podresources.PodResourcesProviders{
		Pods: pods, Devices: devices, Cpus: noCPUs{}, Memory: noMemory{}, DynamicResources: noDRA{}}))
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
}

// runAs runs this test binary's child mode as uid, from a copy anyone may execute.
func runAs(t *testing.T, mode, socket string, uid uint32) string {
	t.Helper()
	dir := openTempDir(t)
	bin := filepath.Join(dir, "agent.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	cmd := exec.Command(bin)
	cmd.Env = []string{childEnv + "=" + mode, "SOCKET=" + socket}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s as uid %d: %v\n%s", mode, uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestAgentIdentityReachesTheKubeletSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching to uid 65532 needs root (CI runs as root)")
	}
	socket := kubeletSocket(t)
	out := runAs(t, "check", socket, 65532)
	for _, want := range []string{"permission denied as uid 65532", "owned by root with mode 0750", "run the agent as uid 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("the agent as uid 65532: %q, want it to say %q", out, want)
		}
	}
	if out := runAs(t, "check", socket, 0); out != "ok" {
		t.Errorf("the agent as uid 0: %s", out)
	}
	if out := runAs(t, "connect-without-capabilities", socket, 0); out != "ok" {
		t.Errorf("uid 0 with every capability dropped: %s", out)
	}
}

type (
	noPods    struct{}
	noDevices struct{}
	noCPUs    struct{}
	noMemory  struct{}
	noDRA     struct{}
)

func (noPods) GetActivePods() []*corev1.Pod                    { return nil }
func (noPods) GetPods() []*corev1.Pod                          { return nil }
func (noPods) GetPodByName(string, string) (*corev1.Pod, bool) { return nil, false }
func (noDevices) UpdateAllocatedDevices()                      {}
func (noDevices) GetDevices(string, string) []*podresourcesv1.ContainerDevices {
	return nil
}
func (noDevices) GetAllocatableDevices() []*podresourcesv1.ContainerDevices { return nil }
func (noCPUs) GetCPUs(string, string) []int64                               { return nil }
func (noCPUs) GetAllocatableCPUs() []int64                                  { return nil }
func (noMemory) GetMemory(string, string) []*podresourcesv1.ContainerMemory { return nil }
func (noMemory) GetAllocatableMemory() []*podresourcesv1.ContainerMemory    { return nil }
func (noDRA) GetDynamicResources(*corev1.Pod, *corev1.Container) []*podresourcesv1.DynamicResource {
	return nil
}
