package inspect

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The pods stopped or moved for llama are those whose eviction names its job, in any
// namespace the reader may list: never llama-2's, never another reason's. A reader who may
// list Events in its own namespace only sees the victims there, and is told so.
func TestMadeRoomNamesTheVictimsOfTheJob(t *testing.T) {
	ev := func(ns, pod, reason, msg string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: pod + ".1", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod}, Reason: reason, Message: msg}
	}
	objs := []runtime.Object{
		ev("team-a", "train-1", "Evicted", "reclaimed by queue team-d for job research/llama: team-d is below its fair share"),
		ev("research", "small-0", "Evicted", "preempted by higher-priority job research/llama (priority 100 > 0) in queue team-d"),
		ev("team-b", "web-0", "Evicted", "moved to make room for job research/llama (team-d needs contiguous GPUs)"),
		ev("team-a", "train-2", "Evicted", "reclaimed by queue team-d for job research/llama-2: team-d is below its fair share"),
		ev("team-a", "train-3", "Killing", "reclaimed by queue team-d for job research/llama: stopping"),
	}
	w := &Workload{Name: "llama", Namespace: "research", Pods: []Pod{{Name: "llama-0", Group: "llama"}, {Name: "llama-1", Group: "llama"}}}
	got, all, err := MadeRoom(context.Background(), fake.NewClientset(objs...), w)
	var names []string
	for _, e := range got {
		names = append(names, e.Namespace+"/"+e.InvolvedObject.Name)
	}
	slices.Sort(names)
	if err != nil || !all || strings.Join(names, ",") != "research/small-0,team-a/train-1,team-b/web-0" {
		t.Fatalf("made room: %v (all %v, %v), want small-0, train-1 and web-0", names, all, err)
	}
	limited := fake.NewClientset(objs...)
	limited.PrependReactor("list", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "", nil)
		}
		return false, nil, nil
	})
	got, all, err = MadeRoom(context.Background(), limited, w)
	if err != nil || all || len(got) != 1 || got[0].InvolvedObject.Name != "small-0" {
		t.Fatalf("a reader of research only: %v (all %v, %v), want small-0 and not all", got, all, err)
	}
}
