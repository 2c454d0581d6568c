package localcluster

import (
	"context"
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/profile"
)

// startDefaultScheduler runs the upstream kube-scheduler (its default profile, the
// default-scheduler name) in this process, so that pods Allot does not schedule (an
// operator's, kube-system add-ons, anything without schedulerName: allot) run as on any
// cluster. It sees Allot's GPUs as taken: whole-GPU pods request nvidia.com/gpu, and each
// shared GPU is held by a reservation pod that does.
func startDefaultScheduler(ctx context.Context, rc *rest.Config) (<-chan error, error) {
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = 200, 400
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	factory := scheduler.NewInformerFactory(client, 0)
	dfactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	sched, err := scheduler.New(ctx, client, factory, dfactory, profile.NewRecorderFactory(broadcaster))
	if err != nil {
		return nil, fmt.Errorf("kube-scheduler: %w", err)
	}
	broadcaster.StartRecordingToSink(ctx.Done())
	factory.Start(ctx.Done())
	dfactory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	dfactory.WaitForCacheSync(ctx.Done())
	done := make(chan error, 1)
	go func() {
		defer close(done)
		defer broadcaster.Shutdown()
		sched.Run(ctx)
	}()
	return done, nil
}
