package ecosystem

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/allot-dev/allot/kube/localcluster"
)

// InstallCRDs creates or updates every CustomResourceDefinition in the module's CRD
// folders (other files there, such as a kustomization, are skipped) and waits until each
// is established, so that a manager started next finds its kinds served.
func InstallCRDs(ctx context.Context, cfg *rest.Config, moduleDir string, folders []string) error {
	client, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	var names []string
	served := map[string][]string{} // group/version → plural names the API server must list
	for _, folder := range folders {
		files, err := filepath.Glob(filepath.Join(moduleDir, folder, "*.yaml"))
		if err != nil {
			return err
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.Unmarshal(data, &crd); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if crd.Kind != "CustomResourceDefinition" {
				continue
			}
			existing, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				_, err = crds.Create(ctx, &crd, metav1.CreateOptions{})
			case err == nil:
				crd.ResourceVersion = existing.ResourceVersion
				_, err = crds.Update(ctx, &crd, metav1.UpdateOptions{})
			}
			if err != nil {
				return fmt.Errorf("installing CRD %s from %s: %w", crd.Name, f, err)
			}
			names = append(names, crd.Name)
			for _, v := range crd.Spec.Versions {
				if v.Served {
					gv := crd.Spec.Group + "/" + v.Name
					served[gv] = append(served[gv], crd.Spec.Names.Plural)
				}
			}
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("no CRD found in %s under %s", strings.Join(folders, ", "), moduleDir)
	}
	for _, name := range names {
		if err := localcluster.WaitEstablished(ctx, client, name); err != nil {
			return err
		}
	}
	// An established CRD reaches discovery a moment later; a manager that starts before
	// then finds no such kind and logs errors until it does.
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	for gv, plurals := range served {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			list, err := disco.ServerResourcesForGroupVersion(gv)
			if err != nil {
				return false, nil
			}
			listed := map[string]bool{}
			for _, r := range list.APIResources {
				listed[r.Name] = true
			}
			for _, p := range plurals {
				if !listed[p] {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for %s %v in discovery: %w", gv, plurals, err)
		}
	}
	return nil
}
