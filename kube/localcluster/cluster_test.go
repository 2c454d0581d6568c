package localcluster

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func TestControlPlaneServesAndKeepsState(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c, err := Start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := c.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rc)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-1"}}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.Stop()

	c2, err := Start(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Stop()
	client2 := kubernetes.NewForConfigOrDie(c2.Config)
	if _, err := client2.CoreV1().Nodes().Get(ctx, "dgx-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("node lost across restart: %v", err)
	}
}
