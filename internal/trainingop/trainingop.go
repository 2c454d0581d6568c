// Package trainingop runs Kubeflow's training operator, the controller of PyTorchJob, for
// tests that need a PyTorchJob's pods made, numbered and removed as on a real cluster.
//
// The operator's newest release on the module proxy (v1.8.1) needs controller-runtime 0.17
// and Kubernetes 0.29, and does not build against Allot's pins; so it is not linked into
// Allot as kube/ecosystem's projects are. It is built from the Go module proxy with its own
// module graph (go install MODULE@VERSION), once per process, and run as its own process
// against the cluster's kubeconfig, with its CRDs from its own manifests.
package trainingop

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/internal/gotool"
	"github.com/allot-dev/allot/kube/ecosystem"
)

const (
	// Module and Version are the operator's, as served by the module proxy.
	Module  = "github.com/kubeflow/training-operator"
	Version = "v1.8.1"
	// Namespace is where the operator keeps its webhook's certificate (its default, where
	// MY_POD_NAMESPACE is not set).
	Namespace = "kubeflow"
	// secretName and certDir are its defaults: the Secret its certificate rotator fills, and
	// where its webhook server reads the certificate (the Secret's mount in its pod). The
	// directory is the machine's, fixed in the operator: one operator a machine at a time.
	secretName = "training-operator-webhook-cert"
	certDir    = "/tmp/k8s-webhook-server/serving-certs"
)

// operator is the operator's command, built once per process.
var operator = &gotool.Tool{Pkg: Module + "/cmd/training-operator.v1@" + Version, Env: []string{"CGO_ENABLED=0"}}

// moduleDir is where the module cache holds the operator's module (its manifests).
var moduleDir = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", Module+"@"+Version).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w", Module, Version, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", err
	}
	if m.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: %s", Module, Version, m.Error)
	}
	return m.Dir, nil
})

// InstallCRDs installs the CRDs of the operator's manifests (Kubeflow's v1 jobs, with their
// schemas) and waits until they are served.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	dir, err := moduleDir()
	if err != nil {
		return err
	}
	return ecosystem.InstallCRDs(ctx, cfg, dir, []string{"manifests/base/crds"})
}

// Operator is a running training operator.
type Operator struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when it has exited, err then its exit
	err    error
}

// Start installs the operator's CRDs (Kubeflow's v1 jobs, from its manifests), the
// namespace and the empty Secret its manifests make for its webhook's certificate, and runs
// it with its PyTorchJob controller against the cluster of kubeconfig (which cfg reads too),
// its log to log. As the kubelet would mount the Secret in its pod, the certificate its
// rotator writes there is copied to where its webhook server reads it: until the server
// runs, the operator starts no controller. Start returns once the certificate is in
// place; the operator's next look finds it (within seconds) and starts its controller,
// which then acts on what was made before as on what comes after.
//
// Its validating webhook is not registered with the API server: the API server would reach
// it at its Service's name, which nothing serves here.
func Start(ctx context.Context, cfg *rest.Config, kubeconfig string, log io.Writer) (*Operator, error) {
	if err := InstallCRDs(ctx, cfg); err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: Namespace}}
	if _, err := client.CoreV1().Secrets(Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err := os.RemoveAll(certDir); err != nil {
		return nil, err
	}
	exe, err := operator.Path()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "--kubeconfig", kubeconfig, "--enable-scheme=pytorchjob",
		"--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0", "--webhook-server-port", strconv.Itoa(port))
	// Its namespace and the one it watches (all) said here, not taken from the caller's
	// environment.
	cmd.Env = append(os.Environ(), "MY_POD_NAMESPACE="+Namespace, "KUBEFLOW_NAMESPACE=")
	cmd.Stdout, cmd.Stderr = log, log
	// A test binary killed (a timeout) takes the operator with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	op := &Operator{cmd: cmd, exited: make(chan struct{})}
	go func() {
		op.err = cmd.Wait()
		close(op.exited)
	}()
	if err := op.mountCertificate(ctx, client); err != nil {
		op.Stop()
		return nil, err
	}
	return op, nil
}

// mountCertificate waits for the rotator's certificate in the Secret and writes it where
// the webhook server reads it.
func (o *Operator) mountCertificate(ctx context.Context, client kubernetes.Interface) error {
	var data map[string][]byte
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-o.exited:
			return false, fmt.Errorf("the training operator stopped: %v", o.err)
		default:
		}
		s, err := client.CoreV1().Secrets(Namespace).Get(ctx, secretName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		data = s.Data
		return len(data["tls.crt"]) > 0 && len(data["tls.key"]) > 0, nil
	})
	if err != nil {
		return fmt.Errorf("the training operator's certificate in Secret %s/%s: %w", Namespace, secretName, err)
	}
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return err
	}
	for name, b := range data {
		if err := os.WriteFile(filepath.Join(certDir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Stop ends the operator (again: nothing more).
func (o *Operator) Stop() {
	if o == nil {
		return
	}
	_ = o.cmd.Process.Kill() // an error only where it has exited already
	<-o.exited
	_ = os.RemoveAll(filepath.Dir(certDir))
}

// Cleanup removes the operator this process built, if any (a TestMain's last step).
func Cleanup() { operator.Cleanup() }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
