package workload

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// LeaderWorkerSets are sigs.k8s.io/lws's resource. An LWS runs replicas groups; each group
// is a leader pod (made by the leader StatefulSet the LWS owns) and size-1 workers (made by
// a StatefulSet the leader pod owns, named after it). A group is a gang of its own, named
// after its leader pod: <lws>-<group index>.
var LeaderWorkerSets = schema.GroupVersionResource{Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"}

// lwsShape: whether the groups' pods are Allot's, and the pods of one group that Allot
// schedules. Under startupPolicy LeaderReady the LWS controller makes a group's workers only
// once its leader is ready: a gang of the whole group would wait for pods that are never
// made, so the gang's minimum is the leader alone and the workers join it as elastic
// members. The leader's pod is made from leaderTemplate, or from workerTemplate where there
// is none; a leader on another scheduler is not in the gang (it would wait for it forever),
// nor are workers on another scheduler.
func lwsShape(u *unstructured.Unstructured) (bool, int64) {
	tmpl, _, _ := unstructured.NestedMap(u.Object, "spec", "leaderWorkerTemplate")
	workers := allots(tmpl, "workerTemplate")
	leader := workers
	if _, has, _ := unstructured.NestedMap(tmpl, "leaderTemplate"); has {
		leader = allots(tmpl, "leaderTemplate")
	}
	size := max(intOr(tmpl, 1, "size"), 1)
	var pods int64
	if leader {
		pods = 1
	}
	if workers {
		if p, _, _ := unstructured.NestedString(u.Object, "spec", "startupPolicy"); p != "LeaderReady" || !leader {
			pods += size - 1
		}
	}
	return leader || workers, pods
}

// LWSGroup is the gang of the LWS group whose leader pod is named leader: the PodGroup's
// name is the leader pod's (the LWS controller names it <lws>-<group index>, and names the
// group's worker StatefulSet after it).
func LWSGroup(lws string, index int64) string { return fmt.Sprintf("%s-%d", lws, index) }

// syncLWS keeps one PodGroup per group of an LWS: for groups 0..replicas-1, each with
// minMember the group's size and the LWS's queue and topology. Scaling the LWS adds or
// removes whole groups; the PodGroup of a group scaled away goes once its pods are gone (a
// group above replicas may still be a rolling update's surge, whose pods carry their gang's
// size themselves).
func (c *Controller) syncLWS(ctx context.Context, k kind, u *unstructured.Unstructured) {
	ours, size := lwsShape(u)
	if !ours || size < 1 {
		return
	}
	labels := c.withQueue(ctx, u.GetNamespace(), u.GetLabels())
	replicas := intOr(u.Object, 1, "spec", "replicas")
	owner := metav1.OwnerReference{APIVersion: k.gvr.GroupVersion().String(), Kind: k.kind, Name: u.GetName(), UID: u.GetUID()}
	for i := int64(0); i < replicas; i++ {
		c.ensure(ctx, u.GetNamespace(), LWSGroup(u.GetName(), i), labels, u.GetAnnotations(), size, nil, owner)
	}
	c.pruneLWS(ctx, u, replicas)
}

// pruneLWS deletes the PodGroups of groups at or above replicas that no pod uses any more.
func (c *Controller) pruneLWS(ctx context.Context, u *unstructured.Unstructured, replicas int64) {
	for _, o := range c.groups.GetStore().List() {
		pg, ok := o.(*v1alpha1.PodGroup)
		if !ok || pg.Namespace != u.GetNamespace() {
			continue
		}
		ref := metav1.GetControllerOfNoCopy(pg)
		if ref == nil || ref.UID != u.GetUID() {
			continue
		}
		idx, err := strconv.ParseInt(strings.TrimPrefix(pg.Name, u.GetName()+"-"), 10, 64)
		if err != nil || idx < replicas {
			continue
		}
		l, err := c.client.CoreV1().Pods(pg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelPodGroup + "=" + pg.Name, Limit: 1})
		if err != nil || len(l.Items) > 0 {
			continue
		}
		uid := pg.UID
		err = c.allot.AllotV1alpha1().PodGroups(pg.Namespace).Delete(ctx, pg.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		c.wrote("delete", err)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			slog.Warn("allot workload: pod group", "group", pg.Namespace+"/"+pg.Name, "err", err)
		}
	}
}
