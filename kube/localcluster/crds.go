package localcluster

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/allot-dev/allot/deploy"
)

// installCRDs creates or updates Allot's CRDs and waits until they are served.
func installCRDs(ctx context.Context, rc *rest.Config) error {
	client, err := apiextensions.NewForConfig(rc)
	if err != nil {
		return err
	}
	files, err := fs.Glob(deploy.CRDs, "crds/*.yaml")
	if err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		data, err := deploy.CRDs.ReadFile(f)
		if err != nil {
			return err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		crds := client.ApiextensionsV1().CustomResourceDefinitions()
		existing, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = crds.Create(ctx, &crd, metav1.CreateOptions{})
		case err == nil:
			crd.ResourceVersion = existing.ResourceVersion
			_, err = crds.Update(ctx, &crd, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("installing CRD %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	// All made first, then waited for: the API server establishes them side by side, and
	// a test cluster starts a few tenths of a second sooner than one at a time.
	for _, name := range names {
		if err := WaitEstablished(ctx, client, name); err != nil {
			return err
		}
	}
	return nil
}

// WaitEstablished waits, up to a minute, until the API server has established the CRD
// named: until then it serves none of its objects.
func WaitEstablished(ctx context.Context, client apiextensions.Interface, name string) error {
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRD %s to be established: %w", name, err)
	}
	return nil
}
