// Package multicluster is Allot's manager over several clusters (docs/multicluster.md):
// worker clusters registered as WorkerCluster objects, the manager's Queues kept in step
// on each, and Jobs submitted to the manager dispatched to the worker that can start them
// whole now, as the engine decides over every worker's nodes and pods together.
package multicluster

import "github.com/allot-dev/allot/api/v1alpha1"

// ManagedBy is the value of a Job's spec.managedBy that hands it to the manager: the
// manager cluster's own Job controller leaves it alone, and the manager dispatches it.
const ManagedBy = v1alpha1.MultiClusterManagedBy

const (
	// AnnotationCluster on a manager's Job names the worker cluster it was dispatched to.
	AnnotationCluster = v1alpha1.AnnotationDispatchCluster
	// AnnotationDispatchedAt is when; AnnotationWaiting why it has not started (the
	// manager's reason naming each cluster's obstacle, or the worker's own once there).
	AnnotationDispatchedAt = "allot.dev/dispatched-at"
	AnnotationWaiting      = v1alpha1.AnnotationDispatchWaiting
	// AnnotationCopy is the UID of the copy made on the worker: once it is there, a copy
	// gone from the worker is not made again (it may have run, and its TTL removed it).
	AnnotationCopy = "allot.dev/copy"
	// AnnotationRedispatch "never" leaves a Job whose cluster was lost waiting instead of
	// dispatching it again elsewhere (work that must not run twice even in part).
	AnnotationRedispatch = "allot.dev/redispatch"
	// LabelOrigin on a worker's copy of a Job (and its pods) is the UID of the manager's
	// Job it copies.
	LabelOrigin = "allot.dev/origin"
	// LabelManagedBy on a worker's Queue names the manager that keeps it; a Queue without
	// it is the worker admin's own, which the manager never overwrites.
	LabelManagedBy = "allot.dev/managed-by"
	// AnnotationManagerSpec on a worker's Queue is a digest of the spec the manager last
	// wrote: a spec that no longer matches it was changed there, a conflict.
	AnnotationManagerSpec = "allot.dev/manager-spec"
	// AnnotationFenced on a worker's copy says the worker suspended it itself because the
	// manager's lease ran out (fence.go).
	AnnotationFenced = "allot.dev/fenced"
)

// LabelNodeCluster is the label every node of the manager's union carries: its cluster.
// It is the widest level of every dispatched job's topology, so that a gang is never
// split across clusters.
const LabelNodeCluster = "allot.dev/cluster"
