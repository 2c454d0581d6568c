package submission

import (
	"context"
	"fmt"
	"strings"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/submit"
	"github.com/allot-dev/allot/mig"
)

// chooseMIGStrategy decides how submit --mig asks a fixed layout's instances, where
// --mig-strategy leaves it open or says single: the device plugin's mixed strategy gives
// them as nvidia.com/mig-<profile>, its single strategy as nvidia.com/gpu on nodes whose
// GPU Feature Discovery product is "<model>-MIG-<profile>", which the pod must pin. Left
// open, the nodes decide: the single strategy's where only its nodes have the profile,
// else the mixed strategy's (its resource names the profile, and a pod asks one way only),
// said in note when single-strategy nodes have the profile too. Single reads the products
// to pin from the nodes, or with --dry-run from --gpu-type's models. Unchanged for
// --mig-strategy mixed, for a value that is none (Objects refuses it) and without --mig.
func chooseMIGStrategy(ctx context.Context, cl Clients, s *submit.Spec, dryRun bool) (note string, err error) {
	if s.MIG == "" || (s.MIGStrategy != "" && s.MIGStrategy != submit.MIGStrategySingle) {
		return "", nil
	}
	if _, _, err := mig.ParseName(s.MIG); err != nil {
		return "", nil // not a profile: Objects says so, naming --mig
	}
	if dryRun {
		if s.MIGStrategy == submit.MIGStrategySingle {
			for _, m := range s.Request().Models {
				s.MIGProducts = append(s.MIGProducts, m+"-MIG-"+s.MIG)
			}
		}
		return "", nil // left open: the mixed strategy's, as the cluster is not read
	}
	nodes, err := cl.nodes(ctx)
	if err != nil {
		return "", err
	}
	off := inspect.FixedMIGOffer(nodes, s.Request())
	switch {
	case s.MIGStrategy == submit.MIGStrategySingle && len(off.Single) == 0:
		r := s.Request()
		r.MIGSingle = true
		if err := inspect.Fits(nodes, r); err != nil {
			return "", err
		}
		return "", fmt.Errorf("--mig %s --mig-strategy single: no single-strategy node has %s instances", s.MIG, s.MIG)
	case s.MIGStrategy == submit.MIGStrategySingle:
		s.MIGProducts = off.Products
		return "", nil
	case len(off.Single) > 0 && len(off.Mixed) == 0:
		s.MIGStrategy, s.MIGProducts = submit.MIGStrategySingle, off.Products
		return fmt.Sprintf("%s instances are on %s, given as %s by the device plugin's single MIG strategy: asked as %s pinned to %s %s",
			s.MIG, strings.Join(off.Single, ", "), v1alpha1.GPUResource, v1alpha1.GPUResource, v1alpha1.LabelGPUProduct, strings.Join(off.Products, " or ")), nil
	case len(off.Single) > 0:
		s.MIGStrategy = submit.MIGStrategyMixed
		return fmt.Sprintf("%s instances asked as the device plugin's mixed strategy gives them, %s%s (on %s); the single strategy's nodes %s have them too, as %s: --mig-strategy single asks those instead",
			s.MIG, v1alpha1.MIGResourcePrefix, s.MIG, strings.Join(off.Mixed, ", "), strings.Join(off.Single, ", "), v1alpha1.GPUResource), nil
	}
	return "", nil
}
