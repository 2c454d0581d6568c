package inspect

import (
	"context"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// roomReason is the Event the scheduler writes on a pod it stops or moves for another job,
// naming that job: "reclaimed by queue Q for job NAMESPACE/GROUP: …", "preempted by
// higher-priority job …", "moved to make room for job …".
const roomReason = "Evicted"

// MadeRoom returns the Events of pods the scheduler stopped or moved to make room for the
// workload, oldest first: other teams' pods reclaimed for it, its own queue's preempted,
// pods moved to free contiguous GPUs. They are written in the victims' namespaces; those
// the reader may not list are left out (a researcher with edit in one namespace sees the
// victims there only), which all false says.
func MadeRoom(ctx context.Context, client kubernetes.Interface, w *Workload) (out []corev1.Event, all bool, err error) {
	var jobs []string
	for _, p := range w.Pods {
		if p.Group != "" && !slices.Contains(jobs, w.Namespace+"/"+p.Group) {
			jobs = append(jobs, w.Namespace+"/"+p.Group)
		}
	}
	if len(jobs) == 0 {
		return nil, true, nil
	}
	all = true
	l, err := client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		all = false
		l, err = client.CoreV1().Events(w.Namespace).List(ctx, metav1.ListOptions{})
	}
	if err != nil {
		return nil, all, err
	}
	for _, e := range l.Items {
		if e.InvolvedObject.Kind != "Pod" || e.Reason != roomReason {
			continue
		}
		for _, j := range jobs {
			// The job's name ends at a space, a colon or a parenthesis: llama never matches
			// the events of llama-2.
			if i := strings.Index(e.Message, "job "+j); i >= 0 {
				if rest := e.Message[i+len("job "+j):]; rest == "" || strings.ContainsAny(rest[:1], " :(,;") {
					out = append(out, e)
					break
				}
			}
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return EventTime(out[a]).Before(EventTime(out[b])) })
	return out, all, nil
}
