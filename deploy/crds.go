// Package deploy holds what installs Allot on a cluster; today the CRD manifests, which
// controller-gen writes from ../api (make generate) and the embedded cluster installs.
package deploy

import "embed"

// CRDs are the CustomResourceDefinitions of allot.dev.
//
//go:embed crds/*.yaml
var CRDs embed.FS
