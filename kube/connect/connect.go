// Package connect reaches a port of a workload's running pod through the API server's
// port-forward, as the identity of the configuration it is given: what `allot open` and
// `allot port-forward` forward to a local port, and what the console's proxy serves to a
// browser (kube/dashboard/connect.go). Nothing of the pod is exposed to the network; the
// API server decides, by RBAC (create on pods/portforward), who may reach it.
package connect

import (
	"bufio"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/kube/inspect"
)

// PickRunning is the running pod which names (a name or an index among the workload's
// pods), or the first running one when which is empty; "" when none runs.
func PickRunning(w *inspect.Workload, which string) string {
	for i, p := range w.Pods {
		if p.Phase == string(corev1.PodRunning) && (which == "" || which == p.Name || which == strconv.Itoa(i)) {
			return p.Name
		}
	}
	return ""
}

// PodStates says where a workload's pods are: "pod nb-0 Pending (reason)", or that it has
// none.
func PodStates(w *inspect.Workload) string {
	if len(w.Pods) == 0 {
		if w.Reason != "" {
			return "no pod yet (" + w.Reason + ")"
		}
		return "no pod yet"
	}
	var s []string
	for _, p := range w.Pods {
		one := "pod " + p.Name + " " + p.Phase
		if p.Reason != "" {
			one += " (" + p.Reason + ")"
		}
		s = append(s, one)
	}
	return strings.Join(s, ", ")
}

// Port is the port a workspace serves on: the port submitted with --port (or its
// template's tool's), which allot submit writes as its container's port, else the first
// TCP port any container declares.
func Port(name string, p *corev1.Pod) (int, error) {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Protocol == "" || port.Protocol == corev1.ProtocolTCP {
				return int(port.ContainerPort), nil
			}
		}
	}
	return 0, fmt.Errorf("%s declares no port to open (pod %s's containers list none): submit it with --port PORT, or forward one yourself: allot port-forward %s [LOCAL:]REMOTE", name, p.Name, name)
}

// notebookURL finds the URL a notebook server prints with its token (Jupyter's
// "http://host:8888/lab?token=…"), the last one of the log.
var notebookURL = regexp.MustCompile(`https?://[^\s/]+(/[^\s?]*)?\?token=([0-9A-Za-z_-]+)`)

// NotebookToken reads the path and token of the notebook server's URL from the log of the
// pod's first container, when the log has one (empty strings otherwise: not every
// workspace is Jupyter, and not every node serves logs). client is whoever reads the log:
// the person, so that a token is read only by someone who may read the pod's log.
func NotebookToken(ctx context.Context, client kubernetes.Interface, p *corev1.Pod) (path, token string) {
	container := ""
	if len(p.Spec.Containers) > 0 {
		container = p.Spec.Containers[0].Name
	}
	limit := int64(1 << 20)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, LimitBytes: &limit}).Stream(ctx)
	if err != nil {
		return "", ""
	}
	defer stream.Close()
	s := bufio.NewScanner(stream)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		if m := notebookURL.FindStringSubmatch(s.Text()); m != nil {
			path, token = m[1], m[2]
		}
	}
	return path, token
}
