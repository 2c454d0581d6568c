package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ContainerLog is what a container of p wrote in its latest run, read from the file the
// node's kubelet keeps (/var/log/pods/<namespace>_<name>_<uid>/<container>/<restarts>.log,
// CRI format): the kubelet serves no API here (kubelet.go), so kubectl logs cannot.
func ContainerLog(p *corev1.Pod, container string) (string, error) {
	files, _ := filepath.Glob(filepath.Join("/var/log/pods", p.Namespace+"_"+p.Name+"_"+string(p.UID), container, "*.log"))
	if len(files) == 0 {
		return "", os.ErrNotExist
	}
	latest, n := files[0], -1
	for _, f := range files { // <restarts>.log: 10 sorts before 9
		if r, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(f), ".log")); err == nil && r > n {
			latest, n = f, r
		}
	}
	data, err := os.ReadFile(latest)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		// <time> <stream> <P|F> <text>
		if f := strings.SplitN(line, " ", 4); len(f) == 4 {
			out.WriteString(f[3])
			if f[2] == "F" {
				out.WriteString("\n")
			}
		}
	}
	return out.String(), nil
}

// PodState says in a line where a pod is: its phase, and each container's (init ones
// first) readiness, restarts and state, with the reason and message of one that waits or
// ended. What a test that waited in vain prints.
func PodState(p *corev1.Pod) string {
	if p == nil {
		return "(no pod)"
	}
	parts := []string{string(p.Status.Phase)}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		state := "running"
		switch {
		case cs.State.Waiting != nil:
			state = "waiting " + cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message
		case cs.State.Terminated != nil:
			state = fmt.Sprintf("terminated %s (%d): %s", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode, cs.State.Terminated.Message)
		case cs.State.Running == nil:
			state = "not started"
		}
		parts = append(parts, fmt.Sprintf("%s ready=%t restarts=%d %s", cs.Name, cs.Ready, cs.RestartCount, state))
	}
	return strings.Join(parts, "; ")
}
