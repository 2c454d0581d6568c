package localcluster

import (
	"context"
	"fmt"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/controller/job"
)

// startControllers runs the controllers of kube-controller-manager the embedded cluster
// needs: today the Job controller, which creates a batch Job's pods for Allot to schedule.
func startControllers(ctx context.Context, rc *rest.Config) error {
	cfg := rest.CopyConfig(rc)
	cfg.UserAgent = "kube-controller-manager/allot-embedded"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	jc, err := job.NewController(ctx, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), client)
	if err != nil {
		return fmt.Errorf("job controller: %w", err)
	}
	factory.Start(ctx.Done())
	go jc.Run(ctx, 4)
	return nil
}
