package scheduler

import (
	"encoding/binary"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Other schedulers' pods repeat themselves: the replicas of a Deployment or a Job carry the
// same labels, the same owner and the same requests, yet each arrives decoded on its own,
// with maps of its own. A map is the largest part of a trimmed pod after the Pod and
// Container structs (a ResourceList of two entries is about 700 bytes, a label set of one
// about 340), so the informer's cache holds one copy of each set, shared by every pod that
// carries it. The cache's objects are read, never written (client-go's rule for informer
// caches), so sharing is safe; BenchmarkFirstSnapshot140k measures what it saves.
//
// The tables are bounded: a set seen once and never again (a StatefulSet's pod-name label
// makes every set of its pods unique) costs a key until the table is full, and a full table
// is emptied; pods already holding a set keep it.

// internLimit is how many sets each table keeps before it is emptied.
const internLimit = 8192

// shared is the process's tables; the pod informer's transform is their only writer.
var shared = &interner{}

type interner struct {
	mu           sync.Mutex
	labelSets    map[string]map[string]string
	resourceSets map[string]corev1.ResourceList
	ownerSets    map[string][]metav1.OwnerReference
	key          []byte // the set being looked up, written anew for each
}

// labels gives the table's copy of a label set (or node selector) equal to m.
func (in *interner) labels(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.key = in.key[:0]
	for _, k := range slices.Sorted(maps.Keys(m)) {
		in.key = appendField(appendField(in.key, k), m[k])
	}
	return intern(&in.labelSets, in.key, m, maps.Clone)
}

// resources gives the table's copy of a resource list equal to rl: the same names and
// quantities of the same canonical string (so of the same value; of two formats of one
// value, such as 512 and 512 bytes in binary, the first kept is given: every reader
// compares values).
func (in *interner) resources(rl corev1.ResourceList) corev1.ResourceList {
	if len(rl) == 0 {
		return rl
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.key = in.key[:0]
	for _, name := range slices.Sorted(maps.Keys(rl)) {
		q := rl[name]
		in.key = appendField(appendField(in.key, string(name)), q.String())
	}
	return intern(&in.resourceSets, in.key, rl, corev1.ResourceList.DeepCopy)
}

// owners gives the table's copy of an owner list equal to refs.
func (in *interner) owners(refs []metav1.OwnerReference) []metav1.OwnerReference {
	if len(refs) == 0 {
		return refs
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.key = binary.AppendUvarint(in.key[:0], uint64(len(refs)))
	flag := func(b *bool) byte {
		switch {
		case b == nil:
			return '-'
		case *b:
			return 't'
		}
		return 'f'
	}
	for _, r := range refs {
		for _, s := range []string{r.APIVersion, r.Kind, r.Name, string(r.UID)} {
			in.key = appendField(in.key, s)
		}
		in.key = append(in.key, flag(r.Controller), flag(r.BlockOwnerDeletion))
	}
	return intern(&in.ownerSets, in.key, refs, func(refs []metav1.OwnerReference) []metav1.OwnerReference {
		out := make([]metav1.OwnerReference, len(refs))
		for i := range refs {
			refs[i].DeepCopyInto(&out[i])
		}
		return out
	})
}

// intern gives the table's value under key, after storing a copy of v there if there is
// none: the table's sets are its own, so that a caller writing its object afterwards (a
// test reusing it) changes no other pod. The lookup of string(key) copies nothing.
func intern[V any](table *map[string]V, key []byte, v V, clone func(V) V) V {
	if kept, ok := (*table)[string(key)]; ok {
		return kept
	}
	if *table == nil || len(*table) >= internLimit {
		*table = make(map[string]V)
	}
	v = clone(v)
	(*table)[string(key)] = v
	return v
}

// appendField appends s to a key, after its length: no two different sequences of fields
// make one key, whatever bytes the fields hold (an owner's name or UID may hold any).
func appendField(key []byte, s string) []byte {
	return append(binary.AppendUvarint(key, uint64(len(s))), s...)
}
