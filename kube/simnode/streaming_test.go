package simnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/kube/localcluster"
)

// TestKubeletEndpoint: each simulated node advertises the kubelet endpoint; the API server
// reaches it with its kubelet client certificate for a workspace pod's log (the URL with
// its token), and a client without that certificate is turned away.
func TestKubeletEndpoint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c, err := localcluster.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); c.Stop() }()
	client := kubernetes.NewForConfigOrDie(c.Config)
	if err := Create(ctx, client, Spec{Prefix: "gpu", Count: 1, GPUs: 1, GPUType: "H100", GPUMemoryMi: 81920, CPU: "8", Memory: "64Gi"}); err != nil {
		t.Fatal(err)
	}
	go NewKubelet(client).Run(ctx)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nb", Namespace: "default", Annotations: map[string]string{AnnotationHTTP: "8888"}},
		Spec: corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "main", Image: "jupyter"}}}}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var port int32
	var log string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "gpu-1", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		port = n.Status.DaemonEndpoints.KubeletEndpoint.Port
		b, err := client.CoreV1().Pods("default").GetLogs("nb", &corev1.PodLogOptions{}).DoRaw(ctx)
		log = fmt.Sprint(string(b), err)
		return err == nil && strings.Contains(log, "http://127.0.0.1:8888/lab?token="), nil
	})
	if err != nil {
		t.Fatalf("the workspace's log through the API server: %v (kubelet port %d, last: %s)", err, port, log)
	}
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := plain.Get(fmt.Sprintf("https://127.0.0.1:%d/containerLogs/default/nb/main", port))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a client without the API server's certificate was answered: %s", resp.Status)
	}
}
