// Package client holds the typed clientset (clientset/versioned), listers and informers
// (informers/externalversions) of Allot's own resources, Queue, PodGroup and Topology,
// generated from api/v1alpha1 by make generate; and NewForConfig, which makes the
// clientset from a config that may ask for protobuf.
package client

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/kube/client/clientset/versioned"
)

// NewForConfig is the clientset of Allot's resources for rc. The config of the built-in
// types' client may ask for protobuf (the scheduler's and the benchmarks' do); Allot's
// types have no protobuf encoding (custom resources are served as JSON), and a write
// through such a config fails, so the clientset's copy of rc asks for JSON, as a dynamic
// client's does.
func NewForConfig(rc *rest.Config) (versioned.Interface, error) {
	c := rest.CopyConfig(rc)
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	return versioned.NewForConfig(c)
}

// NewForConfigOrDie is NewForConfig that panics on an error (a config that cannot make
// a client at all).
func NewForConfigOrDie(rc *rest.Config) versioned.Interface {
	c, err := NewForConfig(rc)
	if err != nil {
		panic(err)
	}
	return c
}
